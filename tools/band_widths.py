"""tools/band-widths: per band cell, the band each example gets under the old rule (twice the stock op's
error) and the new one (twice the largest error of the legitimate implementations: the stock op and the
reference in each of its reduction orders), as a markdown table.

For every band op's cell, the cell's corners and its first ``--examples`` drawn recipes (the draws
``tools/certify-cells --seed`` judges: ``oracles.draws``) are built on ``--device``; per floating output,
the widths' median, p99 and max in ULP are tabulated before and after, with which legitimate
implementation set E how often and how many examples the new rule finds vacuous (beyond the op's
limit), and on how many the stock op could not run (an SDPA backend without a kernel for the shape, say):
certification then takes E from the reference's orders alone (``oracles.battery.run_stock_on_copy``), and so
does this table, which has no old band for them.  The kernel is not run: a band is a property of the contract
and the input.  Exit 1 when any example's band is vacuous.
"""
from __future__ import annotations

import collections
import math
import pathlib
import time

from tools.cli import ArgumentParser, UsageError

# torch, Hypothesis, the catalog and the oracles are imported by the functions that use them, after the
# flags are read: --help and a bad flag do without them.


def entries() -> dict:
    """The catalog's ops (``ops.catalog.entries``)."""
    from ops.catalog import entries as catalog_entries
    return catalog_entries()


def parse_args(argv):
    parser = ArgumentParser(prog="tools/band-widths", description="Band widths per band cell, old rule and new.",
                            epilog="Example: tools/band-widths --device cpu --examples 20 --out docs/band-widths.md")
    parser.add_argument("--device", default="cpu", help="where inputs are built and judged (default cpu)")
    parser.add_argument("--examples", type=int, default=20, metavar="N", help="drawn recipes per cell (default 20)")
    parser.add_argument("--seed", type=int, default=0,
                        help="salt for the per-cell seeds, as certify-cells' (default 0)")
    parser.add_argument("--op", action="append", default=[], metavar="NAME", help="only this op (repeatable)")
    parser.add_argument("--cell", action="append", default=[], metavar="ID", help="only this cell (repeatable)")
    parser.add_argument("--out", metavar="PATH", help="write the table here (default: print it)")
    args = parser.parse_args(argv)
    import torch

    from ops.catalog import Parity

    if args.examples < 0:
        raise UsageError(f"--examples {args.examples}: expected a count >= 0")
    band_ops = {name: entry for name, entry in entries().items() if entry.parity is Parity.BAND}
    unknown = sorted(set(args.op) - set(band_ops))
    if unknown:
        raise UsageError(f"--op {unknown[0]}: not a band op; band ops: {sorted(band_ops)}")
    args.entries = [band_ops[name] for name in (args.op or sorted(band_ops))]
    try:
        args.device = torch.device(args.device)
    except RuntimeError as error:
        raise UsageError(f"--device {args.device!r}: {error}") from None
    return args


def widths_of(entry, recipe: dict, device) -> list[tuple[float | None, float, str | None, bool]]:
    """Per judged output: (old band, new band, which implementation set E, vacuous). Where the stock op cannot
    take the input (certification's rule: E from the reference's orders alone) the old band is None."""
    from oracles.band import FLOOR_ULP, LEGITIMATE_FACTOR, band_reports
    from oracles.band_limit import DEFAULT_LIMIT
    from oracles.battery import run_stock_on_copy
    from oracles.determinism import run_on_copy
    from oracles.legitimate_orders import legitimate_outputs
    from oracles.tensors import as_outputs, clone_inputs

    kwargs = entry.strategy_module.build(recipe, device)
    in_place = tuple(name for name in entry.in_place if kwargs[name] is not None)
    stock = run_stock_on_copy(entry.stock, kwargs, in_place)
    orders = legitimate_outputs(entry.legitimate_orders, kwargs, in_place)
    truth = as_outputs(entry.truth(**clone_inputs(kwargs)))
    reports = band_reports(run_on_copy(entry.reference, kwargs, in_place), stock, truth, orders,
                           entry.band_limit or DEFAULT_LIMIT)
    old = [None if stock is None else FLOOR_ULP if not math.isfinite(r.stock_error_ulp)
           else max(LEGITIMATE_FACTOR * r.stock_error_ulp, FLOOR_ULP) for r in reports]
    return [(before, r.allowed_error_ulp, r.band_set_by, r.vacuous) for before, r in zip(old, reports)]


def _quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]  # noqa: E731
    return " / ".join(f"{v:.3g}" for v in (pick(0.5), pick(0.99), ordered[-1]))


def table(rows: list[dict], device) -> str:
    lines = [f"Band widths on `{device.type}` (ULP of the output dtype at the row scale; median / p99 / max "
             "over the corners and drawn examples). Before: max(2 x stock, 1). After: max(2 x E, 1), E the "
             "largest error of the legitimate implementations.", "",
             "| op | cell | output | examples | before | after | E set by | vacuous | stock op could not | seconds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        set_by = ", ".join(f"{name} {count}" for name, count in row["set_by"].most_common())
        lines.append(f"| {row['op']} | {row['cell']} | {row['output']} | {row['examples']} | {_quantiles(row['before'])} "
                     f"| {_quantiles(row['after'])} | {set_by} | {row['vacuous']} | {row['no_stock']} | {row['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    from oracles.draws import cell_draws

    rows = []
    for entry in args.entries:
        for cell in entry.cells:
            if args.cell and cell.id not in args.cell:
                continue
            started = time.monotonic()
            recipes = entry.strategy_module.corners(cell, args.device)
            recipes += cell_draws(entry.strategy_module, cell, args.device, args.examples, args.seed)
            per_output = collections.defaultdict(lambda: {"before": [], "after": [], "set_by": collections.Counter(),
                                                          "vacuous": 0, "no_stock": 0})
            for recipe in recipes:
                for position, (before, after, set_by, vacuous) in enumerate(widths_of(entry, recipe, args.device)):
                    row = per_output[position]
                    if before is None:   # the stock op cannot take this input: no old band to show
                        row["no_stock"] += 1
                    else:
                        row["before"].append(before)
                    row["after"].append(after)
                    row["set_by"][set_by or "floor"] += 1
                    row["vacuous"] += vacuous
            seconds = time.monotonic() - started
            for position, row in sorted(per_output.items()):
                rows.append({"op": entry.name, "cell": cell.id, "output": position, "examples": len(row["after"]),
                             "seconds": seconds, **row})
                print(f"{entry.name}/{cell.id} output {position}: after {_quantiles(row['after'])}, "
                      f"vacuous {row['vacuous']}", flush=True)
    text = table(rows, args.device)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    else:
        print(text)
    return 1 if any(row["vacuous"] for row in rows) else 0
