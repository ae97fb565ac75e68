"""Tool processes a test starts now and waits for later, so that what one of them waits on (a time limit, its
own hosts starting) passes while another works."""
from __future__ import annotations

import subprocess


def started(command, cwd, **options) -> subprocess.Popen:
    """``command`` running in ``cwd``, its output piped as text for ``finished``."""
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


def finished(process: subprocess.Popen) -> subprocess.CompletedProcess:
    """What ``subprocess.run(..., capture_output=True, text=True)`` would have returned for ``process``."""
    stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
