"""tools/new-op: a bad declaration exits 2 in one line and writes nothing; an op that exists is never
overwritten; a declaration scaffolds an op whose suite runs and whose battery rejects the scaffold's
wrong implementations, in a copy of the repository (issue #30.1)."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

from references import elementwise
from suites.claims import REPO, nested_pytest_environment
from tools import new_op
from tools.cli import UsageError

pytestmark = pytest.mark.cpu
DECLARATION = REPO / "docs" / "contracts" / "fused_sigmoid_mul.toml"


def _declaration(tmp_path, old: str = "", new: str = "", text: str | None = None) -> pathlib.Path:
    text = DECLARATION.read_text() if text is None else text
    if old:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "op.toml"
    path.write_text(text)
    return path


def _edited(text: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


# vLLM's SiluAndMul: one input x = [T, 2H], gate then up side by side; no amax
SILU_AND_MUL = _edited(DECLARATION.read_text(), ('formula = "sigmoid(gate) * x"', 'formula = "silu(gate) * up"\n'
                                                 'halves = {x = ["gate", "up"]}'),
                       ("amax = true", "amax = false"), ('gate = "bf16"\n', ""))
# an input of the op's width first, then one in halves (twice as wide), with the amax
GATED_SWIGLU = _edited(DECLARATION.read_text(), ('formula = "sigmoid(gate) * x"', 'formula = "sigmoid(x) * silu(gate) * up"\n'
                                                 'halves = {gate_up = ["gate", "up"]}'),
                       ('gate = "bf16"', 'gate_up = "bf16"'))


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


# the same, for the halves of an input (on SILU_AND_MUL)
BAD_HALVES = [
    ("halves of no input", 'halves = {x = ["gate", "up"]}', 'halves = {y = ["gate", "up"]}', "halves.y: 'y' is not an input"),
    ("one half", 'halves = {x = ["gate", "up"]}', 'halves = {x = ["gate"]}', "halves.x must name its two operands"),
    ("halves not a table", 'halves = {x = ["gate", "up"]}', 'halves = ["gate", "up"]', "halves must be a table"),
    ("operand named twice", 'halves = {x = ["gate", "up"]}', 'halves = {x = ["up", "up"]}', "operand 'up' must be a new name"),
    ("operand named as the output", 'halves = {x = ["gate", "up"]}', 'halves = {x = ["gate", "y"]}',
     "operand 'y' must be a new name"),
    ("formula on the split input", 'formula = "silu(gate) * up"', 'formula = "silu(x) * up"',
     "'x' is in halves: name its operands (gate, up)"),
    ("formula on no operand", 'formula = "silu(gate) * up"', 'formula = "silu(z) * up"',
     "'z' is neither an operand (gate, up) nor a function"),
]


@pytest.mark.parametrize("what, old, new, says", BAD, ids=[row[0] for row in BAD])
def test_a_bad_declaration_is_refused_naming_what_is_wrong(tmp_path, what, old, new, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        new_op.load_declaration(_declaration(tmp_path, old, new))


@pytest.mark.parametrize("what, old, new, says", BAD_HALVES, ids=[row[0] for row in BAD_HALVES])
def test_a_bad_declaration_of_halves_is_refused_naming_what_is_wrong(tmp_path, what, old, new, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        new_op.load_declaration(_declaration(tmp_path, old, new, text=SILU_AND_MUL))


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


SCAFFOLDED = [  # (op, its declaration's text)
    ("fused_silu_mul", _edited(DECLARATION.read_text(), ('formula = "sigmoid(gate) * x"', 'formula = "silu(gate) * x"'),
                               ("amax = true", "amax = false"))),
    ("silu_and_mul", SILU_AND_MUL),
]


@pytest.mark.parametrize("name, declared", SCAFFOLDED, ids=[row[0] for row in SCAFFOLDED])
def test_a_scaffolded_op_runs_its_battery_and_rejects_its_wrong_implementations(tmp_path, name, declared):
    """fused_silu_mul (``silu(gate) * x``, no amax) and silu_and_mul (vLLM's: gate and up the halves of one
    input) in a copy of the repository: the family exists, so the contract-only implementation takes a module
    of its own; the lists name its ids; the generated suite certifies the kernel on a cell, the battery
    rejects every generated wrong implementation, and the tests that read every op (the contract's Refuse line
    against the refusal table, the contract-only implementation and its exp2 alternative) pass on it as
    written."""
    root = _copy_of_the_repository(tmp_path)
    declaration = _declaration(tmp_path, text=declared)
    run = _run_tool(f"activation/{name}", str(declaration), cwd=root)
    assert run.returncode == 0, run.stderr
    assert (root / "suites" / "contract_only" / f"{name}.py").is_file()
    assert (root / "docs" / "contracts" / f"{name}.toml").read_text() == declared   # the declaration is kept
    assert "note:" not in run.stdout   # every exp-based call takes one input: each is guarded
    assert f"suites/activation/test_{name}.py::test_cell" in (root / "test_lists" / "l0_cpu_cells.yml").read_text()
    again = _run_tool(f"activation/{name}", str(declaration), cwd=root)
    assert again.returncode == 2 and "never overwritten" in again.stderr
    suite = f"suites/activation/test_{name}.py"
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-profile", "smoke", "-W", "ignore",
         f"{suite}::test_cell[decode]", f"{suite}::test_battery_rejects",
         f"suites/test_contract_refusals.py::test_refusal_rows_are_the_contracts_refuse_line[{name}]",
         f"suites/test_contract_refusals.py::test_the_reference_refuses_its_rows[{name}]",
         f"suites/test_contract_only.py::test_an_implementation_written_from_the_contract_passes[{name}-contract]",
         f"suites/test_contract_only.py::test_an_implementation_written_from_the_contract_passes[{name}-exp2]"],
        capture_output=True, text=True, cwd=root, timeout=600,
        env=nested_pytest_environment(PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1"))
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert re.search(r"\b10 passed\b", tests.stdout), tests.stdout[-500:]


def _generated_module(path: pathlib.Path, text: str):
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_input_in_halves_after_one_of_the_ops_width_is_twice_as_wide(tmp_path):
    """``sigmoid(x) * silu(gate) * up``, gate and up the halves of the second input, with the amax: the reference
    takes gate_up of [T, 2H] beside x of [T, H], refuses it at [T, H] naming it, computes the formula on
    the halves, and refuses every row of its own table; the strategy builds gate_up twice as wide."""
    declared = new_op.load_declaration(_declaration(tmp_path, text=GATED_SWIGLU))
    root = tmp_path / "repo"
    shutil.copytree(REPO / "test_lists", root / "test_lists")
    (root / "suites" / "contract_only").mkdir(parents=True)
    files = {path.relative_to(root).as_posix(): text for path, text in
             new_op.plan_files(new_op.Op("activation", "gated_swiglu", declared), root).items()}
    for path, text in files.items():
        if path.endswith(".py"):
            compile(text, path, "exec")
    reference = _generated_module(tmp_path / "gated_swiglu.py", files["references/activation/gated_swiglu.py"])
    x, gate_up = torch.randn(3, 8).to(torch.bfloat16), torch.randn(3, 16).to(torch.bfloat16)
    y = reference.gated_swiglu(x, gate_up)
    gate, up = gate_up.float()[:, :8], gate_up.float()[:, 8:]
    fn = elementwise.WRITTEN_OUT
    assert torch.equal(y, (fn.sigmoid(x.float()) * fn.silu(gate) * up).to(torch.bfloat16))
    with pytest.raises(ValueError, match="gate_up"):
        reference.validate(x, gate_up[:, :8])
    for row in reference.REFUSALS:
        with pytest.raises(row.error) as refused:
            reference.validate(**row.make(torch.device("cpu")))
        names = (row.argument,) if isinstance(row.argument, str) else row.argument
        assert any(name in str(refused.value) for name in names), (row.what, str(refused.value))
    strategy = _generated_module(tmp_path / "gated_swiglu_strategy.py", files["references/activation/gated_swiglu_strategy.py"])
    built = strategy.build({"T": 3, "H": 8, "x_layout": "contiguous", "gate_up_layout": "contiguous",
                            "values": "normal", "amax": "none", "seed": 1}, "cpu")
    assert built["x"].shape == (3, 8) and built["gate_up"].shape == (3, 16)


def test_without_a_formula_every_file_compiles_and_marks_the_arithmetic_to_write(tmp_path):
    """An op that is not elementwise: the same files, valid Python, the arithmetic left as TODO(new-op) in
    the contract, the reference, the kernel and the contract-only implementation (whose suite then fails
    until it is written: the reference raises NotImplementedError)."""
    declared = new_op.load_declaration(_declaration(tmp_path, 'formula = "sigmoid(gate) * x"\n', ""))
    root = tmp_path / "repo"
    shutil.copytree(REPO / "test_lists", root / "test_lists")
    (root / "suites" / "contract_only").mkdir(parents=True)
    files = new_op.plan_files(new_op.Op("activation", "fused_todo", declared), root)
    for path, text in files.items():
        if path.suffix == ".py":
            compile(text, str(path), "exec")
    todo = [path.relative_to(root).as_posix() for path, text in files.items() if new_op.TODO in text]
    assert todo == ["docs/contracts/fused_todo.md", "references/activation/fused_todo.py", "ops/activation/fused_todo.py",
                    "suites/contract_only/activation.py"]


def test_an_exp_based_call_of_a_compound_argument_is_named_as_unguarded(tmp_path):
    """The strategy keeps a direct argument of sigmoid, silu or exp inside fp32's exp range; of a compound one
    (vLLM's tanh GELU as ``sigmoid(2z)``) it cannot, and the tool says so after writing."""
    direct = new_op.Op("activation", "fused_sigmoid_mul", new_op.load_declaration(_declaration(tmp_path)))
    compound = new_op.Op("activation", "gelu_like", new_op.load_declaration(_declaration(
        tmp_path, 'formula = "sigmoid(gate) * x"', 'formula = "gate * sigmoid(1.5 * (gate + 0.04 * gate * gate)) * x"')))
    assert direct.unguarded_calls() == [] and direct.exp_arguments() == {"gate": "sigmoid"}
    assert compound.unguarded_calls() == ["sigmoid(1.5 * (gate + 0.04 * gate * gate))"]
    assert compound.exp_arguments() == {}
