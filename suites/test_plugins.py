"""The pytest plugins: arch markers refuse a run that would skip everything; --test-list runs exactly
its ids and refuses ids that select nothing."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import types

import pytest
from hypothesis import settings

from suites.claims import REPO, nested_pytest_environment
from suites.plugins import gpu_workers

pytestmark = pytest.mark.cpu


def _pytest(*words, rootdir=REPO, env=None):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml"),
                           "--rootdir", str(rootdir), *words],
                          capture_output=True, text=True, cwd=rootdir,
                          env=env or nested_pytest_environment(PYTHONPATH=str(REPO)))


class _Outcomes:
    """A pytest plugin that keeps the node id and outcome of every test a run ran."""

    def __init__(self):
        self.ran: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.ran.append((report.nodeid, report.outcome))


def _pytest_here(monkeypatch, *words) -> tuple[int, str, list[tuple[str, str]]]:
    """pytest ``words`` on this repository, in this process (whose suites are imported already, so a list's run
    costs no collection of every suite in a fresh interpreter): its exit status, what it printed and the tests
    it ran; the user's PYTEST_ADDOPTS left out, as in ``_pytest``, and this run's Hypothesis profile kept."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    outcomes, printed, profile = _Outcomes(), io.StringIO(), settings.get_current_profile_name()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = pytest.main(["-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml"), "--rootdir",
                                str(REPO), *words], plugins=[outcomes])
    finally:
        settings.load_profile(profile)  # the nested run's configure loads the project's default
    return code, printed.getvalue(), outcomes.ran


def _probe(tmp_path, source: str) -> str:
    """A test module outside the repo (so parallel runs of the suites never collect it)."""
    (tmp_path / "test_probe.py").write_text(source)
    return "test_probe.py"


def test_asking_for_an_absent_arch_fails_loudly(monkeypatch):
    code, printed, _ = _pytest_here(monkeypatch, "suites/sampling/test_greedy_argmax.py", "-m", "sm103", "--co")
    assert code == pytest.ExitCode.USAGE_ERROR and "every one of them would be skipped" in printed, printed[-3000:]


def test_allow_arch_mismatch_accepts_and_skips_with_the_reason(tmp_path):
    probe = _probe(tmp_path, "import pytest\npytestmark = pytest.mark.sm103\ndef test_blackwell_only():\n    pass\n")
    refused = _pytest(probe, "-m", "sm103", rootdir=tmp_path)
    allowed = _pytest(probe, "-m", "sm103", "--allow-arch-mismatch", "-rs", rootdir=tmp_path)
    assert refused.returncode != 0
    assert allowed.returncode == 0 and "valid on sm103; this machine is cpu" in allowed.stdout, allowed.stdout


def test_not_an_arch_is_no_request(monkeypatch):
    code, printed, _ = _pytest_here(monkeypatch, "suites/test_plugins.py::test_not_an_arch_is_no_request", "-m",
                                    "not sm103", "--co")
    assert code == 0 and "1 test collected" in printed, printed[-3000:]


def test_a_test_without_an_arch_marker_is_a_collection_error(tmp_path):
    run = _pytest(_probe(tmp_path, "def test_nothing_claimed():\n    assert True\n"), "--co", rootdir=tmp_path)
    assert run.returncode != 0 and "without an arch marker" in run.stdout + run.stderr


def test_a_test_list_runs_exactly_its_ids(tmp_path, monkeypatch):
    listing = tmp_path / "l0_probe.yml"
    listing.write_text("version: 0.0.1\nl0_probe:\n- condition:\n    terms: {stage: pre_merge, arch: cpu}\n"
                       "  tests:\n  - suites/test_dispatch.py::test_cells_need_snake_case_ids_and_a_why\n")
    code, printed, ran = _pytest_here(monkeypatch, "--test-list", str(listing))
    assert code == 0 and ran == [("suites/test_dispatch.py::test_cells_need_snake_case_ids_and_a_why", "passed")], \
        (ran, printed[-3000:])
    assert "1 passed" in printed, printed[-3000:]


def test_a_listed_id_that_selects_nothing_is_an_error(tmp_path, monkeypatch):
    listing = tmp_path / "l0_probe.yml"
    listing.write_text("version: 0.0.1\nl0_probe:\n- condition:\n    terms: {stage: pre_merge, arch: cpu}\n"
                       "  tests:\n  - suites/test_dispatch.py::test_no_such_test\n")
    code, printed, ran = _pytest_here(monkeypatch, "--test-list", str(listing))
    assert code == pytest.ExitCode.USAGE_ERROR and ran == [], (code, ran)
    assert "l0_probe.yml:6: suites/test_dispatch.py::test_no_such_test" in printed, printed[-3000:]


def test_xdist_workers_get_their_share_of_the_cores(tmp_path, monkeypatch):
    """Under -n 2 on a machine of C cores each worker runs C // 2 torch threads (at least one), where a
    worker of its own would run C; OMP_NUM_THREADS chosen by the caller is kept (the controller's hook on a
    caller's choice, in this process: a nested run costs its workers' interpreters)."""
    probe = _probe(tmp_path, "import os, pytest, torch\npytestmark = pytest.mark.cpu\n"
                             "@pytest.mark.parametrize('n', [0, 1])\ndef test_threads(n):\n"
                             "    print('threads', os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())\n"
                             "    assert False\n")
    cores = len(os.sched_getaffinity(0))
    clean = {k: v for k, v in nested_pytest_environment(PYTHONPATH=str(REPO)).items() if k != "OMP_NUM_THREADS"}
    shared = _pytest(probe, "-n", "2", rootdir=tmp_path, env=clean)
    share = max(1, cores // 2)
    assert shared.stdout.count(f"threads {share} {share}") == 2, shared.stdout[-3000:]
    controller = types.SimpleNamespace(option=types.SimpleNamespace(numprocesses=2))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    gpu_workers.share_cores(controller)
    assert os.environ["OMP_NUM_THREADS"] == "3"
    monkeypatch.delenv("OMP_NUM_THREADS")
    gpu_workers.share_cores(controller)   # the control: the same call on an unset variable sets the share
    assert os.environ["OMP_NUM_THREADS"] == str(share)
