"""Tool processes a test starts now and waits for later, so that what one of them waits on (a time limit, its
own hosts starting) passes while another works; and tool runs from an interpreter that has imported the
packages every tool imports first, for tests that run a tool many times."""
from __future__ import annotations

import atexit
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile

PRELOADED = pathlib.Path(__file__).with_name("preloaded_python.py")
_preloaded: list[subprocess.Popen] = []   # this process's, started at its first run, ended with it


def started(command, cwd, **options) -> subprocess.Popen:
    """``command`` running in ``cwd``, its output piped as text for ``finished``."""
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


def finished(process: subprocess.Popen) -> subprocess.CompletedProcess:
    """What ``subprocess.run(..., capture_output=True, text=True)`` would have returned for ``process``."""
    stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def preloaded_run(argv: list[str], cwd) -> subprocess.CompletedProcess:
    """What ``subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True)`` returns, run by
    a child of ``suites/preloaded_python.py`` (torch, Triton and the CuTe DSL imported once for this process)."""
    if not _preloaded:
        _preloaded.append(subprocess.Popen([sys.executable, str(PRELOADED)], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE))
        atexit.register(_end_preloaded)
    server = _preloaded[0]
    with tempfile.TemporaryDirectory() as folder:
        stdout, stderr = pathlib.Path(folder, "stdout"), pathlib.Path(folder, "stderr")
        pickle.dump((str(cwd), dict(os.environ), list(argv), str(stdout), str(stderr)), server.stdin)
        server.stdin.flush()
        code = pickle.load(server.stdout)
        return subprocess.CompletedProcess([sys.executable, *argv], code, stdout.read_text(), stderr.read_text())


def _end_preloaded() -> None:
    """Its stdin closed, it ends (it waits for no run: each was waited for)."""
    for server in _preloaded:
        server.stdin.close()
        server.wait()
