"""The judge's own errors are the judge's (issue #24.1), and shrinking stays inside the contract (#24.5).

- An exception of the judge's side — a comparison, the reference, the host's transfer — ends the run as an
  internal error: ``tools/certify-cells`` exits 3 with ``internal error: ...`` and a reproduction, and
  writes no certificate and no report.  The control: the implementation raising is still its finding.
- Running out of memory, in the implementation's call or the judge's, is the machine's: an internal error
  too.  The control: another RuntimeError of the implementation's (a CUDA error) is its finding.
- A failing corner or draw is never shrunk to a recipe the contract refuses: an implementation that is
  wrong on large inputs and asserts on refused ones shrinks to a legal recipe, its numerics finding.
"""
from __future__ import annotations

import socket
import threading
from multiprocessing.connection import Connection

import hypothesis
import pytest
import torch

import oracles.parity
from ops.norm.rms_norm_gated import ENTRY as RMS_NORM
from ops.sampling.greedy_argmax import ENTRY as ARGMAX
from oracles.battery import Battery, Implementation, _Shrink, run_cell
from oracles.judge_errors import JudgeError, gpu_fault
from references.norm.rms_norm_gated import rms_norm_gated as rms_norm_reference
from references.sampling.greedy_argmax import greedy_argmax as argmax_reference
from tools import certify_cells
from tools.engine import certify, isolation, worker
from tools.engine.worker import CellTask, execute

pytestmark = pytest.mark.cpu
CPU = torch.device("cpu")
CELL = "decode_small_batch"
CORRECT = "suites.sampling.greedy_argmax_impls:correct_via_max"
FAULTY = "suites.faults.faulty_kernels"


def _comparison_fails(*args, **kwargs):
    raise RuntimeError("injected: the comparison helper failed")


class Corners:
    """An op's strategy with the corners ``pick`` chooses of a cell's."""

    def __init__(self, strategy, pick=lambda corners: corners[:1]):
        self.recipes, self.build = strategy.recipes, strategy.build
        self.corners = lambda cell, device: pick(strategy.corners(cell, device))


def _certifying_run_ending_internally(monkeypatch, capsys, tmp_path) -> str:
    """A certifying run of the catalog's greedy_argmax that must end as an internal error: exit 3, and neither a
    certificate nor the report written; what it printed on stderr."""
    written = []
    monkeypatch.setattr("ops.certificates.write_section", lambda *args, **kwargs: written.append(args))
    report = tmp_path / "report.json"
    code = certify_cells.main(["--op", "greedy_argmax", "--device", "cpu", "--report", str(report)])
    err = capsys.readouterr().err
    assert code == 3 and not written and not report.exists(), err
    return err


def test_an_injected_comparison_error_exits_3_and_writes_nothing(monkeypatch, capsys, tmp_path):
    """A certifying run of the catalog's greedy_argmax whose bitwise comparison raises: exit 3, the words
    "internal error", a reproduction, and neither a certificate nor the report written."""
    monkeypatch.setattr(oracles.parity, "check_bitwise", _comparison_fails)
    err = _certifying_run_ending_internally(monkeypatch, capsys, tmp_path)
    assert "internal error: the parity oracle's own code raised RuntimeError: injected" in err, err
    reproduce = next(line for line in err.splitlines() if line.strip().startswith("reproduce: "))
    assert "--op greedy_argmax --cell " in reproduce and "--replay" in reproduce, reproduce
    assert "FAILED" not in err


def _faulty_run_ending_internally(kernel: str, capsys, tmp_path) -> tuple[str, str]:
    """A run of ``suites/faults/faulty_kernels.py``'s ``kernel`` on greedy_argmax's small-batch cell that must
    end as an internal error: exit 3, no finding, no report; what it printed (stdout, stderr)."""
    report = tmp_path / "report.json"
    code = certify_cells.main(["--op", "greedy_argmax", "--cell", CELL, "--device", "cpu", "--max-examples", "0",
                               "--no-shrink", "--impl", f"{FAULTY}:{kernel}", "--report", str(report)])
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert "FAILED" not in out and not report.exists(), out + err
    return out, err


def test_the_implementation_out_of_memory_exits_3_and_concludes_nothing(capsys, tmp_path):
    """The implementation's call running out of memory (other processes held the GPU) is a fact about the
    machine: exit 3, "internal error" saying so with the memory as it is now, no finding and no report."""
    out, err = _faulty_run_ending_internally("out_of_memory_on_small_batches", capsys, tmp_path)
    assert "internal error: the implementation's call ran out of memory (OutOfMemoryError: CUDA out of memory." \
        in err, err
    assert "; now the machine has " in err and "nothing is concluded about the implementation" in err, err
    assert "reproduce: " in err


def test_a_host_that_ends_out_of_memory_exits_3_and_concludes_nothing(capsys, tmp_path):
    """A host process that ends with CUDA's out-of-memory words (its context could not be made beside other
    processes) is the machine's, not the kernel's crash; the control is wild_store_on_small_batches, whose crash
    stays its finding (suites/faults/test_isolation.py)."""
    _, err = _faulty_run_ending_internally("dies_out_of_memory_on_small_batches", capsys, tmp_path)
    assert "internal error: the implementation's process ended" in err and ", out of memory: RuntimeError" in err, err
    assert "nothing is concluded about the implementation" in err, err


def test_the_stock_op_out_of_memory_exits_3_and_writes_no_certificate(monkeypatch, capsys, tmp_path):
    """The judge's stock op out of memory is no limit of the stock op's (which would narrow a band op's band):
    a certifying run ends as an internal error, writing nothing."""
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a control)")

    monkeypatch.setattr(ARGMAX, "stock", out_of_memory)
    err = _certifying_run_ending_internally(monkeypatch, capsys, tmp_path)
    assert "internal error: the stock op raised OutOfMemoryError: CUDA out of memory." in err, err
    assert "nothing is concluded about the implementation" in err, err


def test_the_implementation_raising_another_runtime_error_in_its_host_is_its_finding():
    """The control of the out-of-memory: a CUDA error of another kind, raised in the host, is the kernel's."""
    result = execute(CellTask("greedy_argmax", CELL, "cpu", f"{FAULTY}:raises_on_small_batches", 0, shrink=False,
                              call_limit_s=120))
    assert result.status == "failed" and result.failure.oracle == "parity", result.record()
    assert result.failure.message == "raised RuntimeError: CUDA error: an illegal memory access was encountered " \
                                     "(a control)", result.record()


def test_the_implementation_raising_is_still_its_finding():
    """The control: the same run's implementation raising fails the cell (exit 1's finding), no internal error."""
    def raises(logits):
        raise RuntimeError("the kernel's own failure")

    result = run_cell(ARGMAX, Implementation("raises", {ARGMAX.name: raises}), ARGMAX.cell(CELL), CPU,
                      max_examples=0, shrink=False, strategy=Corners(ARGMAX.strategy_module))
    assert result.status == "failed" and result.failure.oracle == "parity", result.record()
    assert result.failure.message == "raised RuntimeError: the kernel's own failure"


def test_an_implementation_in_this_process_out_of_memory_is_an_internal_error():
    """The same rule without a host (suites' controls run implementations in the judge's process)."""
    def out_of_memory(logits):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")

    with pytest.raises(JudgeError, match="out of memory"):
        run_cell(ARGMAX, Implementation("oom", {ARGMAX.name: out_of_memory}), ARGMAX.cell(CELL), CPU,
                 max_examples=0, shrink=False, strategy=Corners(ARGMAX.strategy_module))


@pytest.mark.parametrize("judge_side", ["reference", "truth"])
def test_the_reference_or_the_truth_raising_is_an_internal_error(judge_side, monkeypatch):
    entry = ARGMAX if judge_side == "reference" else RMS_NORM
    monkeypatch.setattr(entry, judge_side, _comparison_fails)
    impl = argmax_reference if judge_side == "reference" else rms_norm_reference
    with pytest.raises(JudgeError, match=f"the {'reference' if judge_side == 'reference' else 'float64 truth'} "
                                         f"raised RuntimeError") as raised:
        run_cell(entry, Implementation("reference", {entry.name: impl}), entry.cells[1], CPU, max_examples=0,
                 shrink=False, strategy=Corners(entry.strategy_module))
    assert raised.value.oracle == "parity" and raised.value.recipe


def test_the_hosts_transfer_failing_is_an_internal_error_not_the_implementations(monkeypatch):
    """The judge's check of a hosted call's outputs raising (what ``_same_bytes`` did on a column view)."""
    monkeypatch.setattr("tools.engine.impl_executor._same_bytes", _comparison_fails)
    with pytest.raises(JudgeError, match="reading the outputs raised RuntimeError: injected") as raised:
        execute(CellTask("greedy_argmax", CELL, "cpu", CORRECT, 0, shrink=False, call_limit_s=120))
    assert (raised.value.op, raised.value.cell_id, raised.value.oracle) == ("greedy_argmax", CELL, "parity")


def test_a_worker_sends_an_internal_error_and_its_parent_raises_it(monkeypatch):
    """Isolated runs: the worker sends ("internal", facts) instead of dying with a traceback (which its
    parent would report as the cell's crash), and the parent raises the JudgeError that ends the run."""
    def fails(task, **kwargs):
        raise worker.internal_error(task, JudgeError("injected", "parity", {"seed": 1}))

    monkeypatch.setattr(worker, "execute", fails)
    monkeypatch.setattr(worker, "start_spare_host", lambda device: None)
    ours, theirs = socket.socketpair()
    parent, child = Connection(ours.detach()), Connection(theirs.detach())
    served = threading.Thread(target=worker.serve, args=(child, "cpu"))
    served.start()
    assert parent.recv() == ("ready",)
    parent.send(("cell", {"op": "greedy_argmax", "cell_id": CELL, "device": "cpu"}))
    served.join(timeout=60)
    kind, facts = parent.recv()
    assert kind == "internal" and facts["message"] == "injected" and facts["oracle"] == "parity"

    class Worker:   # what _drain reads: its connection, its task
        connection, task = None, CellTask("greedy_argmax", CELL, "cpu")

    drained = Worker()
    ours, theirs = socket.socketpair()
    drained.connection, sender = Connection(ours.detach()), Connection(theirs.detach())
    sender.send((kind, facts))
    with pytest.raises(JudgeError, match="injected") as raised:
        isolation._drain(drained, None, None, None, None)
    assert (raised.value.op, raised.value.cell_id, raised.value.recipe) == ("greedy_argmax", CELL, {"seed": 1})


def test_a_replay_recipe_the_contract_refuses_is_a_usage_error():
    entry = RMS_NORM
    cell = entry.cell("per_head_decode")
    recipe = {**entry.strategy_module.corners(cell, CPU)[0], "H": 65, "group_size": 64}
    with pytest.raises(certify.UsageError, match="the contract refuses|outside cell"):
        certify.check_replay_recipe(entry, cell, recipe, CPU)


# -- shrinking stays inside the contract -------------------------------------------------------------------
def wrong_when_wide_and_asserting(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong numbers at 4000 channels and more; an assert (not the contract's error) on a width the contract
    refuses, as third-party kernels do."""
    assert x.shape[1] % group_size == 0, "H must be a multiple of group_size"
    y = rms_norm_reference(x, z, weight, eps, group_size, norm_before_gate, amax)
    return (y.float() * 1.5).to(y.dtype) if x.shape[1] >= 4000 else y


def _odd_corner(strategy, cell):
    """The corner of 65 groups of 64 channels."""
    return next(c for c in strategy.corners(cell, CPU) if c["group_size"] == 64 and c["H"] == 65 * 64)


def test_a_failing_corner_shrinks_to_a_recipe_the_contract_answers():
    """The corner of 65 groups of 64 (H = 4160) halves toward smaller widths; H = 4000 (62.5 groups) is
    refused by the contract, and must not become the minimal finding (the implementation's assert)."""
    cell = RMS_NORM.cell("per_head_decode")
    corner = _odd_corner(RMS_NORM.strategy_module, cell)

    result = run_cell(RMS_NORM, Implementation("wrong wide", {RMS_NORM.name: wrong_when_wide_and_asserting}), cell,
                      CPU, max_examples=0, strategy=Corners(RMS_NORM.strategy_module, lambda corners: [corner]),
                      oracles=("parity",))
    failure = result.failures["parity"]
    assert "AssertionError" not in failure.message, failure.message
    assert failure.recipe["H"] % failure.recipe["group_size"] == 0 and 4000 <= failure.recipe["H"] < 4160, failure.recipe


@pytest.mark.filterwarnings("ignore:Using `assume` outside a property-based test")   # called as Hypothesis would
def test_the_draw_shrinker_skips_a_recipe_the_contract_refuses():
    """Hypothesis' shrinker proposing a refused recipe: rejected (assume), the implementation never called."""
    calls = []
    cell = RMS_NORM.cell("per_head_decode")
    battery = Battery(RMS_NORM, Implementation("counted", {RMS_NORM.name: lambda **kw: calls.append(kw)}), CPU,
                      RMS_NORM.strategy_module, cell=cell)
    refused = {**_odd_corner(RMS_NORM.strategy_module, cell), "H": 4000}
    with pytest.raises(hypothesis.errors.UnsatisfiedAssumption):
        _Shrink(battery, "parity")(refused)
    assert calls == []


def test_a_strategy_drawing_a_refused_input_is_an_internal_error():
    cell = RMS_NORM.cell("per_head_decode")
    refused = {**_odd_corner(RMS_NORM.strategy_module, cell), "H": 4000}
    battery = Battery(RMS_NORM, Implementation("ref", {RMS_NORM.name: wrong_when_wide_and_asserting}), CPU,
                      RMS_NORM.strategy_module, cell=cell)
    with pytest.raises(JudgeError, match="the strategy built an input the contract refuses"):
        battery.judge(refused, ["parity"])



def test_the_judge_gives_back_its_cached_memory_after_every_example(monkeypatch):
    """The implementation runs in another process on the same GPU: after each example, judged or not, the judge
    gives back what its caching allocator keeps past the limit (``suites/faults/test_cached_memory_on_gpu.py``
    checks the limit itself on the GPU)."""
    calls = []
    monkeypatch.setattr("oracles.allocations.give_back_cache", lambda: calls.append(1))
    result = run_cell(ARGMAX, Implementation("reference", {ARGMAX.name: argmax_reference}), ARGMAX.cell(CELL), CPU,
                      max_examples=3, shrink=False, strategy=Corners(ARGMAX.strategy_module, lambda c: c[:2]))
    assert result.status == "certified", result.record()
    assert len(calls) == result.examples + result.refused_examples == 5, (len(calls), result.record())


@pytest.mark.parametrize("message, faulted", [
    ("raised AcceleratorError: CUDA error: an illegal memory access was encountered", True),   # the H100's words
    ("raised RuntimeError: CUDA error: misaligned address", True),                           # FlashInfer's, H200
    ("raised AcceleratorError: CUDA error: unspecified launch failure", True),
    ("raised RuntimeError: CUDA error: device-side assert triggered", True),
    ("raised OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", False),   # the machine's: its own path
    ("output 0: 3 of 8 elements differ; first at (1,): got 4, expected 5", False),
    ("raised ValueError: logits must be 2-D (an illegal shape)", False),
    # an op's own capture error with the text torch appends to every CUDA error (an H100, 2026-12-07d)
    ("the call cannot be captured in a CUDA graph: AcceleratorError: CUDA error: operation failed due to a previous "
     "error during capture\nSearch for `cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com/cuda/"
     "cuda-runtime-api/group__CUDART__TYPES.html for more information.\nCUDA kernel errors might be asynchronously "
     "reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
     "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", False),
])
def test_a_gpu_fault_is_told_by_cudas_words_for_a_lost_context(message, faulted):
    assert gpu_fault(message) is faulted
