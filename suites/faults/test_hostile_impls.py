"""Hostile implementations (``hostile_impls.py``) never end in exit 0 or a certificate; a correct one does.

Each runs through the real path: ``tools/certify-cells --impl`` as a process of its own where the exit status
is the point (ending the process, an exit hook; forked from an interpreter with torch imported:
``suites.processes.preloaded_run``), else the engine's ``execute`` (what a certify-cells worker runs: the
battery here, the implementation in its host).  The cell is greedy_argmax's small-batch one on
its fixed corners, so each takes seconds.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from suites.certification import machine_device
from suites.claims import REPO
from suites.processes import preloaded_run
from tools.engine.impl_executor import WARMUP_MAX_LOG2, ImplementationHost, draw_warmup
from tools.engine.worker import CellTask, execute

HOSTILE = "suites.faults.hostile_impls"
CORRECT = "suites.sampling.greedy_argmax_impls:correct_via_max"
CELL = "decode_small_batch"


def _certify(impl: str, device: str = "cpu", *words: str):
    run = preloaded_run(["tools/certify-cells", "--op", "greedy_argmax", "--cell", CELL, "--device", device,
                         "--max-examples", "0", "--no-shrink", "--json", "--impl", impl, *words], REPO)
    report = json.loads(run.stdout) if run.stdout.strip().startswith("{") else None
    return run, report


def _judged(name: str, device: str = "cpu", max_examples: int = 0):
    return execute(CellTask("greedy_argmax", CELL, device, f"{HOSTILE}:{name}", max_examples, shrink=False,
                            call_limit_s=120))


@pytest.mark.cpu
@pytest.mark.parametrize("name, says", [
    ("exits_during_call", "ended (exit status 0)"),
    ("os_exits_during_call", "ended (exit status 0)"),
    ("exit_hook_only", "differ"),
])
def test_ending_the_process_or_an_exit_hook_is_exit_1(name, says):
    run, report = _certify(f"{HOSTILE}:{name}")
    assert run.returncode == 1, run.stdout + run.stderr
    (result,) = report["results"]
    assert result["status"] == "failed" and says in result["failure"]["message"], result
    assert "reproduce" not in run.stdout  # --json: the report only, with the failure in it


@pytest.mark.cpu
def test_a_correct_implementation_still_passes():
    run, report = _certify(CORRECT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [r["status"] for r in report["results"]] == ["passed"]   # an --impl run is never certified


@pytest.mark.cpu
@pytest.mark.parametrize("name, oracle, says", [
    ("patches_the_judge_from_a_thread", "parity", "differ"),
    ("patches_the_reference", "parity", "differ"),
    ("right_only_under_a_harness", "parity", "differ"),
    ("fakes_equality_with_a_subclass", "parity", "hostile_impls.AlwaysEqual: the contract's outputs are exactly"),
    ("answers_without_facts", "parity", "sent what the judge does not accept: facts of the outputs"),
    ("answers_an_output_beyond_its_bytes", "parity", "outside the 8 bytes it came in"),
    ("answers_that_its_host_failed", "parity", "in the implementation's process raised builtins.KeyError"),
    ("returns_an_object_whose_facts_raise", "parity", "a tuple of (suites.faults.hostile_impls._FactsRaise)"),
    ("raises_as_the_judge", "parity", "raised Exception: the judge's own code failed"),
])
def test_a_hostile_implementation_fails_its_cell(name, oracle, says):
    result = _judged(name)
    assert result.status == "failed", result.record()
    assert result.failure.oracle == oracle and says in result.failure.message, result.record()
    assert result.failure.recipe, "a failure names its example"


@pytest.mark.cpu
def test_a_judges_class_found_under_another_modules_name_is_not_rebuilt(monkeypatch):
    """An exception whose class names itself ``__main__.JudgeError``, where the judge's ``__main__`` imported
    JudgeError: skipped by class, not only by module, and rebuilt as its next base."""
    import types

    from oracles.judge_errors import JudgeError
    from tools.engine.impl_executor import _exception

    main = types.ModuleType("__main__")
    main.JudgeError = JudgeError
    monkeypatch.setitem(sys.modules, "__main__", main)
    error = _exception({"type": "__main__.JudgeError", "mro": ["__main__.JudgeError", "builtins.Exception"],
                        "message": "the judge's own code failed (a hostile control)"})
    assert type(error) is Exception and str(error) == "the judge's own code failed (a hostile control)"


@pytest.mark.cpu
def test_writing_an_input_lands_in_the_judges_memory_and_fails():
    """The host writes a shared copy; the judge copies it back and sees it.  Batch invariance hands the
    implementation views of the example itself, so the zeroed rows may fail it before the write guards."""
    result = _judged("modifies_its_input")
    assert result.status == "failed", result.record()
    assert ("modified inputs" in result.failure.message if result.failure.oracle == "write_guards"
            else result.failure.oracle == "batch_invariance"), result.record()


@pytest.mark.cpu
@pytest.mark.sm90
def test_a_write_after_the_return_fails():
    """Whether the thread writes before the host's copy of the output (a right answer, seen changing later
    by an oracle) or after (a wrong answer), the cell fails."""
    result = _judged("writes_after_returning", machine_device().type, max_examples=2)
    assert result.status == "failed", result.record()
    assert any(says in result.failure.message for says in ("changed after the call returned", "differ")), \
        result.record()


@pytest.mark.sm90
@pytest.mark.parametrize("name, oracle, says", [
    ("leaves_work_on_a_side_stream", "parity", "changed after the call returned"),
    ("answers_on_the_cpu", "parity", "on cpu: the call ran on cuda"),
])
def test_gpu_hostile_implementations_fail_their_cell(name, oracle, says):
    result = _judged(name, "cuda")
    assert result.status == "failed", result.record()
    assert result.failure.oracle == oracle and says in result.failure.message, result.record()


@pytest.mark.sm90
def test_results_cached_by_input_address_fail_graph_parity_or_parity():
    """Inputs are copied into memory the judge reuses, so the cache serves stale answers to eager calls
    too; whichever oracle meets it first, the cell fails."""
    result = _judged("caches_by_input_address", "cuda", max_examples=3)
    assert result.status == "failed", result.record()
    assert result.failure.oracle in ("parity", "determinism", "batch_invariance", "graph_parity"), result.record()


SPOTTERS = ("right_only_for_a_judges_child", "right_only_for_a_c_program", "right_only_beside_host_modules",
            "right_only_on_shared_inputs")


def _logits() -> torch.Tensor:
    """Rows whose maximum is never at index 0: the wrong answer (all zeros) differs in every row."""
    logits = torch.randn(4, 300)
    logits[torch.arange(4), torch.tensor([5, 77, 150, 299])] = 100.0
    return logits


@pytest.mark.cpu
def test_an_implementation_that_spots_its_host_answers_as_in_serving():
    """Each tells the judge's host by one fingerprint (its parent's command line, its own, the modules
    loaded, inputs in shared memory); the host shows none, so each answers as it would in serving: wrongly,
    which parity then finds (``test_a_hostile_implementation_fails_its_cell`` judges that path)."""
    from suites.faults.judge_spotting import _wrong

    logits = _logits()
    host = ImplementationHost("cpu", call_limit_s=60, warmup=0)
    try:
        host.load([str(REPO)], {name: (HOSTILE, name) for name in SPOTTERS})
        for name in SPOTTERS:
            assert torch.equal(host.function(name)(logits), _wrong(logits)), f"{name} spotted the host"
    finally:
        host.close()


@pytest.mark.cpu
def test_the_fingerprints_show_where_a_judge_has_them():
    """The negative control of the test above: a child of this process started as ``python -c`` (the host
    as it was), this process's modules and a shared tensor each show their fingerprint."""
    from suites.faults import judge_spotting

    check = "from suites.faults import judge_spotting as h; import sys; print(h.parent_looks_like_the_judge(), " \
            "sys.argv == ['-c'])"
    # a parent whose command line names the project, as the judge's does, starting a ``-c`` program
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {check!r}])"
    child = subprocess.run([sys.executable, "-c", parent, str(REPO)], cwd=REPO, capture_output=True, text=True)
    assert child.stdout.split() == ["True", "True"], child.stdout + child.stderr
    assert judge_spotting.host_modules_loaded()
    shared = _logits().share_memory_()
    assert torch.equal(judge_spotting.right_only_on_shared_inputs(shared), judge_spotting._right(shared))


@pytest.mark.cpu
def test_a_folder_beside_the_project_names_no_judge():
    """The fingerprints' own control: an interpreter in ``<project>-venv`` (a fresh clone's venv beside it)
    runs the judge and serving alike, so it names no judge (whatever the project's folder is called); the
    project, the paths inside it, and a judge's word after such a folder do."""
    from suites.faults.judge_spotting import PROJECT, _names_the_judge

    assert not _names_the_judge(f"{PROJECT}-venv/bin/python") and not _names_the_judge(f"{PROJECT}.old/main.py")
    assert _names_the_judge(PROJECT) and _names_the_judge(f"{PROJECT}/tools/certify-cells")
    assert _names_the_judge(f"PYTHONPATH={PROJECT}:/opt/lib") and _names_the_judge(f"{PROJECT}-venv/bin/pytest")


@pytest.mark.cpu
def test_right_for_the_first_5000_calls_is_caught_by_the_warm_up(monkeypatch):
    """A host that warms up 5000 calls before judging meets the wrong answers on its first judged call,
    where the same call as a process's first (the control, here) is right.  (No time limit on the warm-up
    here: this machine's speed must not decide the test.)"""
    from suites.faults.judge_spotting import _right, right_for_the_first_5000_calls
    from tools.engine import impl_executor

    monkeypatch.setitem(impl_executor.WARMUP_LIMIT_S, "cpu", 600.0)
    logits = _logits()
    assert torch.equal(right_for_the_first_5000_calls(logits), _right(logits))
    host = ImplementationHost("cpu", call_limit_s=300, warmup=5000)
    try:
        host.load([str(REPO)], {"f": (HOSTILE, "right_for_the_first_5000_calls")})
        assert not torch.equal(host.function("f")(logits), _right(logits))
    finally:
        host.close()


@pytest.mark.cpu
def test_the_number_of_warm_up_calls_is_not_predictable():
    draws = [draw_warmup() for _ in range(400)]
    assert min(draws) >= 0 and max(draws) < 2 ** WARMUP_MAX_LOG2
    assert len(set(draws)) > 100
    # every order of magnitude of "right for the first N calls" is met by some hosts
    assert all(any(10 ** k <= d < 10 ** (k + 1) for d in draws) for k in range(4))
