"""Conventions every tool shares: exit 0 pass, 1 a finding, 2 a usage or input error in one line; a judging
tool (``tools/certify-cells``) exits 3 when its own code failed, which is never a finding."""
from __future__ import annotations

import argparse
import math
import sys
from typing import Callable


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
