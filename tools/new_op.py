"""tools/new-op FAMILY/NAME DECLARATION.toml: every file a new op needs, from one short declaration.

The declaration (TOML; ``--template`` prints a commented one) names the op's inputs with their dtypes,
its output, the dims they share, the parity class, an optional in-place ``amax`` of the output, the
formula (elementwise ops, in the names of ``references/elementwise.py``), the inputs that hold two operands
side by side (``halves``: vLLM's ``SiluAndMul`` reads gate and up from one ``[T, 2D]`` tensor) and the
cells with their bounds and why.  From it the tool writes, and never overwrites:

- ``docs/contracts/NAME.md``: the contract section, in CONTRACTS.md's format, for review (CONTRACTS.md
  lives outside the repository; the suites read pending sections from ``docs/contracts/`` until it is
  merged there);
- ``references/FAMILY/NAME.py``: validation, the reference, the float64 truth (band), the stock op, the
  amax property and the refusal table, from the shared helpers (``references/amax.py``,
  ``references/refusal_tables.py``, ``references/elementwise.py``);
- ``references/FAMILY/NAME_strategy.py``: recipes, corners and inputs (``references/strategies/``);
- ``ops/FAMILY/NAME.py``: the Triton kernel (exact bf16 loads, the amax fold: ``ops/triton_elementwise.py``),
  its launch plan, host wrapper, cells, bench case and ``ENTRY``;
- ``suites/FAMILY/test_NAME.py`` and ``suites/FAMILY/NAME_impls.py``: the suite and its table of wrong
  implementations (the ones every elementwise op can get wrong; add the op's own);
- the contract-only implementation (``suites/contract_only/FAMILY.py``, or ``NAME.py`` in a family that
  has one), registered by its ``CONTRACT_ONLY`` table, with the formula's exp-based functions through exp2
  as a second one (band ops);
- the ``__init__.py`` files of a new family, and the suite's ids appended to ``test_lists/l0_cpu.yml``,
  ``l0_cpu_cells.yml`` and ``l0_h200.yml``.

Without ``formula`` (an op that is not elementwise) the same files are written with the arithmetic
left to write, marked ``TODO(new-op)``.  docs/adding-an-op.md walks through it.

Exit status: 0 written; 2 a bad declaration, a bad name or an op that exists (one line, nothing written).
"""
from __future__ import annotations

import ast
import json
import pathlib
import re
import string
import textwrap
import sys
import tomllib

import yaml

from tools.cli import ArgumentParser, UsageError

REPO = pathlib.Path(__file__).resolve().parent.parent
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}
FUNCTIONS = ("sigmoid", "silu", "exp")   # references/elementwise.py and ops/triton_elementwise.py
KEYS = {"summary", "parity", "parity_why", "formula", "amax", "batch_invariant", "dims", "inputs", "output",
        "cells", "real_users", "halves"}
CELL_KEYS = {"id", "why", "corners"}
TODO = "TODO(new-op)"

TEMPLATE = '''\
# tools/new-op FAMILY/NAME THIS_FILE: one op's declaration (docs/adding-an-op.md)
summary = "y = sigmoid(gate) * x in fp32, rounded once to bf16"   # one line: what the op computes
real_users = "Qwen3-Next's gated attention output (vLLM, SGLang)"  # who calls it: the cells serve them
parity = "band"              # "band" (error against float64 truth) or "bitwise" (the reference's bits)
parity_why = "sigmoid's exp differs by implementation (exp, exp2, approximate): no bits to pin"
formula = "sigmoid(gate) * x"  # elementwise ops: inputs and sigmoid/silu/exp; leave out otherwise
amax = true                  # an optional fp32 one-element amax of the output, raised in place
batch_invariant = true
dims = ["T", "H"]            # the output's [rows, cols], which every input shares but those in halves
# halves = {gate_up = ["gate", "up"]}  # an input of [rows, 2 * cols] holding two operands side by side
#   (gate_up[:, :cols], then gate_up[:, cols:]: vLLM's SiluAndMul); the formula names the operands

[inputs]                     # name = dtype (bf16, fp16, fp32), in the signature's order
x = "bf16"
gate = "bf16"

[output]
y = "bf16"

[[cells]]                    # bounds per dim: [lo, hi] inclusive; corners: production sizes to pin
id = "decode"
why = "decode steps of 1..256 tokens, hidden sizes up to 16384"
T = [1, 256]
H = [1, 16384]
corners = {H = [2048, 4096]}
'''


# -- the declaration ------------------------------------------------------------------------------
def _fail(message: str):
    raise UsageError(message)


def _span(cell_id: str, dim: str, bound) -> tuple[int, int]:
    if not (isinstance(bound, list) and len(bound) == 2 and all(type(v) is int for v in bound)):
        _fail(f"cell {cell_id!r}: {dim} must be [lo, hi] of two integers, got {bound!r}")
    lo, hi = bound
    if not 0 <= lo <= hi:
        _fail(f"cell {cell_id!r}: {dim} = [{lo}, {hi}] is not 0 <= lo <= hi")
    return lo, hi


def _formula(text: str, inputs: list[str], what: str = "an input") -> ast.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        _fail(f"formula {text!r} does not parse ({error.msg})")
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Constant, ast.Load,
               ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.UAdd)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            _fail(f"formula {text!r}: {type(node).__name__} is not allowed (arithmetic, inputs, {', '.join(FUNCTIONS)})")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
                                               and len(node.args) == 1 and not node.keywords):
            _fail(f"formula {text!r}: calls only {', '.join(FUNCTIONS)} of one argument")
        if isinstance(node, ast.Name) and node.id not in inputs and node.id not in FUNCTIONS:
            _fail(f"formula {text!r}: {node.id!r} is neither {what} ({', '.join(inputs)}) nor a function")
        if isinstance(node, ast.Constant) and type(node.value) not in (int, float):
            _fail(f"formula {text!r}: constant {node.value!r} is not a number")
    return tree


def load_declaration(path: pathlib.Path) -> dict:
    """The declaration at ``path``, checked; a bad one is a UsageError naming the key."""
    try:
        declared = tomllib.loads(path.read_text())
    except OSError as error:
        _fail(f"cannot read {path}: {error.strerror}")
    except tomllib.TOMLDecodeError as error:
        _fail(f"{path} is not TOML: {error}")
    unknown = sorted(set(declared) - KEYS)
    if unknown:
        _fail(f"unknown key {unknown[0]!r} (keys: {', '.join(sorted(KEYS))})")
    for key in ("summary", "parity", "dims", "inputs", "output", "cells"):
        if key not in declared:
            _fail(f"missing key {key!r}")
    if declared["parity"] not in ("band", "bitwise"):
        _fail(f"parity must be 'band' or 'bitwise', got {declared['parity']!r}")
    if declared["parity"] == "band" and declared.get("parity_why") is None:
        _fail("parity_why: say why the op cannot be bitwise (which legitimate implementations differ)")
    dims = declared["dims"]
    if not (isinstance(dims, list) and len(dims) == 2 and all(isinstance(d, str) and d.isidentifier() for d in dims)
            and dims[0] != dims[1]):
        _fail(f"dims must name the two dims of [rows, cols], got {dims!r}")
    inputs = declared["inputs"]
    if not isinstance(inputs, dict) or not inputs:
        _fail("inputs: name at least one input, as name = dtype")
    for name, dtype in inputs.items():
        if not SNAKE.match(name) or name == "amax":
            _fail(f"input {name!r} is not a snake_case name other than amax")
        if dtype not in DTYPES:
            _fail(f"input {name!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    output = declared["output"]
    if not (isinstance(output, dict) and len(output) == 1):
        _fail("output: name exactly one output, as name = dtype")
    [(out_name, out_dtype)] = output.items()
    if not SNAKE.match(out_name) or out_name in inputs or out_dtype not in DTYPES:
        _fail(f"output {out_name!r} = {out_dtype!r}: a new snake_case name and one of {', '.join(DTYPES)}")
    amax = declared.get("amax", False)
    if not isinstance(amax, bool):
        _fail(f"amax must be true or false, got {amax!r}")
    if amax and out_dtype != "bf16":
        _fail(f"amax: the in-place amax folds bf16 bit patterns; the output is {out_dtype}")
    halves = declared.get("halves", {})
    if not isinstance(halves, dict):
        _fail("halves must be a table: input = [first operand, second operand]")
    for name, parts in halves.items():
        if name not in inputs:
            _fail(f"halves.{name}: {name!r} is not an input ({', '.join(inputs)})")
        if not (isinstance(parts, list) and len(parts) == 2
                and all(isinstance(part, str) and SNAKE.match(part) for part in parts)):
            _fail(f"halves.{name} must name its two operands in snake_case, e.g. [\"gate\", \"up\"], got {parts!r}")
    operands = [part for name in inputs for part in halves.get(name, [name])]
    for part in (part for parts in halves.values() for part in parts):
        if part in inputs or part in (out_name, "amax", *FUNCTIONS) or operands.count(part) > 1:
            _fail(f"halves: operand {part!r} must be a new name (not an input, the output, amax, a function "
                  f"or another operand)")
    if "formula" in declared:
        if not isinstance(declared["formula"], str):
            _fail("formula must be a string")
        for name, parts in halves.items():
            if re.search(rf"\b{name}\b", declared["formula"]):
                _fail(f"formula {declared['formula']!r}: {name!r} is in halves: name its operands ({', '.join(parts)})")
        _formula(declared["formula"], operands, "an operand" if halves else "an input")
    if not isinstance(declared.get("batch_invariant", False), bool):
        _fail("batch_invariant must be true or false")
    cells = declared["cells"]
    if not isinstance(cells, list) or not cells:
        _fail("cells: declare at least one [[cells]] table")
    seen = set()
    for cell in cells:
        cell_id = cell.get("id")
        if not isinstance(cell_id, str) or not SNAKE.match(cell_id):
            _fail(f"cell id {cell_id!r} is not snake_case")
        if cell_id in seen:
            _fail(f"cell id {cell_id!r} is declared twice")
        seen.add(cell_id)
        if not isinstance(cell.get("why"), str) or not cell["why"].strip():
            _fail(f"cell {cell_id!r}: a one-line why is missing")
        unknown = sorted(set(cell) - CELL_KEYS - set(dims))
        if unknown:
            _fail(f"cell {cell_id!r}: unknown key {unknown[0]!r} (dims: {', '.join(dims)})")
        for dim in dims:
            if dim not in cell:
                _fail(f"cell {cell_id!r}: no bound for {dim}")
            cell[dim] = _span(cell_id, dim, cell[dim])
        corners = cell.get("corners", {})
        for dim, sizes in corners.items():
            if dim not in dims or not isinstance(sizes, list) or not all(type(s) is int for s in sizes):
                _fail(f"cell {cell_id!r}: corners.{dim} must be a list of sizes of a declared dim")
            lo, hi = cell[dim]
            outside = [s for s in sizes if not lo <= s <= hi]
            if outside:
                _fail(f"cell {cell_id!r}: corner {dim} = {outside[0]} is outside [{lo}, {hi}]")
        if cell[dims[1]][0] == 0:
            _fail(f"cell {cell_id!r}: {dims[1]} = 0 (an empty row) is not a cell of a [rows, cols] op")
    declared.setdefault("amax", False)
    declared.setdefault("batch_invariant", False)
    declared.setdefault("real_users", "")
    return declared


# -- what is written ------------------------------------------------------------------------------
def _rename(formula: str, function, name) -> str:
    """``formula`` with each function call spelt ``function(f)`` and each input ``name(i)``."""
    class Rename(ast.NodeTransformer):
        def visit_Call(self, node):
            node.args = [self.visit(arg) for arg in node.args]
            node.func = ast.parse(function(node.func.id), mode="eval").body
            return node

        def visit_Name(self, node):
            return ast.parse(name(node.id), mode="eval").body

    return ast.unparse(Rename().visit(ast.parse(formula, mode="eval")))


class Op:
    """The names and snippets the templates are filled with."""

    def __init__(self, family: str, name: str, declared: dict):
        self.family, self.name, self.d = family, name, declared
        self.inputs = list(declared["inputs"])
        [(self.out, self.out_dtype)] = declared["output"].items()
        self.rows, self.cols = declared["dims"]
        self.amax = declared["amax"]
        self.first = self.inputs[0]
        self.formula = declared.get("formula")
        self.halves = declared.get("halves", {})
        self.operands = [part for name in self.inputs for part in self.parts(name)]

    def parts(self, name: str) -> list[str]:
        """The operands input ``name`` holds side by side: two for one in ``halves``, else itself."""
        return list(self.halves.get(name, [name]))

    def width(self, name: str) -> str:
        """The last dim of input ``name`` in the declaration's dims: ``H`` or ``2H``."""
        return self.cols if name not in self.halves else f"2{self.cols}" if len(self.cols) == 1 else f"2 * {self.cols}"

    def input_shape(self, name: str) -> str:
        return f"[{self.rows}, {self.width(name)}]"

    @property
    def rows_cols(self) -> str:
        """``rows, cols`` of the output, from the first input's shape."""
        first = self.first
        return f"{first}.shape" if first not in self.halves else f"{first}.shape[0], {first}.shape[1] // 2"

    def split_lines(self, indent: str = "    ") -> str:
        """Lines naming each operand of an input in ``halves`` (its two column halves); empty without."""
        if not self.halves:
            return ""
        lines = [f"{indent}cols = {self.first}.shape[1]" + (" // 2" if self.first in self.halves else "")]
        lines += [f"{indent}{a}, {b} = {name}[:, :cols], {name}[:, cols:]" for name, (a, b) in self.halves.items()]
        return "\n".join(lines) + "\n"

    def _halves_text(self, name: str) -> str:
        if name not in self.halves:
            return ""
        a, b = self.parts(name)
        return (f", `{a}` then `{b}` side by side (`{name}[:, :{self.cols}]`, `{name}[:, {self.cols}:]`; an odd "
                f"last dim is a shape mismatch)")

    def unguarded_calls(self) -> list[str]:
        """The formula's exp-based calls of a compound argument (``sigmoid(2 * (a + b))``), which the strategy
        cannot keep inside fp32's exp range by bounding one input: what to bound is the op's to say."""
        if self.formula is None:
            return []
        return [ast.unparse(node) for node in ast.walk(ast.parse(self.formula, mode="eval"))
                if isinstance(node, ast.Call) and not isinstance(node.args[0], ast.Name)]

    def exp_arguments(self) -> dict[str, str]:
        """operand -> the exp-based function it is a direct argument of, in the formula."""
        if self.formula is None:
            return {}
        return {node.args[0].id: node.func.id for node in ast.walk(ast.parse(self.formula, mode="eval"))
                if isinstance(node, ast.Call) and isinstance(node.args[0], ast.Name)}

    # signature pieces
    @property
    def params(self) -> str:
        return ", ".join(self.inputs + (["amax=None"] if self.amax else []))

    @property
    def args(self) -> str:
        return ", ".join(self.inputs + (["amax"] if self.amax else []))

    @property
    def shape(self) -> str:
        return f"[{self.rows}, {self.cols}]"

    def dtype(self, name: str) -> str:
        return DTYPES[self.d["inputs"][name]]

    @property
    def signature(self) -> str:
        return f"{self.name}({self.params}) -> {self.out} {self.out_dtype}{self.shape}"

    def formula_in(self, fn: str, cast: str) -> str:
        """The formula on the operands cast with ``cast`` (``.float()``), functions from namespace ``fn``."""
        if self.formula is None:
            return f"_todo({', '.join(n + cast for n in self.operands)})"
        return _rename(self.formula, lambda f: f"{fn}.{f}", lambda n: n + cast)

    def values(self) -> dict:
        d = self.d
        out_torch = DTYPES[self.out_dtype]
        amax_line = (f"- `amax`: None or an fp32 one-element tensor; when given, after the call\n"
                     f"  `amax[0] == max(old amax[0], max |{self.out}|)` exactly, where {self.out} are the "
                     f"{self.out_dtype} values returned.\n") if self.amax else ""
        cells_line = "; ".join(f"`{c['id']}` ({', '.join(f'{dim} in {c[dim][0]}..{c[dim][1]}' for dim in d['dims'])})"
                               for c in d["cells"])
        input_line = "; ".join(f"`{n}`: {d['inputs'][n]} `{self.input_shape(n)}`" + self._halves_text(n)
                               for n in self.inputs)
        return {
            "family": self.family, "name": self.name, "summary": d["summary"], "parity": d["parity"],
            "parity_title": d["parity"] + (f" ({self.out}), exact self-consistency (amax)" if self.amax else ""),
            "parity_why": d.get("parity_why") or "its reference's bits are the contract's",
            "real_users": d["real_users"] or f"{TODO}: who calls it",
            "signature": self.signature, "params": self.params, "args": self.args, "shape": self.shape,
            "rows": self.rows, "cols": self.cols, "out": self.out, "out_dtype": self.out_dtype, "out_torch": out_torch,
            "first": self.first, "amax_line": amax_line, "cells_line": cells_line, "input_line": input_line,
            "formula_text": self.formula or f"{TODO}: the arithmetic",
            "batch_line": "Batch-invariant. " if d["batch_invariant"] else "",
            "BAND": "BAND" if d["parity"] == "band" else "BITWISE",
        }


def rewrap(source: str, width: int = 110) -> str:
    """``source`` with the paragraphs of its module docstring filled to ``width`` (bullets kept)."""
    if not source.startswith('"""'):
        return source
    end = source.index('"""', 3)
    paragraphs = source[3:end].rstrip("\n").split("\n\n")
    filled = [p if p.lstrip().startswith("- ") else textwrap.fill(" ".join(p.split()), width, break_on_hyphens=False)
              for p in paragraphs]
    return '"""' + "\n\n".join(filled) + ("\n" if len(filled) > 1 else "") + source[end:]


CONTRACT = string.Template('''\
## $family/$name — $parity_title
`$signature`
- $input_line; any strides.
- In fp32: `$out = $formula_text`, rounded once to $out_dtype$sigmoid_note; NaN and +-inf give what
  that IEEE arithmetic gives.
${amax_line}- `$out` is freshly allocated$fresh_note. ${batch_line}Refuse: shape/dtype mismatch.
- Cells: $cells_line.
''')


def contract_md(op: Op) -> str:
    used = {node.func.id for node in ast.walk(ast.parse(op.formula, mode="eval"))
            if isinstance(node, ast.Call)} if op.formula else set()
    written = [text for function, text in (("sigmoid", "`sigmoid(g) = 1 / (1 + exp(-g))`"),
                                           ("silu", "`silu(g) = g * sigmoid(g)`")) if function in used]
    sigmoid = f" ({', '.join(written)})" if written else ""
    fresh = (" (no input is written: `amax` is the only in-place argument)" if op.amax
             else " (no input is written)")
    return CONTRACT.substitute(op.values(), sigmoid_note=sigmoid, fresh_note=fresh)


REFERENCE = string.Template('''\
"""Contract ``$family/$name`` ($parity_title), in executable form.

``$signature``: $summary.  Its section: docs/contracts/$name.md (for CONTRACTS.md).

Parity: $parity — $parity_why.${amax_doc}

Refused: the contract's Refuse line (shape/dtype mismatch) and non-tensors.
"""
from __future__ import annotations

import torch

from references import elementwise
${amax_import}from references.refusal_tables import tensor_of, tensor_refusals
from references.validation import $validation_imports
$todo_def

def validate($params) -> None:
$validate_body
$validate_amax    require_same_device({$devices})


def formula($inputs, fn):
    """The contract's arithmetic on operands already in the working dtype; ``fn``: ``elementwise.WRITTEN_OUT``
    (the contract's own formulas) or ``elementwise.TORCH`` (plain PyTorch's)."""
${split_lines}    return $formula_fn


def $name($params) -> torch.Tensor:
    validate($args)
    $out = formula($inputs_float, elementwise.WRITTEN_OUT).to($out_torch)
    return $returned


$truth_def
def stock($params) -> torch.Tensor:
    """What a serving engine runs without a fused kernel: PyTorch's own functions in fp32, one kernel each."""
    $out = formula($inputs_float, elementwise.TORCH).to($out_torch)
    return $returned
$amax_property

# -- refused inputs ------------------------------------------------------------------------------
def _call(device, **override):
    kwargs = {$call_kwargs}
    return {**kwargs, **override}


MISMATCH = "shape/dtype mismatch"   # the contract's Refuse line
REFUSALS = (
$refusal_rows
)
''')


def _expected_shape(op: Op, name: str, first_shape: str | None = None) -> str:
    """The shape input ``name`` must have, from the first input's (``first_shape`` where the widths agree; a
    half as wide, or twice, in halves)."""
    first = op.first
    if (name in op.halves) == (first in op.halves):
        return first_shape or f"tuple({first}.shape)"
    return (f"({first}.shape[0], {first}.shape[1] // 2)" if first in op.halves
            else f"({first}.shape[0], 2 * {first}.shape[1])")


def reference_py(op: Op) -> str:
    v = op.values()
    first = op.first
    validate = [f'    require_tensor("{first}", {first})',
                f'    require_ndim("{first}", {first}, 2, "{op.input_shape(first)}")',
                f'    require_dtype("{first}", {first}, ({op.dtype(first)},))']
    if first in op.halves:
        a, b = op.parts(first)
        validate += [f"    if {first}.shape[1] % 2:",
                     f'        raise refuse("{first}", f"last dim {{{first}.shape[1]}} is odd", '
                     f'"pass {op.input_shape(first)}: {a}, then {b}, side by side")']
    for name in op.inputs[1:]:
        validate += [f'    require_tensor("{name}", {name})', f'    require_dtype("{name}", {name}, ({op.dtype(name)},))',
                     f'    require_shape("{name}", {name}, {_expected_shape(op, name)}, '
                     f'"{op.input_shape(name)} like {first}")']
    samples = {n: "(4, 128)" if n in op.halves else "(4, 64)" for n in op.inputs}
    rows = [f"    *tensor_refusals(_call, \"{first}\", {samples[first]}, {op.dtype(first)}, MISMATCH"
            f"{_other_dtype(op, first)}),"]
    if first in op.halves:
        odd = f"tensor_of(device, (4, 127), {op.dtype(first)})"
        rows += [f'    Refusal("odd last dim of {first}", lambda device: _call(device, {first}={odd}),',
                 f'            "{first}", clause=MISMATCH),']
    rows += [f"    *tensor_refusals(_call, \"{name}\", {samples[name]}, {op.dtype(name)}, MISMATCH{_other_dtype(op, name)}, "
             f"like=\"{first}\")," for name in op.inputs[1:]]
    if op.amax:
        rows.append("    *amax_refusals(_call, MISMATCH),")
    call = [f'"{n}": tensor_of(device, {samples[n]}, {op.dtype(n)})' for n in op.inputs]
    validation_imports = (["Refusal", "refuse"] if first in op.halves else []) + [
        "require_dtype", "require_ndim", "require_same_device", *(["require_shape"] if op.inputs[1:] else []),
        "require_tensor"]
    if op.amax:
        call.append('"amax": torch.zeros(1, device=device)')
    band = op.d["parity"] == "band"
    if band:
        returns = f"{op.out} if amax is None else ({op.out}, None)" if op.amax else op.out
        truth = (f'def truth({op.params}):\n    """float64 ``{op.out}``'
                 + (f"; with ``amax``, ``({op.out}, None)``: amax is judged by the stateful property, not the band"
                    if op.amax else "") + '."""\n'
                 f"    validate({op.args})\n"
                 f"    {op.out} = formula({', '.join(n + '.double()' for n in op.inputs)}, elementwise.WRITTEN_OUT)\n"
                 f"    return {returns}\n\n")
    else:
        truth = ""
    amax_doc = ("\n\n``amax`` (fp32, one element), when given, is raised in place to ``max(amax[0], max |" + op.out
                + "|)`` over the bf16 values returned (``references/amax.py``): the band does not judge it, the "
                "stateful property ``amax_is_max_of_returned_values`` does, exactly.") if op.amax else ""
    return REFERENCE.substitute(
        v, amax_doc=amax_doc,
        amax_import="from references.amax import amax_property, amax_refusals, raised, validate_amax\n" if op.amax else "",
        todo_def="" if op.formula else (f"\n\ndef _todo(*operands):\n    raise NotImplementedError(\"{TODO}: "
                                        f"write the contract's arithmetic in formula()\")\n"),
        validation_imports=", ".join(validation_imports), split_lines=op.split_lines(),
        validate_body="\n".join(validate), validate_amax="    validate_amax(amax)\n" if op.amax else "",
        devices=", ".join(f'"{n}": {n}' for n in op.inputs + (["amax"] if op.amax else [])),
        inputs=", ".join(op.inputs), formula_fn=op.formula_in("fn", ""),
        inputs_float=", ".join(n + ".float()" for n in op.inputs),
        returned=f"raised(amax, {op.out})" if op.amax else op.out,
        truth_def=truth,
        amax_property=(f"\n\namax_is_max_of_returned_values = amax_property(\"{op.name}\")\n" if op.amax else ""),
        call_kwargs=",\n              ".join(call), refusal_rows="\n".join(rows))


def _other_dtype(op: Op, name: str) -> str:
    return ", other_dtype=torch.float16" if op.d["inputs"][name] == "fp32" else ""


STRATEGY = string.Template('''\
"""Inputs for ``$name``: recipes inside a cell's bounds, and the tensors they build.

A recipe: ``{$recipe_keys}``: sizes from the cell (edges favoured; the cell's production sizes among the
corners), each input in any legal row layout with NaN garbage between rows
(``references/strategies/layouts.py``), and a value mode of ``references/strategies/elementwise.py``
(NaN, +-inf, signed zeros, subnormals, saturating arguments, rows at scales 2**-60..2**60)$amax_doc.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

${amax_import}from references.bounds import Span
from references.strategies import elementwise
from references.strategies.layouts import LAYOUTS, row_view
from references.strategies.shapes import seeds, sizes

# The interpreter costs milliseconds per program: on the CPU keep $rows * $cols within 2**14 elements so
# one example (about a dozen calls across the battery) takes a fraction of a second.  GPUs take the whole cell.
CPU_ELEMENT_BUDGET = 2**14
PRODUCTION = {$production}
"""cell id -> dim -> the production sizes its corners pin (CONTRACTS.md: production shapes are corners)."""
EXP_ARGUMENTS = {$exp_arguments}
"""$exp_key -> the exp-based function of the formula it is an argument of (``elementwise.within_fp32_exp``)."""


def _caps(cell, device) -> tuple[Span, Span]:
    """The cell's spans of $rows and $cols, the $cols span capped on the CPU."""
    rows, cols = cell.bounds["$rows"], cell.bounds["$cols"]
    if device.type == "cpu":
        cols = Span(cols.lo, max(cols.lo, min(cols.hi, CPU_ELEMENT_BUDGET // max(rows.lo, 1))))
    return rows, cols


def _row_cap(cols: int, device) -> int | None:
    return max(1, CPU_ELEMENT_BUDGET // cols) if device.type == "cpu" else None


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        rows, cols = _caps(cell, device)
        width = draw(sizes(cols))
        return {"$rows": draw(sizes(rows, cap=_row_cap(width, device))), "$cols": width,
$layout_draws
                "values": draw(st.sampled_from(elementwise.MODES)),$amax_draw
                "seed": draw(seeds())}

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """The fewest $rows at the narrowest and at the widest row, the most $rows (capped on the CPU) at both,
    a width off every block (1001) and the cell's production sizes, each in another layout$and_amax."""
    device = torch.device(device)
    rows, cols = _caps(cell, device)
    widths = [cols.lo, cols.hi, *(w for w in (1001, *PRODUCTION.get(cell.id, {}).get("$cols", ())) if w in cols)]
    shapes = []
    for width in dict.fromkeys(widths):
        cap = _row_cap(width, device)
        most = rows.hi if cap is None else max(rows.lo, min(rows.hi, cap))
        shapes += [(rows.lo, width), (most, width)]
    shapes += [(t, cols.lo) for t in PRODUCTION.get(cell.id, {}).get("$rows", ()) if t in rows]
    return [{"$rows": t, "$cols": width,
$layout_corners
             "values": elementwise.MODES[i % len(elementwise.MODES)],$amax_corner
             "seed": cell.seed("corner", i)}
            for i, (t, width) in enumerate(dict.fromkeys(shapes))]


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(recipe["seed"])
    rows, cols = recipe["$rows"], recipe["$cols"]
    inputs = {}
$build_loop    return {**inputs$amax_build}
''')


def strategy_py(op: Op) -> str:
    v = op.values()
    keys = [f'"{op.rows}"', f'"{op.cols}"', *(f'"{n}_layout"' for n in op.inputs), '"values"',
            *(['"amax"'] if op.amax else []), '"seed"']
    production = {c["id"]: c["corners"] for c in op.d["cells"] if c.get("corners")}
    return STRATEGY.substitute(
        v, recipe_keys=", ".join(keys),
        amax_doc=", and ``amax`` absent or at a value before the call (``references/amax.py``)" if op.amax else "",
        amax_import="from references.amax import AMAX_MODES, amax_of_mode\n" if op.amax else "",
        production=", ".join(f'"{cell}": {{{", ".join(f"{dim!r}: {tuple(s)!r}" for dim, s in dims.items())}}}'
                             for cell, dims in production.items()).replace("'", '"'),
        layout_draws="\n".join(f'                "{n}_layout": draw(st.sampled_from(LAYOUTS)),' for n in op.inputs),
        layout_corners="\n".join(f'             "{n}_layout": LAYOUTS[(i + {k}) % len(LAYOUTS)],'
                                 for k, n in enumerate(op.inputs)),
        amax_draw=' "amax": draw(st.sampled_from(AMAX_MODES)),' if op.amax else "",
        amax_corner=' "amax": AMAX_MODES[i % len(AMAX_MODES)],' if op.amax else "",
        build_loop=_build_loop(op), exp_key="operand" if op.halves else "input",
        and_amax=", value mode\n    and amax" if op.amax else " and value mode",
        amax_build=', "amax": amax_of_mode(recipe["amax"], device)' if op.amax else "",
        exp_arguments=", ".join(f'"{name}": "{function}"' for name, function in op.exp_arguments().items()))


def _build_loop(op: Op) -> str:
    """The strategy's loop that builds each input; an input in ``halves`` is as wide as its two operands, each
    half within its own function's exp range."""
    if not op.halves:
        dtypes = "(" + ", ".join(f'("{n}", {op.dtype(n)})' for n in op.inputs) + ("," if len(op.inputs) == 1 else "") + ")"
        return (f"    for name, dtype in {dtypes}:\n"
                "        tensor = row_view(rows, cols, dtype, recipe[f\"{name}_layout\"], device)\n"
                "        values = elementwise.values(rows, cols, dtype, recipe[\"values\"], generator, device)\n"
                "        tensor.copy_(elementwise.within_fp32_exp(values, EXP_ARGUMENTS.get(name)).to(dtype))\n"
                "        inputs[name] = tensor\n")
    parts = "(" + ", ".join(f'("{n}", {op.dtype(n)}, {tuple(op.parts(n))!r})'.replace("'", '"') for n in op.inputs) \
        + ("," if len(op.inputs) == 1 else "") + ")"
    return (f"    for name, dtype, operands in {parts}:  # operands side by side\n"
            "        width = cols * len(operands)\n"
            "        tensor = row_view(rows, width, dtype, recipe[f\"{name}_layout\"], device)\n"
            "        values = elementwise.values(rows, width, dtype, recipe[\"values\"], generator, device)\n"
            "        for k, operand in enumerate(operands):\n"
            "            half = values[:, k * cols:(k + 1) * cols]\n"
            "            half.copy_(elementwise.within_fp32_exp(half, EXP_ARGUMENTS.get(operand)))\n"
            "        tensor.copy_(values.to(dtype))\n"
            "        inputs[name] = tensor\n")


KERNEL = string.Template('''\
"""$family/$name — $summary (Triton).

Contract (docs/contracts/$name.md, for CONTRACTS.md): ``$signature``; $parity parity$amax_note.  Real
users: $real_users.

One program computes a ``[BLOCK_ROWS, BLOCK_COLS]`` tile: every element on its own, from its own inputs,
so neither the tile nor the batch around a row can change a bit of it (batch invariance by
construction)$amax_tile.  Inputs are loaded as bits and widened exactly, the result rounded once to
nearest even (``ops/triton_elementwise.py``: the interpreter's own casts are not exact).$halves_note

Bytes: read $byte_inputs, write ``$out`` ($out_bytes bytes an element)$amax_bytes; no reuse, so the op is
memory-bound: the bench case moves its bytes at copy bandwidth or not at all.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, BenchCase, Cell, Entry, Parity, Span
from ops.triton_backend import interpreting
from ops.triton_elementwise import $kernel_imports
from references.$family import $name as contract


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    block_rows: int
    block_cols: int
    num_warps: int


def launch_plan(rows: int, cols: int) -> LaunchPlan:
    # GPU: 4096 elements a program at 8 warps: 16 a thread, two 16-byte loads of each bf16 input in flight;
    # a narrow row shares its program with the next rows rather than leaving lanes idle.  The interpreter
    # costs about 60 ms a program whatever its size: there, programs of 4096 columns, so that the CPU
    # strategy's inputs (2**14 elements at most) take 1 to 4 of them$amax_programs.
    tile, widest = (4096, 4096) if interpreting() else (4096, 1024)
    block_cols = min(triton.next_power_of_2(cols), widest)
    block_rows = min(tile // block_cols, triton.next_power_of_2(max(rows, 1)))
    return LaunchPlan(block_rows, block_cols, num_warps=max(1, min(8, block_rows * block_cols // 512)))


# -- kernel ---------------------------------------------------------------------------------------
@triton.jit
def _$name(
    # inputs
    $pointer_params,
    # outputs: $out (contiguous)$amax_param_doc
    out_ptr,$amax_param
    # sizes
    rows, cols,
    # meta
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,$amax_meta
):
    row = (tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)[:, None]  # row * stride past 2**31
    col = (tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS))[None, :]
    inside = (row < rows) & (col < cols)
$loads
    $store
$fold

# -- host wrapper ---------------------------------------------------------------------------------
def run_plan(plan: LaunchPlan, $params) -> torch.Tensor:
    """Launch ``plan`` on already-validated arguments."""
    rows, cols = $rows_cols
    $out = torch.empty((rows, cols), dtype=$out_torch, device=$first.device)
    if $out.numel() == 0:
        return $out
    grid = (triton.cdiv(rows, plan.block_rows), triton.cdiv(cols, plan.block_cols))
    _$name[grid](
        $launch_inputs,
        $out,$amax_arg rows, cols,
        BLOCK_ROWS=plan.block_rows, BLOCK_COLS=plan.block_cols,$amax_flag num_warps=plan.num_warps,
    )
    return $out


def $name($params) -> torch.Tensor:
    contract.validate($args)
    return run_plan(launch_plan($launch_shape), $args)


# -- cells, bench case, catalog entry -------------------------------------------------------------
def params_of($params) -> dict:
    rows, cols = $rows_cols
    return {"$rows": rows, "$cols": cols}


CELLS = (
$cells
)


def bytes_moved($params) -> int:
    return sum(t.numel() * t.element_size() for t in ($inputs_tuple)) + $out_elements * $out_bytes$amax_bytes_code


def bench_input(rows: int, cols: int):
    """The bench input, at the size of the module docstring's real users: inputs ~ N(0, 1)."""
    def make(device):
        generator = torch.Generator(device=device).manual_seed(0)
        return {$bench_inputs}
    return make


BENCH = (
    BenchCase("$bench_label", bench_input($bench_rows, $bench_cols), bytes_moved, ">= 80% of copy bandwidth"),
)

ENTRY = Entry.of_contract(
    contract,
    kernel=$name,
    parity=Parity.$BAND,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,$batch
    bench=BENCH,
)
''')

_TRITON_LOAD = {"bf16": "load_bf16({n}_ptr, row * {n}_row_stride + {col} * {n}_col_stride, inside)",
                "fp16": "tl.load({n}_ptr + row * {n}_row_stride + {col} * {n}_col_stride, mask=inside, other=0.0).to(tl.float32)",
                "fp32": "tl.load({n}_ptr + row * {n}_row_stride + {col} * {n}_col_stride, mask=inside, other=0.0)"}
_TRITON_STORE = {"bf16": "store_bf16(out_ptr, row * cols + col, {v}, inside)",
                 "fp16": "{out} = ({v}).to(tl.float16)\n    tl.store(out_ptr + row * cols + col, {out}, mask=inside)",
                 "fp32": "{out} = {v}\n    tl.store(out_ptr + row * cols + col, {out}, mask=inside)"}
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def kernel_py(op: Op) -> str:
    v = op.values()
    d = op.d
    functions = sorted({node.func.id for node in ast.walk(ast.parse(op.formula, mode="eval"))
                        if isinstance(node, ast.Call)}) if op.formula else []
    imports = sorted(set(functions) | {"load_bf16" for n in op.inputs if d["inputs"][n] == "bf16"}
                     | ({"store_bf16"} if op.out_dtype == "bf16" else set()) | ({"fold_amax"} if op.amax else set()))
    value = op.formula or op.operands[0]
    store = _TRITON_STORE[op.out_dtype].format(v=value, out=op.out)
    if op.amax and op.out_dtype == "bf16":   # the rounded values the amax folds
        store = f"{op.out} = {store}"
    cells = []
    for c in d["cells"]:
        bounds = ", ".join(f'"{dim}": Span({c[dim][0]}, {c[dim][1]})' for dim in d["dims"])
        cells.append(f'    Cell("{c["id"]}",\n         {json.dumps(c["why"])},\n         {{{bounds}}}),')
    widest = max(d["cells"], key=lambda c: c[op.rows][1] * c[op.cols][1])
    bench_rows, bench_cols = min(widest[op.rows][1], 8192), min(widest[op.cols][1], 4096)
    bench_inputs = [f'"{n}": torch.randn((rows, {"2 * " if n in op.halves else ""}cols), generator=generator, '
                    f'device=device).to({op.dtype(n)})' for n in op.inputs]
    if op.amax:
        bench_inputs.append('"amax": torch.zeros(1, device=device)')
    batch = ""
    if d["batch_invariant"]:
        batch += f"\n    batch_invariant=True,\n    batch_args=({', '.join(json.dumps(n) for n in op.inputs)}{',' if len(op.inputs) == 1 else ''}),"
    if op.amax:
        batch += "\n    in_place=(\"amax\",),\n    properties=(contract.amax_is_max_of_returned_values,),"
    out_bytes = _BYTES[op.out_dtype]
    return KERNEL.substitute(
        v, amax_note=" for the output, exact self-consistency for the in-place ``amax``" if op.amax else "",
        amax_tile=("; each program folds its tile's largest |" + op.out + "| into ``amax`` with one exact integer "
                   "atomic max") if op.amax else "",
        byte_inputs=", ".join(f"``{n}`` ({_BYTES[d['inputs'][n]]} bytes an element)" for n in op.inputs),
        out_bytes=out_bytes, amax_bytes=", read-modify-write ``amax`` (4 bytes)" if op.amax else "",
        kernel_imports=", ".join(imports),
        pointer_params=", ".join(f"{n}_ptr, {n}_row_stride, {n}_col_stride" for n in op.inputs),
        amax_param_doc=" and amax's bits (int32; unused without WRITE_AMAX)" if op.amax else "",
        amax_param=" amax_bits_ptr," if op.amax else "", amax_meta=" WRITE_AMAX: tl.constexpr," if op.amax else "",
        loads="\n".join([f"    {part} = " + _TRITON_LOAD[d["inputs"][n]].format(n=n, col="(col + cols)" if k else "col")
                         for n in op.inputs for k, part in enumerate(op.parts(n))]
                        + ([] if op.formula else [f"    # {TODO}: the contract's arithmetic, in place of {op.operands[0]} below"])),
        halves_note="".join(f"  ``{n}`` holds ``{a}`` and ``{b}`` side by side: a program loads both halves of its "
                            f"columns." for n, (a, b) in op.halves.items()),
        amax_programs=", amax folded across programs" if op.amax else "",
        rows_cols=op.rows_cols, launch_shape=f"*{op.first}.shape" if op.first not in op.halves else op.rows_cols,
        out_elements=f"{op.first}.numel()" + (" // 2" if op.first in op.halves else ""),
        store=store, fold=("    if WRITE_AMAX:\n        fold_amax(amax_bits_ptr, " + op.out + ", inside)\n") if op.amax else "",
        launch_inputs=", ".join(f"{n}, {n}.stride(0), {n}.stride(1)" for n in op.inputs),
        amax_arg=f" {op.out} if amax is None else amax.view(torch.int32)," if op.amax else "",
        amax_flag=" WRITE_AMAX=amax is not None," if op.amax else "",
        cells="\n".join(cells), inputs_tuple=", ".join(op.inputs) + ("," if len(op.inputs) == 1 else ""),
        amax_bytes_code=" + 4 * (amax is not None)" if op.amax else "",
        bench_inputs=",\n                ".join(bench_inputs),
        bench_label=f"{op.d['output'][op.out]} [{bench_rows}, {bench_cols}]" + (", amax" if op.amax else ""),
        bench_rows=bench_rows, bench_cols=bench_cols, batch=batch)


IMPLS = string.Template('''\
"""Implementations of ``$name`` for the battery to judge: one correct alternative, and wrong ones that each
break one thing the contract asks (the suite names the oracle that must catch each).  All plain torch;
``contract.validate`` first unless the refusal is what is broken.  Add the op's own mistakes below the
ones every elementwise op can make."""
from __future__ import annotations

import torch

from references import elementwise
from references.$family import $name as contract
$amax_import

def _fp32($inputs):
    return contract.formula($inputs_float, elementwise.WRITTEN_OUT)


def correct_in_float64($params):
    """Right: the contract's arithmetic in float64, rounded once (within half an ULP of the truth).  Its NaNs
    are made one NaN: torch's float64 paths give a NaN input's result a sign and payload that depend on the
    tensor's size, which batch invariance (bitwise) would rightly tell apart."""
    contract.validate($args)
    $out = contract.formula($inputs_double, elementwise.WRITTEN_OUT).to($out_torch)
    $out = torch.where($out.isnan(), torch.full_like($out, float("nan")), $out)
    return $returned
$amax_wrongs

def strided_rows_read_as_contiguous($params):
    """Wrong: reads ``$first``'s rows as if they were packed back to back (ignores its row stride)."""
    contract.validate($args)
    packed = torch.as_strided($first, $first.shape, ($first.shape[1], 1))
    return contract.$name($packed_args)


def non_finite_as_zero($params):
    """Wrong: NaN and infinities of the result written as 0 (a kernel that masks them "for safety")."""
    contract.validate($args)
    $out = torch.nan_to_num(_fp32($inputs), nan=0.0, posinf=0.0, neginf=0.0).to($out_torch)
    return $returned


def writes_${first}_in_place($params):
    """Wrong: computes into ``$first`` (an input the contract does not let it write) and returns a copy."""
    contract.validate($args)
    $out = contract.$name($args)
    $first_written.copy_($out.to($first.dtype))
    return $out.clone()


def batch_of_one_returns_$first($params):
    """Wrong only for a batch of one row (a decode fast path that skips the op): right for every larger batch,
    so only batch invariance sees it."""
    contract.validate($args)
    if $first.shape[0] == 1:
        return $first_as_out.to($out_torch).clone()
    return contract.$name($args)


def missing_refusal($params):
    """Wrong: no validation; a mismatched input fails inside torch, or is broadcast, instead."""
    $out = _fp32($inputs).to($out_torch)
    return $returned


# -- the op's own mistakes ------------------------------------------------------------------------
''')


def impls_py(op: Op) -> str:
    v = op.values()
    amax_wrongs = ""
    if op.amax:
        amax_wrongs = f'''

def amax_before_rounding({op.params}):
    """Wrong: amax from the fp32 values before their rounding, not from the values returned."""
    contract.validate({op.args})
    y32 = _fp32({", ".join(op.inputs)})
    if amax is not None and y32.numel():
        amax.copy_(torch.maximum(amax, y32.abs().amax().reshape(1)))
    return y32.to({DTYPES[op.out_dtype]})


def amax_ignores_old({op.params}):
    """Wrong: overwrites amax with this call's max |{op.out}| instead of raising the running maximum."""
    contract.validate({op.args})
    {op.out} = _fp32({", ".join(op.inputs)}).to({DTYPES[op.out_dtype]})
    if amax is not None and {op.out}.numel():
        amax.copy_({op.out}.float().abs().amax().reshape(1))
    return {op.out}
'''
    return IMPLS.substitute(
        v, amax_import="from references.amax import raised\n" if op.amax else "",
        inputs=", ".join(op.inputs), inputs_float=", ".join(n + ".float()" for n in op.inputs),
        inputs_double=", ".join(n + ".double()" for n in op.inputs),
        returned=f"raised(amax, {op.out})" if op.amax else op.out,
        first_written=op.first if op.first not in op.halves else f"{op.first}[:, :{op.out}.shape[1]]",
        first_as_out=op.first if op.first not in op.halves else f"{op.first}[:, {op.first}.shape[1] // 2:]",
        amax_wrongs=amax_wrongs, packed_args=", ".join(["packed", *op.inputs[1:], *(["amax"] if op.amax else [])]))


SUITE = string.Template('''\
"""$name (Triton kernel): every cell through the whole battery, and the battery against wrong
implementations of the contract (``${name}_impls.py``)."""
from __future__ import annotations

from ops.$family.$name import ENTRY
from suites.$family import ${name}_impls as impls
from suites.certification import arch_marks
from suites.op_suite import OpSuite

pytestmark = arch_marks(ENTRY.archs)

# (wrong implementation, the cell whose examples reach its bug, the oracle that must catch it)
WRONG = [
$wrong
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_in_float64")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=0)  # corners only: they reach each mistake here
test_battery_accepts_another_correct_implementation = SUITE.accepts_test()
''')


def suite_py(op: Op) -> str:
    cells = op.d["cells"]
    answering = [c for c in cells if c[op.rows][1] > 0] or cells
    first = answering[0]["id"]
    batched = max(cells, key=lambda c: c[op.rows][1])
    wrong = []
    if op.amax:
        wrong += [("amax_before_rounding", first, "stateful"), ("amax_ignores_old", first, "stateful")]
    wrong += [("strided_rows_read_as_contiguous", first, "parity"), ("non_finite_as_zero", first, "parity"),
              (f"writes_{op.first}_in_place", first, "write_guards")]
    if op.d["batch_invariant"] and batched[op.rows][1] > 1:
        wrong.append((f"batch_of_one_returns_{op.first}", batched["id"], "batch_invariance"))
    wrong.append(("missing_refusal", first, "refusals"))
    return SUITE.substitute(op.values(), wrong="\n".join(f"    {row!r}," for row in wrong).replace("'", '"'))


CONTRACT_ONLY = string.Template('''\
"""$family/$name from the contract (docs/contracts/$name.md), in plain PyTorch: nothing here imports
``references/`` or ``ops/``.  ``CONTRACT_ONLY`` registers it with ``suites/test_contract_only.py``."""
from __future__ import annotations

import torch
$functional
from suites.contract_only.checks import $check_imports


def _validate($params):
$checks


${finished}def $name($params):
    _validate($args)
$todo_line$split_lines    $out = ($formula_torch).to($out_torch)
    return $returned
$exp2_alternative

CONTRACT_ONLY = {"$name": {"contract": {"$name": $name}$exp2_entry}}
''')


def contract_only_py(op: Op) -> str:
    first = op.first
    checks = [f'    tensor("{first}", {first}, ({op.dtype(first)},), ndim=2)']
    if first in op.halves:
        checks += [f"    if {first}.shape[1] % 2:",
                   f'        raise ValueError(f"{first}: last dim {{{first}.shape[1]}} is odd, '
                   f'expected {op.input_shape(first)}")']
    for name in op.inputs[1:]:
        checks += [f'    tensor("{name}", {name}, ({op.dtype(name)},))',
                   f'    shape("{name}", {name}, {_expected_shape(op, name, first_shape=f"{first}.shape")})']
    if op.amax:
        checks += ['    if amax is not None:', '        tensor("amax", amax, (torch.float32,))',
                   '        shape("amax", amax, (1,))']
    torch_names = {"sigmoid": "torch.sigmoid", "silu": "F.silu", "exp": "torch.exp"}
    formula = (_rename(op.formula, lambda f: torch_names[f], lambda n: f"{n}.float()") if op.formula
               else f"{op.operands[0]}.float()")
    todo = "" if op.formula else f"    # {TODO}: the contract's arithmetic, in place of {op.operands[0]} below\n"
    finished = ('def _finished(amax, y):\n    """``y``, with ``amax`` raised to ``max(amax, max |y|)`` when given."""\n'
                "    if amax is not None and y.numel():\n"
                "        amax.copy_(torch.maximum(amax, y.float().abs().amax().reshape(1)))\n    return y\n\n\n") if op.amax else ""
    functional = "import torch.nn.functional as F\n" if "F.silu" in formula else ""
    check_imports = "shape, tensor" if op.inputs[1:] or op.amax else "tensor"
    exp2, exp2_entry = _exp2_alternative(op), ""
    if exp2:
        exp2_entry = f',\n{" " * (len(op.name) + 22)}"exp2": {{"{op.name}": {op.name}_exp2}}'

    return CONTRACT_ONLY.substitute(op.values(), checks="\n".join(checks), formula_torch=formula, finished=finished,
                                    check_imports=check_imports, todo_line=todo, split_lines=op.split_lines(),
                                    exp2_alternative=exp2, exp2_entry=exp2_entry,
                                    returned=f"_finished(amax, {op.out})" if op.amax else op.out, functional=functional)


_EXP2 = {  # exp-based functions through exp2, as ex2-based GPU kernels compute them
    "sigmoid": "def _sigmoid_exp2(g):\n    return 1 / (1 + torch.exp2(g * -LOG2E))\n",
    "silu": "def _silu_exp2(g):\n    return g / (1 + torch.exp2(g * -LOG2E))\n",
    "exp": "def _exp_exp2(g):\n    return torch.exp2(g * LOG2E)\n",
}


def _exp2_alternative(op: Op) -> str:
    """A second contract-only implementation for a band op whose formula calls an exp-based function: each
    through exp2 (other fp32 bits than exp's, inside the band: what a GPU kernel built on ``ex2`` returns)."""
    if op.formula is None or op.d["parity"] != "band":
        return ""
    used = sorted({node.func.id for node in ast.walk(ast.parse(op.formula, mode="eval"))
                   if isinstance(node, ast.Call)} & set(_EXP2))
    if not used:
        return ""
    formula = _rename(op.formula, lambda f: f"_{f}_exp2", lambda n: f"{n}.float()")
    helpers = "\n\n".join(_EXP2[f] for f in used)
    return (f"\n\nLOG2E = 1.4426950408889634\n\n\n{helpers}\n\n"
            f"def {op.name}_exp2({op.params}):\n"
            f'    """The alternative: {", ".join(used)} through exp2, as ex2-based GPU kernels compute '
            f'{"it" if len(used) == 1 else "them"}: other fp32 bits\n    than exp\'s, inside the band."""\n'
            f"    _validate({op.args})\n{op.split_lines()}"
            f"    {op.out} = ({formula}).to({DTYPES[op.out_dtype]})\n"
            f"    return {f'_finished(amax, {op.out})' if op.amax else op.out}\n")


# -- the test lists ------------------------------------------------------------------------------
LISTS = {  # list file -> (its arch term, the ids a new op adds to it)
    "l0_cpu.yml": ("cpu", ("test_battery_rejects", "test_battery_accepts_another_correct_implementation")),
    "l0_cpu_cells.yml": ("cpu", ("test_cell",)),
    "l0_h200.yml": ("sm90", (None,)),   # the whole suite file
}


def list_additions(op: Op, lists: pathlib.Path) -> dict[pathlib.Path, str]:
    """Each list file -> its text with a block of the new op's ids appended (the condition copied from the
    file's first block of that arch at stage pre_merge); the file's other lines are kept as they are."""
    suite = f"suites/{op.family}/test_{op.name}.py"
    texts = {}
    for file_name, (arch, tests) in LISTS.items():
        path = lists / file_name
        text = path.read_text()
        [(key, blocks)] = [(k, b) for k, b in yaml.safe_load(text).items() if k != "version"]
        condition = next((b["condition"] for b in blocks
                          if b["condition"].get("terms", {}) == {"stage": "pre_merge", "arch": arch}), None)
        if condition is None:
            _fail(f"{path.relative_to(REPO)}: no pre_merge block of arch {arch} to copy the condition of")
        ids = [suite if test is None else f"{suite}::{test}" for test in tests]
        listed = {test for b in blocks for test in b["tests"]}
        if listed & set(ids):
            _fail(f"{path.relative_to(REPO)} already lists {sorted(listed & set(ids))[0]}")
        block = yaml.safe_dump([{"condition": condition, "tests": ids}], sort_keys=False, default_flow_style=False)
        texts[path] = text.rstrip("\n") + "\n" + block
    return texts


# -- the command ---------------------------------------------------------------------------------
def plan_files(op: Op, root: pathlib.Path = REPO, declaration_text: str | None = None) -> dict[pathlib.Path, str]:
    """Every file the op needs -> its text (new files; list files with their additions); with
    ``declaration_text``, the declaration too, kept beside the contract section as ``docs/contracts/NAME.toml``."""
    family, name = op.family, op.name
    files = {
        root / "docs" / "contracts" / f"{name}.md": contract_md(op),
        root / "references" / family / f"{name}.py": rewrap(reference_py(op)),
        root / "references" / family / f"{name}_strategy.py": rewrap(strategy_py(op)),
        root / "ops" / family / f"{name}.py": rewrap(kernel_py(op)),
        root / "suites" / family / f"test_{name}.py": rewrap(suite_py(op)),
        root / "suites" / family / f"{name}_impls.py": rewrap(impls_py(op)),
    }
    contract_only = root / "suites" / "contract_only" / f"{family}.py"
    files[contract_only if not contract_only.exists() else contract_only.with_name(f"{name}.py")] = \
        rewrap(contract_only_py(op))
    for package in ("references", "ops", "suites"):
        init = root / package / family / "__init__.py"
        if not init.exists():
            files[init] = ""
    files.update(list_additions(op, root / "test_lists"))
    if declaration_text is not None:
        files[root / "docs" / "contracts" / f"{name}.toml"] = declaration_text
    return files


def _exists(family: str, name: str, root: pathlib.Path) -> pathlib.Path | None:
    for path in (root / "ops" / family / f"{name}.py", root / "references" / family / f"{name}.py",
                 root / "docs" / "contracts" / f"{name}.md"):
        if path.exists():
            return path
    for kernel in (root / "ops").glob(f"*/{name}.py"):
        return kernel
    return None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="tools/new-op", description=__doc__.split("\n\n")[0],
                            epilog="Example: tools/new-op activation/fused_sigmoid_mul docs/contracts/fused_sigmoid_mul.toml")
    parser.add_argument("op", nargs="?", help="FAMILY/NAME, both snake_case")
    parser.add_argument("declaration", nargs="?", type=pathlib.Path, help="the op's declaration (TOML)")
    parser.add_argument("--template", action="store_true", help="print a commented declaration and exit")
    parser.add_argument("--dry-run", action="store_true", help="list the files it would write, write nothing")
    args = parser.parse_args(argv)
    if args.template:
        print(TEMPLATE, end="")
        return 0
    if args.op is None or args.declaration is None:
        raise UsageError("give FAMILY/NAME and a declaration file (--template prints one)")
    family, _, name = args.op.partition("/")
    if not (SNAKE.match(family) and SNAKE.match(name)):
        raise UsageError(f"op {args.op!r} is not FAMILY/NAME in snake_case")
    existing = _exists(family, name, REPO)
    if existing is not None:
        raise UsageError(f"{existing.relative_to(REPO)} exists: an op is never overwritten (pick another name)")
    declared = load_declaration(args.declaration)
    kept = REPO / "docs" / "contracts" / f"{name}.toml"
    op = Op(family, name, declared)
    files = plan_files(op, declaration_text=None if args.declaration.resolve() == kept.resolve()
                       else args.declaration.read_text())
    for path, text in files.items():
        if not args.dry_run:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        print(f"{'would write' if args.dry_run else 'wrote'} {path.relative_to(REPO)}")
    if not args.dry_run:
        print(f"next: fill in what says {TODO} (if any), add the op's own wrong implementations, then\n"
              f"  PYTHONPATH=$PWD python -m pytest suites/{family}/test_{name}.py -x -q --hypothesis-profile smoke\n"
              f"  PYTHONPATH=$PWD python -m pytest suites/test_contract_refusals.py suites/test_contract_only.py "
              f"-q -k {name}\n"
              f"  tools/certify-cells --op {name} -n 1 --device cpu        (docs/adding-an-op.md)")
    for call in op.unguarded_calls():
        print(f"note: {call}: its argument is not one input, so no exp-range guard was generated; bound what it "
              f"draws in references/{family}/{name}_strategy.py (docs/adding-an-op.md, 3.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
