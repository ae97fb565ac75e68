"""Conventions every tool shares: exit 0 pass, 1 a finding, 2 a usage or input error in one line; a judging
tool (``tools/certify-cells``) exits 3 when its own code failed, which is never a finding."""
from __future__ import annotations

import argparse
import atexit
import math
import os
import sys
import threading
from typing import Callable, NoReturn


PROJECT_PACKAGES = ("ops", "oracles", "references", "suites", "tools")
INTERNAL_ERROR = 3   # the judge's own defect: "internal error: ..." and a reproduction


class UsageError(Exception):
    """Bad flags, unreadable files, unknown names: reported in one line, exit 2, no traceback."""


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> None:
    try:
        code = main(argv)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] in PROJECT_PACKAGES:
            raise   # a module of this project missing is its defect, not the environment's
        print(f"error: {error}: this tool needs the project's dependencies in the Python that runs it "
              f"(python -m pip install -c constraints-cpu.txt -e '.[test]')", file=sys.stderr)
        code = 2
    sys.exit(code)


def run_tool(main: Callable[[list[str] | None], int]) -> NoReturn:
    """``run_main`` as a process's entry point: the process ends with its exit status by ``end_process``."""
    try:
        run_main(main)
    except SystemExit as end:
        end_process(end.code)


def end_process(code: int | str | None) -> NoReturn:
    """End this process with ``code`` as ``sys.exit`` would (its other threads joined, exit handlers run, the
    standard streams flushed) without the interpreter's teardown of every module and object, which is most of
    the end's cost: 0.4 to 0.7 CPU-s in a process that imported torch, Triton and the CuTe DSL, and every tool,
    worker and test tool run pays it (docs/ci.md, 2026-12-07c).  A process's last act only: nothing left
    for finalizers (files are closed by ``with``, temporary folders by their exit handlers)."""
    if code is not None and not isinstance(code, int):   # sys.exit("why"): the text on stderr, status 1
        print(code, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()   # CPython's own call at the end: the handlers, in their order
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass   # closed or gone: nothing of it to keep
    os._exit(code or 0)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is a one-line UsageError (exit 2) rather than a usage dump."""

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


def check_workers(workers: int | None) -> None:
    """``-n``/``--workers`` of the tools that start worker processes: not given, or a positive count."""
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: expected a positive number")


def check_cell_timeout(seconds: float | None) -> None:
    """``--cell-timeout`` of the tools that judge cells: not given, or a positive and finite number of seconds."""
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--cell-timeout: {seconds:g} is not positive and finite (seconds)")
