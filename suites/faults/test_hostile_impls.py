"""Hostile implementations (``hostile_impls.py``) never end in exit 0 or a certificate; a correct one does.

Each runs through the real path: ``tools/certify-cells --impl`` as a subprocess where the exit status is
the point (ending the process, an exit hook), else the engine's ``execute`` (what a certify-cells worker
runs: the battery here, the implementation in its host).  The cell is greedy_argmax's small-batch one on
its fixed corners, so each takes seconds.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from suites.certification import machine_device
from suites.claims import REPO
from tools.engine.worker import CellTask, execute

HOSTILE = "suites.faults.hostile_impls"
CORRECT = "suites.sampling.greedy_argmax_impls:correct_via_max"
CELL = "decode_small_batch"


def _certify(impl: str, device: str = "cpu", *words: str):
    run = subprocess.run([sys.executable, "tools/certify-cells", "--op", "greedy_argmax", "--cell", CELL,
                          "--device", device, "--max-examples", "0", "--no-shrink", "--json", "--impl", impl, *words],
                         capture_output=True, text=True, cwd=REPO)
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
])
def test_a_hostile_implementation_fails_its_cell(name, oracle, says):
    result = _judged(name)
    assert result.status == "failed", result.record()
    assert result.failure.oracle == oracle and says in result.failure.message, result.record()
    assert result.failure.recipe, "a failure names its example"


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
