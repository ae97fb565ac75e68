"""Bytecode planting (issue #25.1): an implementation cannot write bytecode the judge runs, and the tools
refuse a tree that holds some.

Each test works on a copy of the tree (planting in this one would judge every later run here); the tools'
bytecode cache is the usual one, whose files for the copy lie in a folder of their own.
"""
from __future__ import annotations

import importlib._bootstrap_external as external
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from suites.faults.judge_spotting import (PLANT_TARGETS, PLANTED_MARKER, PROJECT, copy_of_the_tree,
                                         judges_bytecode_cache, plant_bytecode, plant_triton_kernel)
from tools.engine import bytecode

pytestmark = pytest.mark.cpu


@pytest.fixture
def tree(tmp_path) -> pathlib.Path:
    return copy_of_the_tree(tmp_path)


def _env(tmp_path) -> dict:
    """As a developer's shell is: bytecode written and read where Python puts it."""
    return {name: value for name, value in os.environ.items()
            if name not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONPATH")}


def _cache_of(tree: pathlib.Path) -> pathlib.Path:
    """The tools' bytecode of the copy's modules (the cache mirrors the sources' absolute paths)."""
    return pathlib.Path(judges_bytecode_cache(), str(tree).lstrip("/"))


def _run(tree, tmp_path, *command) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *command], cwd=tree, env=_env(tmp_path), capture_output=True, text=True)


def _holding_the_marker(*folders) -> list[str]:
    return [str(path) for folder in folders if folder.exists() for path in folder.rglob("*.pyc")
            if PLANTED_MARKER.encode() in path.read_bytes()]


def test_bytecode_python_wrote_is_not_refused(tree, tmp_path):
    """The tree after ordinary imports and pytest runs (compileall writes what an import writes)."""
    compiled = _run(tree, tmp_path, "-m", "compileall", "-q", *bytecode.SCANNED)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert list(tree.rglob("oracles/__pycache__/bitwise.*.pyc"))
    assert bytecode.planted(tree) is None
    listed = _run(tree, tmp_path, "tools/certify-cells", "--op", "greedy_argmax", "--list")
    assert listed.returncode == 0, listed.stdout + listed.stderr


def test_a_persistent_plant_is_live_and_the_tools_refuse_the_tree(tree, tmp_path):
    """A plant left in ``oracles/__pycache__`` by an earlier run: plain Python in that tree runs it (the
    control), certify-cells and the gate exit 2 naming the file."""
    written = plant_bytecode(str(tree), str(tmp_path / "elsewhere"))
    planted = tree / "oracles" / "__pycache__" / f"bitwise.{sys.implementation.cache_tag}.pyc"
    assert str(planted) in written
    live = _run(tree, tmp_path, "-c", "import oracles.bitwise as b; print(b.PLANTED)")
    assert live.stdout.strip() == PLANTED_MARKER, live.stdout + live.stderr
    for command in (("tools/certify-cells", "--op", "greedy_argmax", "--cell", "decode_small_batch"),
                    ("tools/gate", "--dry-run", "--base", "HEAD")):
        refused = _run(tree, tmp_path, *command)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert "__pycache__/" in line and "not what" in line, line
    bitwise = bytecode._problem(planted)
    assert bitwise is not None and "bitwise.py" in bitwise


def test_bytecode_outside_pycache_is_refused(tree):
    stray = tree / "ops" / "quarantine.pyc"
    stray.write_bytes(external._code_to_timestamp_pyc(compile("x = 1", "q", "exec"), 0, 0))
    assert bytecode.planted(tree) == (stray, "bytecode outside __pycache__ (Python imports it where no source is)")


def test_a_stale_or_foreign_bytecode_file_is_left_alone(tree):
    """Python would not run it: a header that does not match its source's, or another interpreter's tag."""
    source = tree / "oracles" / "bitwise.py"
    code = compile("x = 1", str(source), "exec")
    folder = tree / "oracles" / "__pycache__"
    folder.mkdir()
    (folder / f"bitwise.{sys.implementation.cache_tag}.pyc").write_bytes(external._code_to_timestamp_pyc(code, 1, 2))
    (folder / "bitwise.cpython-39.pyc").write_bytes(b"anything")
    assert bytecode.planted(tree) is None


def test_an_implementation_cannot_plant_bytecode_while_it_is_judged(tree, tmp_path):
    """In-run: the hostile implementation tries to write bytecode for the judge's modules into the tree
    and the tools' cache as it is judged.  Its host sees both read-only: nothing is written, the cell fails.
    The control: the same planting from an unprotected process (this one) writes every file."""
    run = _run(tree, tmp_path, "tools/certify-cells", "--op", "greedy_argmax", "--cell", "decode_small_batch",
               "--device", "cpu", "--max-examples", "0", "--no-shrink", "--impl",
               "suites.faults.hostile_impls:plants_bytecode")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "parity" in run.stdout
    assert _cache_of(tree).is_dir()   # the judge's cache was there to plant into
    assert _holding_the_marker(tree, _cache_of(tree)) == []
    assert bytecode.planted(tree) is None
    control = tmp_path / "control"
    shutil.copytree(tree, control)
    written = plant_bytecode(str(control), str(tmp_path / "control-cache"))
    assert len(written) == 2 * len(PLANT_TARGETS)
    assert len(_holding_the_marker(control, tmp_path / "control-cache")) == 2 * len(PLANT_TARGETS)


def test_an_implementation_cannot_plant_a_kernel_in_the_judges_triton_cache(tmp_path):
    """In-run: the implementation (right answers) writes an entry into Triton's kernel cache as it is judged.
    Its host has the cache as its own (an overlay of the judge's, else an empty scratch folder): the write
    succeeds there and the judge's folder never holds it.  The control: the same planting from an
    unprotected process (this one) lands in the folder."""
    judges = tmp_path / "triton-cache"
    judges.mkdir()
    (judges / "judges-entry").mkdir()   # what an overlay lets the host see, and must keep
    env = {**_env(tmp_path), "TRITON_CACHE_DIR": str(judges), "PYTHONPATH": str(PROJECT)}
    run = subprocess.run([sys.executable, "tools/certify-cells", "--op", "greedy_argmax", "--cell", "decode_small_batch",
                          "--device", "cpu", "--max-examples", "2", "--no-shrink", "--impl",
                          "suites.faults.hostile_impls:plants_a_triton_kernel"],
                         cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr   # its answers are right; the planting is the attack
    assert sorted(path.name for path in judges.iterdir()) == ["judges-entry"]
    control = tmp_path / "control"
    control.mkdir()
    planted = plant_triton_kernel(str(control))
    assert planted is not None and PLANTED_MARKER in (pathlib.Path(planted) / "kernel.cubin").read_text()
