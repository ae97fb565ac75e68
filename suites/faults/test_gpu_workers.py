"""The pytest GPU-worker plugin (``suites/plugins/gpu_workers.py``) under pytest-xdist: a GPU per worker;
a crash, a hang past ``--test-timeout`` or a broken CUDA context ends only its own worker."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from suites.claims import REPO, nested_pytest_environment
from suites.plugins import gpu_workers


def _pytest_xdist(test_file, *words):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist",
                           "-c", str(REPO / "pyproject.toml"), "--rootdir", str(REPO), str(test_file), *words],
                          capture_output=True, text=True, cwd=REPO, env=nested_pytest_environment())


@pytest.mark.cpu
def test_each_worker_gets_the_least_held_gpu(monkeypatch):
    held = {}
    for worker in ("gw0", "gw1"):
        held[worker] = gpu_workers.least_held_gpu(["4", "5"], held)
    assert held == {"gw0": "4", "gw1": "5"}
    del held["gw1"]  # gw1 crashed: its replacement takes the GPU it freed
    assert gpu_workers.least_held_gpu(["4", "5"], held) == "5"
    assert gpu_workers.least_held_gpu([], held) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert gpu_workers.visible_gpus() == ["2", "3"]
    gpu_workers.pin_gpu({"workerid": "gw1", "kparity_gpu": "3"})
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"


@pytest.mark.cpu
def test_a_crash_or_a_hang_fails_its_test_and_a_fresh_worker_runs_the_rest(tmp_path):
    probe = tmp_path / "test_probe_faults.py"
    probe.write_text(textwrap.dedent("""
        import os, time
        import pytest
        pytestmark = pytest.mark.cpu
        def test_1_before():
            pass
        def test_2_crashes():
            os.abort()
        def test_3_hangs():
            time.sleep(600)
        def test_4_after():
            pass
    """))
    run = _pytest_xdist(probe, "-n", "1", "--test-timeout", "8")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 failed, 2 passed" in out, out
    assert "test_2_crashes - worker 'gw0' crashed" in out and "test_3_hangs - worker 'gw1' crashed" in out, out


@pytest.mark.sm90
def test_xdist_workers_each_see_their_own_gpu(tmp_path):
    gpus = gpu_workers.visible_gpus()
    if len(gpus) < 2:
        pytest.skip(f"needs 2 GPUs; this machine shows {len(gpus)}")
    probe = tmp_path / "test_probe_gpus.py"
    probe.write_text(textwrap.dedent(f"""
        import os, time
        import pytest, torch
        pytestmark = pytest.mark.sm90
        @pytest.mark.parametrize("i", range(4))
        def test_gpu(i):
            assert torch.cuda.device_count() == 1
            with open({str(tmp_path / "seen")!r} + os.environ["PYTEST_XDIST_WORKER"], "w") as f:
                f.write(os.environ["CUDA_VISIBLE_DEVICES"])
            time.sleep(1)
    """))
    run = _pytest_xdist(probe, "-n", "2", "-m", "sm90")
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted((tmp_path / f"seengw{i}").read_text() for i in range(2)) == sorted(gpus[:2])


@pytest.mark.sm90
def test_a_broken_cuda_context_ends_its_worker_not_the_next_test(tmp_path):
    probe = tmp_path / "test_probe_sticky.py"
    probe.write_text(textwrap.dedent("""
        import pytest, torch
        from suites.faults.faulty_kernels import wild_store
        pytestmark = pytest.mark.sm90
        def test_1_illegal_address():
            wild_store(4, "cuda")
        def test_2_after():
            assert torch.ones(4, device="cuda").sum().item() == 4
    """))
    run = _pytest_xdist(probe, "-n", "1", "-m", "sm90")
    out = run.stdout + run.stderr
    assert "left this process's CUDA context broken" in out, out
    assert "test_2_after PASSED" in out or "1 passed" in out, out
