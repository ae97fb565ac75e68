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


MACHINE_PATHS = ("/work/", "/home/", "/root/")  # /tmp/ is a folder an example chooses, on any machine


def test_the_docs_carry_no_machine_paths():
    """A reader's machine has none of the paths of the machine an example was run on; the tools' own
    output records (docs/results/, docs/thirdparty/runs/) are kept as they were written."""
    pages = [REPO / "README.md", *(p for p in (REPO / "docs").rglob("*.md")
                                   if not {"results", "runs"} & set(p.relative_to(REPO / "docs").parts))]
    found = [f"{page.relative_to(REPO)}:{number}" for page in pages
             for number, line in enumerate(page.read_text().splitlines(), 1) if any(p in line for p in MACHINE_PATHS)]
    assert found == []


@pytest.mark.parametrize("installed, on_path, expected", [
    (True, True, ["certify-cells"]),
    (True, False, ["-m", "tools.certify_cells"]),   # another environment's script of that name
    (False, True, ["-m", "tools.certify_cells"]),   # the installed package is another checkout
])
def test_a_printed_command_runs_this_checkout_from_any_directory(monkeypatch, installed, on_path, expected):
    from tools.engine import commands

    monkeypatch.setattr(commands, "installed_here", lambda: installed)
    monkeypatch.setattr(commands, "_script_on_path", lambda script: on_path)
    environment, words = commands.tool_command("certify-cells", "tools.certify_cells", ("/elsewhere/impls",))
    assert words[-len(expected):] == expected
    paths = environment[0].removeprefix("PYTHONPATH=").split(":")
    assert paths == (["/elsewhere/impls"] if words == ["certify-cells"] else [str(commands.REPO), "/elsewhere/impls"])
    line = commands.shell_line(["TRITON_INTERPRET=1", *environment], words)
    assert line.startswith("TRITON_INTERPRET=1 PYTHONPATH=") and "tools/certify-cells" not in line


def test_this_checkout_is_recognised_as_installed_or_not():
    """Negative control of the check above: the venv here is installed from one checkout, so exactly the
    checkout it points at is "installed here" (both answers are reachable: pointing at another fails)."""
    import importlib.metadata
    import json as json_module

    from tools.engine import commands

    direct = json_module.loads(importlib.metadata.distribution("kernel-parity").read_text("direct_url.json") or "{}")
    if not direct.get("dir_info", {}).get("editable"):
        pytest.skip("a non-editable install: its files are the package's own")
    assert commands.installed_here() == (direct["url"].removeprefix("file://") == str(commands.REPO))
