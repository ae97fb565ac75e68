"""How many Triton compiles a certification costs on a cold GPU, and which arguments make them (issue 26).

Triton compiles a kernel once per *specialisation key*: each constexpr's value, each integer argument's
class (1, divisible by 16, other; off with ``do_not_specialize``), each pointer's 16-byte alignment (off
with ``do_not_specialize_on_alignment``), dtypes, and the launch options (warps, stages).  Draws of varied
sizes, strides and offsets multiply the keys: on a fresh H100, six ops at 100 draws a cell ran at 4.1
examples a second, 10.4 with Triton's cache warm (docs/results/2026-12-05).

For each Triton op of the catalog (CuTe DSL kernels are left out) and each of its cells, this draws the
examples certification draws on a GPU — the cell's corners, then ``--max-examples`` Hypothesis draws
from the cell's seed (``oracles/draws.py``), with the GPU's size caps — builds their inputs on the CPU,
and makes the calls the battery makes on each (``oracles/battery.py``), through the oracles' own code:

- parity and determinism: two calls on copies of the inputs (same layout);
- batch invariance (where declared): rows 0, B/2 and B-1 alone, and the batch rotated by one;
- write guards: two calls under poisoned allocations, in-place arguments moved into margined buffers;
- stateful properties (where declared): the contract's property, which calls the op and its siblings.

Not made: graph parity (its replays and the eager call between them have the parity call's shapes and
layouts: no new key), the refusal table (refused before any launch), the host's warm-up calls (copies of a
judged call), and the ``suites.legal_layouts`` runs (a test, not certification).

Nothing runs: ``JITFunction.run`` is replaced by a recorder that computes the key a launch would have on
sm90 with Triton's own code — the binder Triton builds for the kernel (``create_function_from_signature``
with the CUDA backend of ``GPUTarget("cuda", 90, 32)``) and ``compute_cache_key`` — and returns without
launching.  The kernels' host code plans as on an H100 or H200 (132 SMs; not interpreting).  Outputs are
therefore unwritten, so the oracles' comparisons are meaningless and their findings are ignored; the
launches they made before comparing are what is counted.  For each argument whose specialisation differs
between keys, the keys left if Triton did not specialise it are counted with Triton's own binder for the
kernel with every argument unspecialised (its entry for that argument put in place of the real one).

    python3 docs/lab/compile_keys.py [--op OP]... [--max-examples N] [--examples OP=N]... [--out FILE]

Writes ``--out`` (default docs/results/compile_keys_cpu.md), the command that made it at its top.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import pathlib
import shlex
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ["TRITON_INTERPRET"] = "0"   # the kernels as JITFunctions and their host code's GPU plans

import torch  # noqa: E402 - after TRITON_INTERPRET is chosen
import triton.runtime.jit as jit  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import make_backend  # noqa: E402

from ops import catalog  # noqa: E402
from oracles.battery import Implementation  # noqa: E402
from oracles.draws import cell_draws  # noqa: E402
from tools.compile_ahead import battery_calls  # noqa: E402 - the battery's calls, as tools/compile-ahead makes them
# the kernels' launch plans for an H200's (and an H100 SXM's) 132 SMs, as the certification met them
from tools.compile_receipts import planning_for_h200  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)
GPU = torch.device("cuda")   # the device the recipes are drawn for (sizes); inputs are built on the CPU
CPU = torch.device("cpu")
OUT = REPO / "docs" / "results" / "compile_keys_cpu.md"
PARITY = "parity"   # the label of the parity and determinism calls; the others are the battery's extras


@dataclasses.dataclass
class Kernel:
    """One kernel's binders on sm90: as declared, and with nothing specialised; and what it launched."""
    name: str
    arg_names: list[str]
    constexpr: list[bool]
    binder: object
    unspecialised_binder: object
    key_cache: dict = dataclasses.field(default_factory=dict)   # compute_cache_key's memo
    # key -> (specialisation, unspecialised specialisation, options); (cell, label) -> launches, keys
    keys: dict = dataclasses.field(default_factory=dict)
    launches: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    keys_by: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(set))


class LaunchRecorder:
    """Stands in for ``JITFunction.run``: records each launch's sm90 key, launches nothing."""

    def __init__(self):
        self.backend = make_backend(SM90)
        self.kernels: dict[str, Kernel] = {}
        self.cell = self.label = ""

    def kernel(self, function: jit.JITFunction) -> Kernel:
        name = f"{function.fn.__module__}.{function.fn.__name__}"
        if name not in self.kernels:
            params = [p.name for p in function.params if not p.is_constexpr]
            bare = jit.JITFunction(function.fn, do_not_specialize=params, do_not_specialize_on_alignment=params)
            self.kernels[name] = Kernel(
                name, function.arg_names, [p.is_constexpr for p in function.params],
                jit.create_function_from_signature(function.signature, function.params, self.backend),
                jit.create_function_from_signature(bare.signature, bare.params, self.backend))
        return self.kernels[name]

    def run(self, function: jit.JITFunction, *args, grid, warmup, **kwargs):
        # what JITFunction.run adds to the options before binding (Triton 3.6)
        kwargs["debug"] = kwargs.get("debug", function.debug) or knobs.runtime.debug
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        kernel = self.kernel(function)
        _, specialisation, options = kernel.binder(*args, **kwargs)
        _, unspecialised, _ = kernel.unspecialised_binder(*args, **kwargs)
        key = jit.compute_cache_key(kernel.key_cache, specialisation, options)
        kernel.keys.setdefault(key, (tuple(specialisation), tuple(unspecialised), options_text(options)))
        kernel.launches[self.cell, self.label] += 1
        kernel.keys_by[self.cell, self.label].add(key)
        return None


def options_text(options: dict) -> str:
    return ",".join(f"{name}={value}" for name, value in sorted(options.items())
                    if name not in ("debug", "instrumentation_mode"))


def record_op(op: str, examples: int, seed: int, recorder: LaunchRecorder) -> list[dict]:
    """Every cell of ``op``'s Triton kernel: its examples' battery calls recorded; a row per cell."""
    entry = next(e for e in catalog.kernels(op) if e.backend == "triton")
    impl = Implementation.of_kernels(entry, catalog.kernels)
    strategy = entry.strategy_module
    rows = []
    for cell in entry.cells:
        started = time.monotonic()
        corners = strategy.corners(cell, GPU)
        recipes = corners + cell_draws(strategy, cell, GPU, examples, seed)
        recorder.cell = f"{op}/{cell.id}"
        for number, recipe in enumerate(recipes):
            battery_calls(entry, impl, strategy.build(recipe, CPU), lambda name: setattr(recorder, "label", name))
            print(f"compile_keys: {recorder.cell}: {number + 1}/{len(recipes)} examples", file=sys.stderr, end="\r")
        seconds = time.monotonic() - started
        print(f"compile_keys: {recorder.cell}: {len(recipes)} examples in {seconds:.0f} s", file=sys.stderr)
        rows.append({"op": op, "cell": cell.id, "corners": len(corners), "drawn": len(recipes) - len(corners),
                     "seconds": seconds})
    return rows


def tally(kernels: dict[str, Kernel], cells: set[str]) -> tuple[int, dict[str, set], set]:
    """Over ``cells``: launches, each kernel's keys, and each kernel's keys parity's calls reach."""
    launches, keys, parity_keys = 0, collections.defaultdict(set), collections.defaultdict(set)
    for name, kernel in kernels.items():
        for (cell, label), count in kernel.launches.items():
            if cell in cells:
                launches += count
                keys[name] |= kernel.keys_by[cell, label]
                if label == PARITY:
                    parity_keys[name] |= kernel.keys_by[cell, label]
    return launches, keys, parity_keys


def plans(kernel: Kernel, keys: set) -> int:
    """The keys left with no argument specialised: constexprs, dtypes and options alone (launch plans)."""
    return len({(unspecialised, options) for _, unspecialised, options in map(kernel.keys.get, keys)})


def varying_arguments(kernel: Kernel, keys: set) -> list[tuple[str, str, str, str]]:
    """For each argument (and the options) whose specialisation differs between ``keys``: its name, the
    specialisations seen with their key counts, and — for an argument Triton specialises — the keys left
    with it alone unspecialised, and with it and the rows above it unspecialised (taken greedily, the one
    that leaves the fewest keys first; the last row leaves the plans).  A constexpr or an option is a plan
    choice ("plan"); an argument whose keys differ by dtype alone, "dtype"."""
    found = [kernel.keys[key] for key in keys]

    def left(unspecialised: set[int]) -> int:
        return len({(tuple(bare[i] if i in unspecialised else entry for i, entry in enumerate(spec)), options)
                    for spec, bare, options in found})

    seen = {index: collections.Counter(spec[index] for spec, _, _ in found) for index in range(len(kernel.arg_names))}
    varying = [index for index, counts in seen.items() if len(counts) > 1]
    # an argument whose keys differ by dtype alone has nothing to unspecialise
    specialised = [index for index in varying if not kernel.constexpr[index]
                   and len({entry[1:] for entry in seen[index]}) > 1]
    greedy, remaining = [], list(specialised)
    while remaining:   # at a tie (arguments that vary together), the one of most specialisations first
        best = min(remaining, key=lambda index: (left({*greedy, index}), -len(seen[index]), kernel.arg_names[index]))
        greedy.append(best)
        remaining.remove(best)
    rows = []
    for index in greedy + [i for i in varying if i not in greedy]:
        words = ", ".join(f"{describe(entry, kernel.constexpr[index])}: {n}" for entry, n in seen[index].most_common())
        if index in greedy:
            rows.append((kernel.arg_names[index], words, str(left({index})), str(left(set(greedy[:greedy.index(index) + 1])))))
        else:
            rows.append((kernel.arg_names[index], words, "plan" if kernel.constexpr[index] else "dtype", ""))
    options = collections.Counter(options for _, _, options in found)
    if len(options) > 1:
        rows.append(("(options)", ", ".join(f"{o}: {n}" for o, n in options.most_common()), "plan", ""))
    return rows


def describe(entry: tuple, constexpr: bool) -> str:
    """A specialisation entry in words: ``*bf16 16-aligned``, ``i32 %16``, ``i32 =1``, ``128``."""
    kind, value = entry
    if constexpr:
        return str(value)
    if kind == "constexpr":   # Triton's specialisation of an integer argument equal to 1
        return "=1"
    if kind.startswith("*"):
        return f"{kind} {'16-aligned' if value == 'D' else 'unaligned'}"
    return {"D": f"{kind} %16", "": f"{kind} other", None: kind}.get(value, f"{kind} {value}")


def report(rows: list[dict], recorder: LaunchRecorder, command: str, examples: dict[str, int]) -> str:
    kernels = recorder.kernels
    lines = [
        "# Triton specialisations a certification compiles on a cold sm90 GPU (computed on the CPU)", "",
        f"Made by `{command}` (Triton {triton_version()}, torch {torch.__version__}); "
        f"{sum(r['seconds'] for r in rows):.0f} s (wall, one process; *s* per cell below).", "",
        "Each example drawn as certification draws it on a GPU (corners, then the cell's Hypothesis draws, "
        "seed 0), with the battery's calls on it: parity and determinism, batch invariance, write guards, "
        "stateful properties (`docs/lab/compile_keys.py` says what is left out and why). A key is one compile "
        "on a cold GPU (Triton's cache key on sm90: constexprs, integer and alignment specialisation, dtypes, "
        "options). *plans*: the keys left if no argument were specialised (one compile per launch plan). "
        "*parity only*: the keys the parity call alone reaches; the rest come from the battery's extra calls "
        "(single rows, poisoned buffers, sibling calls).", "",
        "## Per cell", "",
        "| op | cell | examples (corners + drawn) | launches | keys | parity only | plans | s |",
        "|---|---|---|---|---|---|---|---|"]
    by_op = collections.defaultdict(list)
    for row in rows:
        by_op[row["op"]].append(row)
        cell = f"{row['op']}/{row['cell']}"
        launches, keys, parity_keys = tally(kernels, {cell})
        lines.append(f"| {row['op']} | {row['cell']} | {row['corners'] + row['drawn']} ({row['corners']} + "
                     f"{row['drawn']}) | {launches} | {sum(map(len, keys.values()))} | "
                     f"{sum(map(len, parity_keys.values()))} | "
                     f"{sum(plans(kernels[n], k) for n, k in keys.items())} | {row['seconds']:.0f} |")
    lines += ["", "## Per op (every cell: what one cold machine compiles for it)", "",
              "| op | draws a cell | examples | launches | keys | parity only | plans | keys per 100 examples |",
              "|---|---|---|---|---|---|---|---|"]
    everything = set()
    for op, op_rows in by_op.items():
        cells = {f"{op}/{r['cell']}" for r in op_rows}
        launches, keys, parity_keys = tally(kernels, cells)
        total = sum(map(len, keys.values()))
        count = sum(r["corners"] + r["drawn"] for r in op_rows)
        everything |= {(n, k) for n, ks in keys.items() for k in ks}
        lines.append(f"| {op} | {examples[op]} | {count} | {launches} | {total} | "
                     f"{sum(map(len, parity_keys.values()))} | {sum(plans(kernels[n], k) for n, k in keys.items())} | "
                     f"{100 * total / max(count, 1):.0f} |")
    lines += ["", f"Over the whole run: {len(everything)} distinct keys of {len(kernels)} kernels "
                  f"(a kernel two ops share counts once).", "",
              "## Per kernel: the arguments whose specialisation differs between keys", "",
              "*alone*: the keys left with that argument alone in `do_not_specialize` (integers) or "
              "`do_not_specialize_on_alignment` (pointers), by Triton's own binder; *with those above*: the "
              "keys left with it and every argument in the rows above it unspecialised (taken greedily, most "
              "keys removed first; the last such row leaves the plans). *dtype*: the argument's keys differ by "
              "dtype alone. A constexpr or an option is a plan choice; an integer `=1` is Triton's "
              "specialisation of the value 1 (a constant in the compiled code); `%16`: divisible by 16.", "",
              "| kernel | keys | plans | argument | specialisations seen (keys) | alone | with those above |",
              "|---|---|---|---|---|---|---|"]
    for name, kernel in sorted(kernels.items()):
        keys = set(kernel.keys)
        first = True
        for argument, seen, alone, cumulative in varying_arguments(kernel, keys):
            head = f"| `{name.removeprefix('ops.')}` | {len(keys)} | {plans(kernel, keys)} |" if first else "| | | |"
            lines.append(f"{head} `{argument}` | {seen} | {alone} | {cumulative} |")
            first = False
        if first:
            lines.append(f"| `{name.removeprefix('ops.')}` | {len(keys)} | {plans(kernel, keys)} | (none) | | | |")
    return "\n".join(lines) + "\n"


def triton_version() -> str:
    import triton
    return triton.__version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", action="append", help="only this op (repeatable; default: every Triton op)")
    parser.add_argument("--max-examples", type=int, default=100, help="drawn examples a cell, after its corners")
    parser.add_argument("--examples", action="append", default=[], metavar="OP=N",
                        help="another number of drawn examples for one op (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="the run's salt, as certify-cells --seed")
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    triton_ops = [name for name in catalog.entries() if any(e.backend == "triton" for e in catalog.kernels(name))]
    chosen = args.op or triton_ops
    unknown = sorted(set(chosen) - set(triton_ops))
    if unknown:
        parser.error(f"no Triton kernel for {', '.join(unknown)}; Triton ops: {', '.join(triton_ops)}")
    examples = {op: args.max_examples for op in chosen}
    for pair in args.examples:
        op, _, number = pair.partition("=")
        if op not in examples or not number.isdigit():
            parser.error(f"--examples {pair!r}: expected OP=N for an op of this run")
        examples[op] = int(number)
    recorder = LaunchRecorder()
    jit.JITFunction.run = lambda self, *a, **k: recorder.run(self, *a, **k)
    rows = []
    with planning_for_h200():
        for op in chosen:
            rows += record_op(op, examples[op], args.seed, recorder)
    command = "python3 docs/lab/compile_keys.py " + " ".join(map(shlex.quote, argv if argv is not None else sys.argv[1:]))
    args.out.write_text(report(rows, recorder, command.strip(), examples))
    print(f"compile_keys: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
