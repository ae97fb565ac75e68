"""``tools/certify-cells --sanitize TOOL``: each cell runs under compute-sanitizer and any report fails it.

Negative control (H200): the out-of-bounds store of ``faulty_kernels.py`` is a memcheck finding; the
catalog kernel on the same cell is clean, so the sanitizer run is not failing everything.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from suites.claims import REPO

FAULTY = "suites.faults.faulty_kernels"


def _certify(*words):
    return subprocess.run([sys.executable, "tools/certify-cells", "--op", "greedy_argmax", *words],
                          capture_output=True, text=True, cwd=REPO)


@pytest.mark.cpu
def test_sanitize_without_a_cuda_device_is_a_usage_error():
    run = _certify("--device", "cuda", "--sanitize", "memcheck")
    assert run.returncode == 2 and "no CUDA device" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.sm90
def test_memcheck_fails_the_out_of_bounds_cell(tmp_path):
    report = tmp_path / "report.json"
    run = _certify("--device", "cuda", "--sanitize", "memcheck", "--impl", f"{FAULTY}:wild_store_on_small_batches",
                   "--cell", "decode_small_batch", "--max-examples", "0", "--no-shrink", "--report", str(report))
    assert run.returncode == 1, run.stdout + run.stderr
    [record] = json.loads(report.read_text())["results"]
    assert record["status"] == "failed" and record["sanitizer"]["tool"] == "memcheck", record
    assert any("Invalid __global__ write" in line for line in record["sanitizer"]["report"]), record["sanitizer"]
    assert "wild_store_kernel" in "\n".join(record["sanitizer"]["report"]), record["sanitizer"]


@pytest.mark.sm90
def test_memcheck_passes_the_catalog_kernel(tmp_path):
    report = tmp_path / "report.json"
    run = _certify("--device", "cuda", "--sanitize", "memcheck", "--cell", "decode_small_batch", "--max-examples", "0",
                   "--report", str(report))
    assert run.returncode == 0, run.stdout + run.stderr
    [record] = json.loads(report.read_text())["results"]
    assert "compute-sanitizer" in record["skipped"]["graph_parity"], record


@pytest.mark.cpu
def test_a_sanitized_cell_says_why_graph_parity_is_not_run():
    """On the H200 every capture under compute-sanitizer failed (its stream-ordered allocations do not exist
    until a graph is instantiated), failing the catalog kernel's cell: a sanitized cell skips the oracle,
    saying why, and the unsanitized run (the one that writes certificates) judges graphs."""
    from tools.engine.worker import CellTask, execute

    # one small recipe: the oracle is skipped (or not) per run, not per draw; the cell's corners took 50 s
    # of CI's interpreter for nothing more
    recipe = {"R": 3, "V": 100, "dtype": "float32", "layout": "contiguous", "values": "tail_max", "seed": 5}
    sanitized = execute(CellTask("greedy_argmax", "decode_small_batch", "cpu", sanitizer="memcheck", replay=recipe))
    plain = execute(CellTask("greedy_argmax", "decode_small_batch", "cpu", replay=recipe))
    assert sanitized.status == plain.status == "passed", (sanitized.failure, plain.failure)
    assert "compute-sanitizer --tool memcheck" in sanitized.oracles_skipped["graph_parity"]
    assert "compute-sanitizer" not in plain.oracles_skipped["graph_parity"]
