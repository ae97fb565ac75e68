"""Bytecode in the tree that Python would run instead of its source, and that is not its source's.

Python trusts a ``__pycache__/NAME.TAG.pyc`` whose header matches its source's mtime and size (or hash)
without reading the source: a process that could write the tree could make ``oracles/bitwise.py`` run other
code in every later run, with ``git status`` clean and every digest (of sources) unchanged.  The tools
read no in-tree bytecode (their cache is their own, ``sys.pycache_prefix``: ``tools/certify-cells`` and
``tools/gate`` set it), and refuse to run in a tree holding such a file, so that nothing else run there
(pytest, a serving process) runs it either.

What is refused, under the folders of :data:`SCANNED`: a ``.pyc`` outside a ``__pycache__`` folder (Python
never writes one there, and imports it where no source is), and a ``.pyc`` of this interpreter's tag that
Python would trust for its source and whose code is not what the source compiles to.  Bytecode Python
would not use (stale, another interpreter's, pytest's own rewritten tests) is left alone: a fresh clone
after the README's commands holds only bytecode Python wrote, which compiles from its source.
"""
from __future__ import annotations

import importlib.util
import marshal
import pathlib
import re
import sys

SCANNED = ("ops", "references", "oracles", "tools", "suites")
_NAME = re.compile(r"^(?P<stem>[^.]+)\.(?P<tag>[^.]+?)(?:\.opt-(?P<optimize>[12]))?\.pyc$")
_HASH_BASED, _CHECK_SOURCE = 1, 2


def planted(root: pathlib.Path) -> tuple[pathlib.Path, str] | None:
    """The first bytecode file under ``root``'s :data:`SCANNED` folders that Python would run and that
    does not compile from its source, and why; None when there is none."""
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.pyc")):
            why = _problem(path)
            if why is not None:
                return path, why
    return None


def _problem(path: pathlib.Path) -> str | None:
    if path.parent.name != "__pycache__":
        return "bytecode outside __pycache__ (Python imports it where no source is)"
    name = _NAME.match(path.name)
    if name is None or name["tag"] != sys.implementation.cache_tag:
        return None   # this interpreter never reads it
    source = path.parent.parent / f"{name['stem']}.py"
    if not source.is_file():
        return None   # no source, no import from __pycache__
    data, text = path.read_bytes(), source.read_bytes()
    if data[:4] != importlib.util.MAGIC_NUMBER:
        return None   # rejected by the import system: it compiles the source
    flags = int.from_bytes(data[4:8], "little")
    if flags & _HASH_BASED:
        if flags & _CHECK_SOURCE and data[8:16] != importlib.util.source_hash(text):
            return None
    else:
        stat = source.stat()
        if data[8:16] != ((int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                          + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")):
            return None   # stale: the import system compiles the source instead
    try:
        code = marshal.loads(data[16:])
    except (EOFError, ValueError, TypeError) as error:
        return f"bytecode Python would try to run, unreadable ({error})"
    compiled = compile(text, str(source), "exec", dont_inherit=True, optimize=int(name["optimize"] or 0))
    if code != compiled:
        return f"bytecode Python would run instead of {source.name}, and it is not what {source.name} compiles to"
    return None


def refuse_planted(root: pathlib.Path) -> None:
    """A UsageError (exit 2, one line naming the file) when ``root`` holds bytecode :func:`planted` finds."""
    from tools.cli import UsageError

    found = planted(root)
    if found is not None:
        path, why = found
        raise UsageError(f"{path}: {why}; remove it (and any other: find {root} -name '*.pyc' -delete) and run again")
