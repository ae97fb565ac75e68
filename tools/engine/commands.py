"""How a printed command runs one of the tools again from any directory (a reproduction line, a re-run).

``tools/<name>`` works only from the clone's root.  A command printed for a person is one of:

- the installed console script (``certify-cells ...``) when the package installed in this interpreter is
  this very checkout (editable or not) and its script is the one on ``PATH``;
- else this interpreter on the tool's module with the checkout first on ``PYTHONPATH``
  (``PYTHONPATH=/abs/checkout python -m tools.certify_cells ...``).
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import shlex
import shutil
import sys
import sysconfig
import urllib.parse
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
DISTRIBUTION = "kernel-parity"


def installed_here() -> bool:
    """Whether the installed distribution is this checkout (so its console scripts run this code)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False
    direct = dist.read_text("direct_url.json")
    if direct:
        info = json.loads(direct)
        if info.get("dir_info", {}).get("editable") and info.get("url", "").startswith("file:"):
            path = urllib.request.url2pathname(urllib.parse.urlparse(info["url"]).path)
            return pathlib.Path(path).resolve() == REPO
    located = pathlib.Path(str(dist.locate_file("tools/engine/commands.py")))
    return located.exists() and located.resolve() == pathlib.Path(__file__).resolve()


def _script_on_path(script: str) -> bool:
    """Whether ``script`` on PATH is this interpreter's (not another environment's of the same name)."""
    found = shutil.which(script)
    ours = pathlib.Path(sysconfig.get_path("scripts")) / script
    return found is not None and pathlib.Path(found).absolute() == ours.absolute()


def _python() -> str:
    """``python`` when that is this interpreter on PATH, else this interpreter's absolute path."""
    for name in ("python", "python3"):
        found = shutil.which(name)
        if found and pathlib.Path(found).absolute() == pathlib.Path(sys.executable).absolute():
            return name
    return sys.executable


def tool_command(script: str, module: str, extra_paths: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """``(environment, words)`` that run the tool ``script`` (module ``module``) from any directory;
    ``extra_paths``: absolute directories an ``--impl`` module needs on ``PYTHONPATH``."""
    extra = [path for path in dict.fromkeys(extra_paths) if pathlib.Path(path).resolve() != REPO]
    if installed_here() and _script_on_path(script):
        return ([f"PYTHONPATH={os.pathsep.join(extra)}"] if extra else []), [script]
    return [f"PYTHONPATH={os.pathsep.join([str(REPO), *extra])}"], [_python(), "-m", module]


def shell_line(environment: list[str], words: list[str]) -> str:
    """One shell line: ``NAME=value`` assignments (the value quoted, so it stays an assignment), then words."""
    assignments = [name + "=" + shlex.quote(value) for name, _, value in (e.partition("=") for e in environment)]
    return " ".join([*assignments, *(shlex.quote(w) for w in words)])
