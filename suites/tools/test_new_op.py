"""tools/new-op: a bad declaration exits 2 in one line and writes nothing; an op that exists is never
overwritten; a declaration scaffolds an op whose suite runs and whose battery rejects the scaffold's
wrong implementations, in a copy of the repository (issue #30.1)."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from suites.claims import REPO, nested_pytest_environment
from tools import new_op
from tools.cli import UsageError

pytestmark = pytest.mark.cpu
DECLARATION = REPO / "docs" / "contracts" / "fused_sigmoid_mul.toml"


def _declaration(tmp_path, old: str = "", new: str = "") -> pathlib.Path:
    text = DECLARATION.read_text()
    if old:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "op.toml"
    path.write_text(text)
    return path


# (what the declaration gets wrong: the text replaced, its replacement, what the one line must say)
BAD = [
    ("parity", 'parity = "band"', 'parity = "close"', "parity must be 'band' or 'bitwise'"),
    ("dtype", 'gate = "bf16"', 'gate = "int8"', "input 'gate': dtype 'int8'"),
    ("formula name", 'formula = "sigmoid(gate) * x"', 'formula = "sigmoid(z) * x"', "'z' is neither an input"),
    ("formula call", 'formula = "sigmoid(gate) * x"', 'formula = "torch.sigmoid(gate) * x"', "calls only sigmoid, silu, exp"),
    ("formula syntax", 'formula = "sigmoid(gate) * x"', 'formula = "sigmoid(gate *"', "does not parse"),
    ("unknown key", "amax = true", "amax = true\ninplace = true", "unknown key 'inplace'"),
    ("amax type", "amax = true", 'amax = "yes"', "amax must be true or false"),
    ("amax of fp32", 'y = "bf16"', 'y = "fp32"', "the in-place amax folds bf16"),
    ("no why", 'why = "prefill chunks of 257..16384 tokens at the same widths"', 'why = " "', "a one-line why"),
    ("span", "T = [257, 16384]", "T = [16384, 257]", "is not 0 <= lo <= hi"),
    ("missing bound", "T = [257, 16384]\n", "", "cell 'prefill': no bound for T"),
    ("corner outside", "corners = {H = [4096]}", "corners = {H = [32768]}", "corner H = 32768 is outside"),
    ("cell id", 'id = "prefill"', 'id = "Prefill"', "cell id 'Prefill' is not snake_case"),
    ("duplicate cell", 'id = "prefill"', 'id = "decode"', "cell id 'decode' is declared twice"),
    ("band without why", "parity_why = ", "# parity_why = ", "parity_why: say why the op cannot be bitwise"),
    ("not toml", "[inputs]", "[inputs", "is not TOML"),
]


@pytest.mark.parametrize("what, old, new, says", BAD, ids=[row[0] for row in BAD])
def test_a_bad_declaration_is_refused_naming_what_is_wrong(tmp_path, what, old, new, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        new_op.load_declaration(_declaration(tmp_path, old, new))


def test_the_committed_declaration_is_accepted_and_the_template_too(tmp_path):
    assert new_op.load_declaration(DECLARATION)["formula"] == "sigmoid(gate) * x"
    template = tmp_path / "template.toml"
    template.write_text(new_op.TEMPLATE)
    assert new_op.load_declaration(template)["cells"][0]["id"] == "decode"


def _run_tool(*words: str, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(cwd / "tools" / "new-op"), *words], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, timeout=120)


def test_the_tool_exits_2_in_one_line_and_writes_nothing(tmp_path):
    before = sorted(p for p in (REPO / "ops").rglob("*.py"))
    run = _run_tool("activation/fused_relu_mul", str(_declaration(tmp_path, 'parity = "band"', 'parity = "x"')))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "parity" in run.stderr
    assert not (REPO / "ops" / "activation" / "fused_relu_mul.py").exists()
    assert sorted(p for p in (REPO / "ops").rglob("*.py")) == before


@pytest.mark.parametrize("name, says", [
    ("activation/fused_sigmoid_mul", "exists: an op is never overwritten"),
    ("other/fused_sigmoid_mul", "exists: an op is never overwritten"),   # one name, one op, in any family
    ("norm/rms_norm_gated", "exists: an op is never overwritten"),
    ("Activation/x", "is not FAMILY/NAME in snake_case"),
    ("fused_sigmoid_mul", "is not FAMILY/NAME in snake_case"),
])
def test_an_existing_op_or_a_bad_name_is_refused(name, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        new_op.main([name, str(DECLARATION)])


def _copy_of_the_repository(tmp_path) -> pathlib.Path:
    root = tmp_path / "repo"
    tracked = subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True, cwd=REPO, check=True)
    for name in tracked.stdout.split("\0"):
        source = REPO / name
        if name and source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    shutil.copytree(REPO.parent / "shared", tmp_path / "shared") if (REPO.parent / "shared").is_dir() else None
    return root


def test_a_scaffolded_op_runs_its_battery_and_rejects_its_wrong_implementations(tmp_path):
    """fused_silu_mul (``silu(gate) * x``, no amax) in a copy of the repository: the family exists, so its
    contract-only implementation takes a module of its own; the lists name its ids; the generated suite
    certifies the kernel on a cell and the battery rejects every generated wrong implementation."""
    root = _copy_of_the_repository(tmp_path)
    declaration = _declaration(tmp_path, 'formula = "sigmoid(gate) * x"', 'formula = "silu(gate) * x"')
    declaration.write_text(declaration.read_text().replace("amax = true", "amax = false"))
    run = _run_tool("activation/fused_silu_mul", str(declaration), cwd=root)
    assert run.returncode == 0, run.stderr
    assert (root / "suites" / "contract_only" / "fused_silu_mul.py").is_file()
    assert "suites/activation/test_fused_silu_mul.py::test_cell" in (root / "test_lists" / "l0_cpu_cells.yml").read_text()
    again = _run_tool("activation/fused_silu_mul", str(declaration), cwd=root)
    assert again.returncode == 2 and "never overwritten" in again.stderr
    suite = "suites/activation/test_fused_silu_mul.py"
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-profile", "smoke", "-W", "ignore",
         f"{suite}::test_cell[decode]", f"{suite}::test_battery_rejects"],
        capture_output=True, text=True, cwd=root, timeout=600,
        env=nested_pytest_environment(PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1"))
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert re.search(r"\b6 passed\b", tests.stdout), tests.stdout[-500:]


def test_without_a_formula_every_file_compiles_and_marks_the_arithmetic_to_write(tmp_path):
    """An op that is not elementwise: the same files, valid Python, the arithmetic left as TODO(new-op) in
    the contract, the reference, the kernel and the contract-only implementation (whose suite then fails
    until it is written: the reference raises NotImplementedError)."""
    declared = new_op.load_declaration(_declaration(tmp_path, 'formula = "sigmoid(gate) * x"\n', ""))
    root = tmp_path / "repo"
    shutil.copytree(REPO / "test_lists", root / "test_lists")
    (root / "suites" / "contract_only").mkdir(parents=True)
    files = new_op.plan_files("activation", "fused_todo", declared, root)
    for path, text in files.items():
        if path.suffix == ".py":
            compile(text, str(path), "exec")
    todo = [path.relative_to(root).as_posix() for path, text in files.items() if new_op.TODO in text]
    assert todo == ["docs/contracts/fused_todo.md", "references/activation/fused_todo.py", "ops/activation/fused_todo.py",
                    "suites/contract_only/activation.py"]
