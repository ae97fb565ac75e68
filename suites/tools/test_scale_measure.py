"""tools/scale-measure: the warm-up run is untimed, speed-ups are over the first timed run, and a cell whose
record differs between GPU counts fails the measurement."""
from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

from tools import scale_measure
from tools.cli import UsageError


def _fake_certify(seconds_by_gpus: dict, status_by_gpus: dict, calls: list, warm_up_status: str = "certified"):
    def certify(gpus, args, report):
        calls.append((gpus, report.name))
        status = warm_up_status if "warm_up" in report.name else status_by_gpus.get(gpus, "certified")
        report.write_text(json.dumps({"device": "NVIDIA H200", "arch": "sm90", "results": [
            {"op": "greedy_argmax", "cell": "decode_small_batch", "status": "certified", "seconds": 1.0},
            {"op": "strict_accept", "cell": "small_batch", "status": status, "seconds": gpus * 2.0,
             "gpu_peak_bytes": gpus << 30}]}))   # measured of the machine, as the seconds: may differ
        return seconds_by_gpus[gpus], 0
    return certify


@pytest.mark.cpu
def test_warm_up_runs_first_on_the_most_gpus_and_is_not_timed(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(scale_measure, "certify", _fake_certify({1: 40.0, 2: 20.0}, {}, calls))
    out = tmp_path / "scale.md"
    assert scale_measure.main(["--gpus", "1,2", "--out", str(out)]) == 0
    assert [gpus for gpus, _ in calls] == [2, 1, 2]
    table = out.read_text()
    assert "| 1 | 40.0 | 2 | 2 | 1.00x |" in table and "| 2 | 20.0 | 2 | 2 | 2.00x |" in table, table
    assert "warm-up" in table and "identical across GPU counts: yes" in table


@pytest.mark.cpu
def test_a_cell_that_differs_between_gpu_counts_fails_the_measurement(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(scale_measure, "certify", _fake_certify({1: 40.0, 2: 20.0}, {1: "failed"}, calls))
    out = tmp_path / "scale.md"
    assert scale_measure.main(["--gpus", "1,2", "--no-warm-up", "--out", str(out)]) == 1
    assert [gpus for gpus, _ in calls] == [1, 2]
    assert "NO: strict_accept/small_batch" in out.read_text()


@pytest.mark.cpu
def test_a_kernels_cell_that_differs_is_found_beside_another_kernel_of_the_same_cell(tmp_path, monkeypatch):
    """An op's kernels share their cells' ids: the CuTe kernel's cell differing between GPU counts is found
    though the Triton kernel's row of the same op and cell follows it and agrees (keyed by op and cell alone,
    that row hid it); the control: both kernels agreeing pass."""
    differs = [True]

    def certify(gpus, args, report):
        cute = "failed" if gpus == 2 and differs[0] else "certified"
        report.write_text(json.dumps({"device": "NVIDIA H200", "arch": "sm90", "results": [
            {"op": "rms_norm_gated", "backend": "cute", "cell": "plain_rms_norm", "status": cute, "seconds": 1.0},
            {"op": "rms_norm_gated", "backend": "triton", "cell": "plain_rms_norm", "status": "certified",
             "seconds": 1.0}]}))
        return 10.0, 0

    monkeypatch.setattr(scale_measure, "certify", certify)
    out = tmp_path / "scale.md"
    assert scale_measure.main(["--gpus", "1,2", "--no-warm-up", "--out", str(out)]) == 1
    assert "NO: rms_norm_gated[cute]/plain_rms_norm" in out.read_text()
    differs[0] = False
    assert scale_measure.main(["--gpus", "1,2", "--no-warm-up", "--out", str(out)]) == 0
    assert "identical across GPU counts: yes" in out.read_text()


@pytest.mark.cpu
def test_a_warm_up_record_that_differs_is_named_as_such_not_as_a_gpu_count_difference(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(scale_measure, "certify", _fake_certify({1: 40.0, 2: 20.0}, {}, calls, warm_up_status="failed"))
    out = tmp_path / "scale.md"
    assert scale_measure.main(["--gpus", "1,2", "--out", str(out)]) == 1
    table = out.read_text()
    assert "identical across GPU counts: yes" in table, table
    assert "warm-up run (cold kernel cache) that differ from the timed runs': strict_accept/small_batch" in table


@pytest.mark.cpu
def test_each_run_is_certify_cells_with_the_workers_backend_and_cell_limit_asked_for(tmp_path, monkeypatch):
    commands = []

    def run(command, cwd):
        commands.append(command)
        report = pathlib.Path(command[command.index("--report") + 1])
        report.write_text(json.dumps({"device": "NVIDIA H200", "arch": "sm90", "results": []}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(scale_measure.subprocess, "run", run)
    out = tmp_path / "scale.md"
    assert scale_measure.main(["--gpus", "1", "-n", "6", "--backend", "triton", "--cell-timeout", "300",
                               "--max-examples", "100", "--no-warm-up", "--out", str(out)]) == 0
    (command,) = commands
    words = " ".join(command[1:])
    assert "--gpus 1 -n 6 --shard 1/1 --max-examples 100" in words and "--backend triton" in words, words
    assert "--cell-timeout 300" in words, words
    assert "6 workers per GPU" in out.read_text() and "(triton kernels)" in out.read_text()


@pytest.mark.cpu
@pytest.mark.parametrize("words, says", [(["-n", "0"], "--workers 0"), (["--cell-timeout", "0"], "--cell-timeout: 0"),
                                         (["--cell-timeout", "inf"], "--cell-timeout: inf")])
def test_bad_flags_are_refused_before_any_run(tmp_path, monkeypatch, words, says):
    monkeypatch.setattr(scale_measure.subprocess, "run", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(UsageError, match=says):
        scale_measure.main(["--gpus", "1", *words, "--out", str(tmp_path / "scale.md")])
