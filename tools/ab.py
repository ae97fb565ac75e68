"""tools/ab: is my change bitwise identical to the kernel at REV, on every drawn input?

``tools/ab --op OP --baseline REV`` runs the op's kernel as it was at git revision REV and as it is in
the working tree on the same inputs — each cell's corners and the battery's Hypothesis draws for it
(``--max-examples``, ``--seed``) — and says, per cell, "bitwise identical on N inputs", or on how many
inputs and elements the outputs differ and by how many ULP, with the first differing input's recipe
(``tools/engine/ab.py``).  ``--backend`` picks one kernel of an op of several (default: each);
``--cell`` narrows the cells.  ``tools/gate --bitwise-ab`` runs it for every kernel a change touches.

Exit status: 0 bitwise identical everywhere; 1 a difference (or one side raised where the other did not);
2 a usage error (unknown op, cell or revision; a kernel absent at REV), in one line.
"""
from __future__ import annotations

import json
import sys

from tools.cli import ArgumentParser, UsageError

DEFAULT_MAX_EXAMPLES = {"cpu": 6, "cuda": 100}


def parse_args(argv):
    parser = ArgumentParser(prog="tools/ab", description="Bitwise A/B: an op's kernel at git revision REV "
                            "against the working tree's, on the same drawn inputs.")
    parser.add_argument("--op", required=True, metavar="NAME", help="the op whose kernel is compared")
    parser.add_argument("--baseline", required=True, metavar="REV", help="the git revision to compare with")
    parser.add_argument("--backend", metavar="NAME", help="only this kernel of the op (default: each)")
    parser.add_argument("--cell", action="append", default=[], metavar="ID", help="only this cell (repeatable)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both run (default cpu)")
    parser.add_argument("--max-examples", type=int, metavar="N",
                        help=f"Hypothesis draws per cell besides its corners (default {DEFAULT_MAX_EXAMPLES})")
    parser.add_argument("--seed", type=int, default=0, help="salt for the per-cell seeds, as certify-cells")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    args = parser.parse_args(argv)
    if args.max_examples is not None and args.max_examples < 0:
        raise UsageError(f"--max-examples: {args.max_examples} is negative")
    return args


def kernels_compared(op_name: str, backend: str | None, cells: list[str]):
    from ops import catalog

    try:
        found = catalog.kernels(op_name)
    except KeyError:
        raise UsageError(f"--op: no op named {op_name}; ops: {', '.join(catalog.entries())}") from None
    chosen = [entry for entry in found if backend in (None, entry.backend)]
    if not chosen:
        raise UsageError(f"--backend: {op_name} has no {backend} kernel; kernels: "
                         f"{', '.join(entry.backend for entry in found)}")
    known = {cell.id for cell in chosen[0].cells}
    unknown = [cell for cell in cells if cell not in known]
    if unknown:
        raise UsageError(f"--cell: {op_name} has no cell {', '.join(unknown)}; cells: {', '.join(sorted(known))}")
    return chosen


def run(op_name: str, baseline: str, *, backend=None, cells=(), device="cpu", max_examples=None, seed=0,
        quiet=False) -> dict:
    """The comparison as a JSON-able dict (``verdict``: "bitwise" or "differs"); tools/gate calls it too."""
    import torch

    from ops.catalog import kernel_label
    from tools.engine import ab

    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device on this machine")
    commit = ab.resolve(baseline)
    examples = DEFAULT_MAX_EXAMPLES[device] if max_examples is None else max_examples
    found = {"baseline": baseline, "commit": commit, "device": device, "max_examples": examples, "kernels": {}}
    for entry in kernels_compared(op_name, backend, list(cells)):
        if device == "cpu" and entry.backend != "triton":
            found["kernels"][kernel_label(entry)] = {"skipped": f"{entry.backend} kernels do not run on the CPU"}
            continue
        progress = (lambda line: print(f"\r  {line}\033[K", end="", file=sys.stderr, flush=True)) \
            if sys.stderr.isatty() and not quiet else None
        results = ab.compare(entry, commit, device, list(cells), examples, seed, progress)
        if progress:
            print("\r\033[K", end="", file=sys.stderr)
        found["kernels"][kernel_label(entry)] = {"cells": [vars(result) | {"bitwise": result.bitwise}
                                                           for result in results]}
    compared = [cell for kernel in found["kernels"].values() for cell in kernel.get("cells", [])]
    found["verdict"] = "bitwise" if all(cell["bitwise"] for cell in compared) else "differs"
    return found


def lines(found: dict) -> list[str]:
    shown = [f"ab: {name} at {found['baseline']} ({found['commit'][:12]}) against the working tree, on "
             f"{found['device']}" for name in found["kernels"]]
    for name, kernel in found["kernels"].items():
        if "skipped" in kernel:
            shown.append(f"  {name}: skipped: {kernel['skipped']}")
            continue
        for cell in kernel["cells"]:
            if cell["bitwise"]:
                shown.append(f"  {name}/{cell['cell']}: bitwise identical on {cell['inputs']} inputs")
                continue
            shown.append(f"  {name}/{cell['cell']}: DIFFERS on {cell['differing_inputs']} of {cell['inputs']} "
                         f"inputs, at most {cell['max_ulp']:g} ULP")
            if cell["first"]:
                shown += [f"    {text}" for text in cell["first"]["differences"]]
                shown.append(f"    first differing input: {cell['first']['recipe']}")
            for error in cell["errors"][:3]:
                shown.append(f"    raised on one side only: {error}")
    shown.append("ab: BITWISE IDENTICAL" if found["verdict"] == "bitwise" else "ab: NOT BITWISE IDENTICAL")
    return shown


def main(argv=None) -> int:
    args = parse_args(argv)
    found = run(args.op, args.baseline, backend=args.backend, cells=args.cell, device=args.device,
                max_examples=args.max_examples, seed=args.seed, quiet=args.json)
    print(json.dumps(found, indent=2, default=str) if args.json else "\n".join(lines(found)))
    return 0 if found["verdict"] == "bitwise" else 1


if __name__ == "__main__":
    from tools.cli import run_tool

    run_tool(main)
