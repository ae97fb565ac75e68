"""Every executable in tools/ honours the tool conventions: ``--help`` prints its usage and exits 0 without
doing the work; a flag it does not know exits 2 with one line on stderr, no traceback; a judging tool whose
own code fails exits 3 ("internal error"), never 1, and says so in its ``--help``
(``suites/oracles/test_judge_errors.py`` injects one).  A Python tool answers ``--help`` and a bad flag
without torch (the project's heavy dependencies are imported by the functions that do the work), and a run
in a Python that lacks them is one line and exit 2, not a traceback.  Lab-only scripts live under docs/lab/
and are not held to this.  The checker is proved on hostile tools: one that runs its workflow on ``--help``
(what ``gpu-run-cute.sh`` did), one that answers a bad flag with a traceback, and one that imports torch
before reading its flags.
"""
from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cpu

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
SECONDS = 60  # --help and a bad flag stop before any work; the slowest tool imports torch and scipy first


def executables(folder: pathlib.Path = TOOLS) -> list[pathlib.Path]:
    return sorted(path for path in folder.iterdir()
                  if path.is_file() and path.stat().st_mode & stat.S_IXUSR and path.suffix != ".py")


def convention_breaches(tool: pathlib.Path) -> list[str]:
    """What ``tool`` gets wrong about ``--help`` and a bad flag; empty when it honours both."""
    def call(flag):
        return subprocess.run([str(tool), flag], capture_output=True, text=True, timeout=SECONDS,
                              stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    breaches = []
    shown = call("--help")
    if shown.returncode != 0:
        breaches.append(f"--help exits {shown.returncode}, not 0")
    if not shown.stdout.lstrip().lower().startswith("usage"):
        breaches.append(f"--help does not print its usage first: {shown.stdout[:80]!r}")
    refused = call("--no-such-flag")
    lines = refused.stderr.strip().splitlines()
    if refused.returncode != 2:
        breaches.append(f"a bad flag exits {refused.returncode}, not 2")
    if len(lines) != 1 or "Traceback" in refused.stderr:
        breaches.append(f"a bad flag is not refused in one line on stderr: {refused.stderr[:120]!r}")
    return breaches


def test_tools_has_executables():
    assert len(executables()) >= 8, [path.name for path in executables()]


# the tool run as its script, in this Python, with torch unimportable (as where it is not installed)
WITHOUT_TORCH = "import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; " \
                "runpy.run_path(sys.argv[0], run_name='__main__')"


def without_torch(tool: pathlib.Path, *flags: str) -> subprocess.CompletedProcess:
    # nor TRITON_INTERPRET, which the suites set: a shell of a machine without torch has none
    environment = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, str(tool), *flags], capture_output=True, text=True,
                          timeout=SECONDS, stdin=subprocess.DEVNULL,
                          env={**environment, "PYTHONDONTWRITEBYTECODE": "1"})


def torch_free_breaches(tool: pathlib.Path) -> list[str]:
    """What a Python ``tool`` gets wrong about ``--help`` and a bad flag where torch cannot be imported."""
    if "python" not in tool.read_text(encoding="utf-8", errors="replace").partition("\n")[0]:
        return []
    breaches = []
    shown = without_torch(tool, "--help")
    if shown.returncode != 0 or not shown.stdout.lstrip().lower().startswith("usage"):
        breaches.append(f"--help without torch exits {shown.returncode}: {(shown.stdout + shown.stderr)[-160:]!r}")
    refused = without_torch(tool, "--no-such-flag")
    if refused.returncode != 2 or "Traceback" in refused.stderr:
        breaches.append(f"a bad flag without torch exits {refused.returncode}: {refused.stderr[-160:]!r}")
    return breaches


@pytest.mark.parametrize("tool", executables(), ids=lambda path: path.name)
def test_tool_honours_the_conventions(tool):
    assert convention_breaches(tool) == [], f"reproduce: {tool} --help; {tool} --no-such-flag"
    assert torch_free_breaches(tool) == [], f"reproduce: python -c \"{WITHOUT_TORCH}\" {tool} --help"


def test_a_run_where_torch_is_missing_is_one_line_and_exit_2():
    """check-test-lists must collect the suites, which need torch: in a Python without it, it says so."""
    run = without_torch(TOOLS / "check-test-lists")
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and "torch" in lines[0] and "pip install" in lines[0], run.stderr


def test_certify_cells_help_documents_exit_3():
    """An internal error is the judge's defect, told apart from a finding (exit 1) by its own status."""
    shown = subprocess.run([str(TOOLS / "certify-cells"), "--help"], capture_output=True, text=True, timeout=SECONDS,
                           stdin=subprocess.DEVNULL)
    assert shown.returncode == 0 and "3 an internal error" in " ".join(shown.stdout.split()), shown.stdout


HOSTILE = {
    # runs its workflow whatever the flag, and says it passed
    "runs-on-help": "#!/usr/bin/env bash\necho 'certifying every op...'\nexit 0\n",
    # argparse reached through a traceback
    "traceback-on-bad-flag": ("#!/usr/bin/env python3\nimport sys\n"
                              "if sys.argv[1:] == ['--help']:\n    print('usage: t [--x]')\n    sys.exit(0)\n"
                              "raise ValueError(sys.argv[1])\n"),
    # honours both where torch is installed, but imports it before reading its flags
    "torch-before-flags": ("#!/usr/bin/env python3\nimport argparse\nimport torch\n"
                           "argparse.ArgumentParser(prog='t').parse_args()\n"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_checker_rejects_a_tool_that_breaks_them(name, tmp_path):
    tool = tmp_path / name
    tool.write_text(HOSTILE[name], encoding="utf-8")
    tool.chmod(0o755)
    assert executables(tmp_path) == [tool]
    assert convention_breaches(tool) + torch_free_breaches(tool) != []
