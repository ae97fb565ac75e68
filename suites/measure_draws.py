"""How many Hypothesis draws per cell catch every wrong implementation the suites keep.

``python -m suites.measure_draws [--op NAME ...] [--depths 2,4,6,10,20,50] [--seconds-per-impl S]``

For each wrong implementation a suite expects rejected (its test module's ``WRONG`` table, names in
``suites/<family>/<op>_impls.py``), on each cell of its op (the row's cell first), on the CPU: the refusal table, then the
cell's corners, then the cell's Hypothesis draws (the seed ``tools/certify-cells`` uses) one by one,
judged by every applicable oracle, until one fails.  An implementation's *catch depth* is the fewest
draws at which some cell rejects it (0: the refusal table or a corner does).  The draws of a run with
N examples are the first N of this sequence, so the table says which depths catch which
implementations.  Each implementation gets at most ``--seconds-per-impl`` (the CPU is shared): one it
cannot finish is reported with the draws it got through.  Prints a markdown table (docs/draws.md).
"""
from __future__ import annotations

import argparse
import importlib
import time

import hypothesis
import torch
from hypothesis import HealthCheck

DEFAULT_DEPTHS = (2, 4, 6, 10, 20, 50)


class _Caught(Exception):
    pass


class _OutOfTime(Exception):
    pass


def catch_depth(entry, impl, cell, max_depth: int, deadline: float) -> tuple[int | None, str, int]:
    """(draws needed or None, the oracle that caught it, draws tried) on one cell."""
    from oracles.battery import NUMERICS, Battery

    device = torch.device("cpu")
    battery = Battery(entry, impl, device, entry.strategy_module, graph_parity_skipped="not asked of this implementation", cell=cell)
    asked = [o for o in NUMERICS if o not in battery.not_applicable()]
    rows, findings = battery.check_refusals()
    if findings:
        return 0, "refusals", 0
    for corner in battery.strategy.corners(cell, device):
        found = battery.judge(corner, asked)
        if found:
            return 0, next(iter(found)), 0
    tried = 0
    if max_depth < 1:
        return None, "", 0

    @hypothesis.settings(max_examples=max_depth, deadline=None, database=None, phases=[hypothesis.Phase.generate],
                         suppress_health_check=list(HealthCheck), print_blob=False,
                         verbosity=hypothesis.Verbosity.quiet)
    @hypothesis.seed(cell.seed(0))
    @hypothesis.given(battery.strategy.recipes(cell, device))
    def explore(recipe):
        nonlocal tried
        if time.monotonic() > deadline:
            raise _OutOfTime
        tried += 1
        found = battery.judge(recipe, asked)
        if found:
            raise _Caught(next(iter(found)))

    try:
        explore()
    except _Caught as caught:
        return tried, str(caught), tried
    except _OutOfTime:
        return None, "", tried
    return None, "", tried


def wrong_implementations(op_names, only):
    """(entry, implementation name, module spec, the cell its row names or None) for every row of every
    suite's WRONG table (``only``: these implementation names, if any)."""
    from ops.catalog import entries

    for name, entry in entries().items():
        if op_names and name not in op_names:
            continue
        try:
            importlib.import_module(f"suites.{entry.family}.{name}_impls")
            tests = importlib.import_module(f"suites.{entry.family}.test_{name}")
        except ImportError:
            continue
        for row in getattr(tests, "WRONG", []):
            if not only or row[0] in only:
                named = row[1] if len(row) == 3 else None
                yield entry, row[0], f"suites.{entry.family}.{name}_impls:{row[0]}", named


def main(argv=None) -> int:
    import ops  # noqa: F401 - chooses the Triton interpreter before Triton loads

    from tools.engine.worker import load_implementation

    parser = argparse.ArgumentParser(prog="python -m suites.measure_draws", description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", default=[], help="only this op (repeatable)")
    parser.add_argument("--depths", default=",".join(map(str, DEFAULT_DEPTHS)))
    parser.add_argument("--seconds-per-impl", type=float, default=120.0)
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="only this wrong implementation (repeatable)")
    args = parser.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    print(f"| op | wrong implementation | catch depth | caught by | " + " | ".join(f"{d} draws" for d in depths) + " |")
    print("|---|---|---|---|" + "---|" * len(depths), flush=True)
    for entry, name, spec, named in wrong_implementations(args.op, args.only):
        impl = load_implementation(spec, [entry])[entry.name]
        deadline = time.monotonic() + args.seconds_per_impl
        best, oracle, tried = None, "", {}
        # the cell the suite's row names first: the time limit should not run out on the others
        for cell in sorted(entry.cells, key=lambda cell: cell.id != named):
            limit = max(depths) if best is None else best - 1  # only a smaller depth elsewhere changes the answer
            depth, caught_by, tried[cell.id] = catch_depth(entry, impl, cell, limit, deadline)
            if depth is not None and (best is None or depth < best):
                best, oracle = depth, f"{caught_by} on {cell.id}"
            if best == 0 or time.monotonic() > deadline:
                break
        finished = time.monotonic() <= deadline
        shown = str(best) if best is not None else (f"> {max(depths)}" if finished else
                                                    f"? (time limit; draws tried {tried})")
        marks = ["caught" if best is not None and best <= d else ("missed" if finished else "?") for d in depths]
        print(f"| {entry.name} | {name} | {shown} | {oracle} | " + " | ".join(marks) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
