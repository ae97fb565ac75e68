"""SIGTERM or SIGINT to tools/certify-cells ends its isolation workers (issue 16.5): a worker runs in a
process group of its own, so nothing else would stop it outliving the judge."""
from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from suites.claims import REPO

pytestmark = pytest.mark.cpu


def _workers_of(parent: int) -> list[int]:
    """Pids of the live tools.engine.worker processes whose parent is ``parent``."""
    found = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent and fields[0] != "Z" and b"tools.engine.worker" in command:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_certify_cells_leaves_no_worker_running(signum, tmp_path):
    # the worker spins in a kernel that never returns: it says nothing more, so only its judge can end it.
    # Its stderr goes to a file (a pipe nobody reads could fill and stop it); where it does not end, SIGABRT
    # makes its faulthandler print every thread's stack there, and the failure quotes it.
    # certify-cells keeps a SIGINT ignore it inherits (a background job's, as it should): the control starts
    # it with the signal at its default, whatever this test runner was started with (exec keeps a default)
    errors = open(tmp_path / "stderr", "w+")
    command = [sys.executable, "tools/certify-cells", "--op", "greedy_argmax", "--device", "cpu",
               "--cell", "decode_mid_batch", "--cell-timeout", "600", "--max-examples", "0",
               "--impl", "suites.faults.faulty_kernels:spins_on_mid_batches"]
    defaults = f"import os, signal; signal.signal({int(signum)}, signal.SIG_DFL); os.execv({sys.executable!r}, {command!r})"
    run = subprocess.Popen([sys.executable, "-c", defaults], cwd=REPO, stdout=subprocess.DEVNULL, stderr=errors,
                           text=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    try:
        deadline, workers = time.monotonic() + 120, []
        while not workers and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
            workers = _workers_of(run.pid)
        assert workers, "no worker started"
        time.sleep(5)  # into the spinning call
        run.send_signal(signum)
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            masks = [line for line in pathlib.Path(f"/proc/{run.pid}/status").read_text().splitlines()
                     if line.startswith(("SigBlk", "SigIgn", "SigCgt", "SigPnd", "ShdPnd"))]
            run.send_signal(signal.SIGABRT)
            run.wait(timeout=30)
            errors.seek(0)
            pytest.fail(f"certify-cells still ran 60 s after signal {signum} ({', '.join(masks)}); its stacks:\n"
                        f"{errors.read()[-6000:]}")
        assert run.returncode != 0
        time.sleep(0.5)
        assert not [pid for pid in workers if _alive(pid)], f"workers {workers} outlived certify-cells"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for pid in (pid for pid in workers if _alive(pid)):   # a failed control leaves no spinning worker behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        errors.close()
