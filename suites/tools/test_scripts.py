"""The console scripts of pyproject.toml run the same tools as the ``tools/<name>`` executables of a clone."""
from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from suites.claims import REPO

pytestmark = pytest.mark.cpu

SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def installed_help(name: str) -> subprocess.CompletedProcess:
    """``NAME --help`` as the installed console script runs it: its entry point, called with no arguments."""
    module, function = SCRIPTS[name].split(":")
    script = f"import sys; sys.argv = [{name!r}, '--help']; import {module}; {module}.{function}()"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)


def clone_help(name: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"tools/{name}", "--help"], capture_output=True, text=True, cwd=REPO)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_script_is_the_tool_of_its_name(name):
    installed, clone = installed_help(name), clone_help(name)
    assert installed.returncode == clone.returncode == 0, installed.stderr + clone.stderr
    assert installed.stdout == clone.stdout and installed.stdout.startswith("usage:")


def test_a_script_pointing_at_another_tool_would_be_seen():
    """Negative control: two tools' help differ, so the comparison above tells them apart."""
    assert installed_help("bench").stdout != clone_help("gate").stdout
