"""The layer rule of the project's imports, read from the sources with ``ast`` (``tools/imports.py``).

From the bottom: ``oracles`` (op-agnostic checks) <- ``references`` (contracts, each op's input
strategies) <- ``ops`` (kernels, catalog, dispatch, certificate reading) <- the certification engine
(runner, workers, reports) <- the ``tools`` front ends <- ``suites``.  A module imports only from its own
layer or the ones below; nothing outside ``suites/`` imports ``suites/``; and no modules import each
other, at module level or inside a function.
"""
from __future__ import annotations

import pytest

from suites.claims import REPO
from tools.imports import cycles, import_graph

pytestmark = pytest.mark.cpu

LAYERS = ("oracles", "references", "ops", "engine", "tools", "suites")
# tools/engine/, and what it stands on: the tools' shared conventions, the import reader, and the bench
# whose committed tables the report renders (tools.bench.read_table)
ENGINE_BASE = frozenset({"tools.cli", "tools.imports", "tools.bench"})


def layer_of(module: str) -> int:
    engine = module.startswith("tools.engine") or module in ENGINE_BASE
    return LAYERS.index("engine" if engine else module.split(".")[0])


def layer_findings(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up a layer, and every import cycle, in words."""
    findings = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            if layer_of(target) > layer_of(module):
                findings.append(f"upward: {module} ({LAYERS[layer_of(module)]}) imports {target} "
                                f"({LAYERS[layer_of(target)]})")
    findings += ["cycle: " + " <-> ".join(cycle) for cycle in cycles(graph)]
    return findings


def test_the_project_keeps_its_layers():
    graph = import_graph(REPO)
    assert {"ops.catalog", "oracles.battery", "references.strategies.shapes", "tools.engine.certify"} <= set(graph)
    assert layer_findings(graph) == []


def _write(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_an_upward_import_an_import_of_suites_and_a_hidden_cycle_are_each_found(tmp_path):
    """Negative control: a synthetic tree breaking each rule once, the cycle hidden in function bodies."""
    _write(tmp_path, {
        "oracles/__init__.py": "",
        "oracles/check.py": "from ops.catalog import Entry\n",                       # up two layers
        "ops/__init__.py": "",
        "ops/catalog.py": "def load():\n    from ops import certificates\n",
        "ops/certificates.py": "def read():\n    import ops.catalog\n",                # the cycle, late
        "references/__init__.py": "",
        "references/contract.py": "import importlib\nimportlib.import_module('references.shapes')\n",
        "references/shapes.py": "",
        "tools/__init__.py": "",
        "tools/nightly.py": "from suites.strategies import profiles\n",              # a tool needs the tests
        "suites/__init__.py": "",
        "suites/strategies/__init__.py": "",
        "suites/strategies/profiles.py": "from tools import nightly\n",
    })
    graph = import_graph(tmp_path)
    assert graph["references.contract"] == {"references.shapes"}
    assert layer_findings(graph) == [
        "upward: oracles.check (oracles) imports ops.catalog (ops)",
        "upward: tools.nightly (tools) imports suites.strategies.profiles (suites)",
        "cycle: ops.catalog <-> ops.certificates",
        "cycle: suites.strategies.profiles <-> tools.nightly",
    ]


def test_an_import_is_found_wherever_a_statement_or_an_import_call_can_stand(tmp_path):
    """The reader walks statements alone, and every node of a module whose text names an import call: an
    import in each kind of block, and calls inside expressions, are each found (one module per place)."""
    places = {
        "in_handler": "try:\n    pass\nexcept ImportError:\n    import ops.target\n",
        "in_finally": "try:\n    pass\nfinally:\n    from ops import target\n",
        "in_else": "if False:\n    pass\nelse:\n    import ops.target\n",
        "in_loop_else": "for _ in ():\n    pass\nelse:\n    import ops.target\n",
        "in_with": "import contextlib\nwith contextlib.nullcontext():\n    import ops.target\n",
        "in_class": "class Holder:\n    def method(self):\n        import ops.target\n",
        "in_match": "match 1:\n    case 1:\n        import ops.target\n",
        "in_async": "async def run():\n    async with x:\n        import ops.target\n",
        "call_in_lambda": "import importlib\nload = lambda: importlib.import_module('ops.target')\n",
        "call_in_default": "def load(module=__import__('ops.target')):\n    return module\n",
        "call_in_comprehension": "import importlib\nloaded = [importlib.import_module(f'ops.target.{n}') for n in 'ab']\n",
        "call_spelled_wide": "import importlib\nload = lambda: importlib.\uff49mport_module('ops.target')\n",
    }
    _write(tmp_path, {"ops/__init__.py": "", "ops/target.py": "",
                      **{f"ops/{name}.py": text for name, text in places.items()}})
    graph = import_graph(tmp_path)
    assert {name: graph[f"ops.{name}"] for name in places} == {name: {"ops.target"} for name in places}
