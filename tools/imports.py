"""The project's import graph, read from its sources with ``ast`` (nothing is imported or run).

A module's imports are every ``import`` and ``from ... import`` in it, at module level or inside a
function, and every ``importlib.import_module`` / ``__import__`` of a constant name (of an f-string, its
constant head: ``f"ops.{family}"`` imports ``ops``). Each is resolved to the longest project module it
names (``from ops.catalog import Entry`` -> ``ops.catalog``; ``from references.ssm import gdn_inputs`` ->
``references.ssm.gdn_inputs``, the package itself when the name is not a module). ``tools/gate`` follows it from an op's suite to the test machinery that
suite uses; ``suites/test_layers.py`` checks the layer rule on it.
"""
from __future__ import annotations

import ast
import pathlib
import unicodedata
from typing import Iterable, Iterator, Mapping

PACKAGES = ("ops", "references", "oracles", "suites", "tools")


def module_files(root: pathlib.Path, packages: Iterable[str] = PACKAGES) -> dict[str, pathlib.Path]:
    """Module name -> source file, for every ``.py`` under ``packages`` of ``root`` (a package by its
    ``__init__.py``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _named(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [f"{node.module}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Call) and node.args and \
            getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__"):
        name = node.args[0]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return [name.value]
        if isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant):
            return [str(name.values[0].value).rsplit(".", 1)[0]]
    return []


def _statements(tree: ast.Module) -> Iterator[ast.AST]:
    """Every statement of ``tree`` (and its except handlers and match cases, whose bodies hold statements):
    where an ``import`` can stand, without walking into expressions, which are most of a module's nodes."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                pending += [item for item in value if isinstance(item, (ast.stmt, ast.excepthandler, ast.match_case))]


def imports_of(path: pathlib.Path, modules: Iterable[str]) -> set[str]:
    """The project modules (names in ``modules``) that the source at ``path`` imports."""
    modules = set(modules)
    found = set()
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    # an import_module / __import__ call can be part of any expression: every node where the text names one
    # (its name is in the source wherever such a call is, once normalized as the parser normalizes
    # identifiers), the statements alone elsewhere
    named = unicodedata.normalize("NFKC", text)
    calls = "import_module" in named or "__import__" in named
    for node in ast.walk(tree) if calls else _statements(tree):
        for name in _named(node):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph(root: pathlib.Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """Module name -> the project modules it imports (itself excluded)."""
    files = module_files(root, packages)
    return {name: imports_of(path, files) - {name} for name, path in files.items()}


def reachable(graph: Mapping[str, set[str]], roots: Iterable[str]) -> set[str]:
    """Every module that ``roots`` import, transitively (the roots themselves included)."""
    pending, seen = list(roots), set(roots)
    while pending:
        for name in graph.get(pending.pop(), ()):
            if name not in seen:
                seen.add(name)
                pending.append(name)
    return seen


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles: each strongly connected set of two or more modules (or one importing itself),
    sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in graph:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        found.append(sorted(component))
    return sorted(found)
