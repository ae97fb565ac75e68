"""How every tool process and certification worker ends (``tools.cli.end_process``, through ``run_tool``): as
``sys.exit`` ends it (its other threads joined, exit handlers run in their order, buffered output flushed, the
status kept) but without the interpreter's teardown of every module, most of the end's cost in a process that
imported torch (docs/ci.md, 2026-12-07c).  The control: the same script ended by ``sys.exit`` runs the
teardown (a module global's finalizer speaks), so the test tells the two ends apart."""
from __future__ import annotations

import subprocess
import sys

import pytest

from suites.claims import REPO

pytestmark = pytest.mark.cpu

SCRIPT = """
import atexit, sys, threading, time
sys.path.insert(0, {repo!r})
from tools.cli import UsageError, end_process, run_tool

class Spoken:
    def __del__(self):
        sys.stderr.write("teardown\\n")

kept = Spoken()   # a module global: only the interpreter's teardown finalizes it
atexit.register(sys.stderr.write, "registered first, run last\\n")
atexit.register(sys.stderr.write, "registered last, run first\\n")

def late():
    time.sleep(0.3)
    sys.stdout.write(" and the thread's")

threading.Thread(target=late).start()   # not a daemon: the end waits for it
sys.stdout.write("buffered")   # stdout is a pipe: block-buffered, no newline
{end}
"""


def ended(end: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(repo=str(REPO), end=end)], capture_output=True,
                          text=True, timeout=60)


def test_end_process_keeps_what_sys_exit_keeps_and_skips_the_teardown():
    run = ended("end_process(3)")
    assert run.returncode == 3
    assert run.stdout == "buffered and the thread's"
    assert run.stderr == "registered last, run first\nregistered first, run last\n"


def test_a_text_status_is_printed_and_ends_with_1_as_sys_exit_does():
    run = ended("end_process('why it stopped')")
    assert run.returncode == 1
    assert run.stderr == "why it stopped\nregistered last, run first\nregistered first, run last\n"


def test_the_control_sys_exit_runs_the_teardown_end_process_skips():
    run = ended("sys.exit(3)")
    assert run.returncode == 3 and run.stdout == "buffered and the thread's"
    assert run.stderr.endswith("teardown\n"), run.stderr


@pytest.mark.parametrize("main, status, stderr", [
    ("lambda argv: 1", 1, ""),
    ("lambda argv: 0", 0, ""),
    ("lambda argv: (_ for _ in ()).throw(UsageError('--flag: wrong'))", 2, "error: --flag: wrong\n"),
])
def test_run_tool_ends_with_the_status_run_main_gives(main, status, stderr):
    run = ended(f"run_tool({main})")
    assert (run.returncode, run.stdout, run.stderr) == (status, "buffered and the thread's",
                                                        stderr + "registered last, run first\nregistered first, run last\n")


def test_an_exception_of_the_tool_itself_is_a_traceback_and_exit_1():
    run = ended("run_tool(lambda argv: 1 / 0)")
    assert run.returncode == 1 and "ZeroDivisionError" in run.stderr and "Traceback" in run.stderr
