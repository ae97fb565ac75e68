"""How many Hypothesis draws per cell catch every wrong implementation the suites keep.

``python -m suites.measure_draws [--device cpu|cuda] [--op NAME ...] [--seeds 0,1,2] [--depths 2,4,6,10,20,50]
[--seconds-per-impl S] [--seconds S]``

For each wrong implementation a suite expects rejected (its test module's ``WRONG`` table), on each cell
of its op (the row's cell first), on ``--device``: the refusal table, then the cell's corners, then the
cell's Hypothesis draws one by one, judged by every applicable oracle, until one fails.  It runs as
certification runs it: in an implementation host (``tools/engine/impl_executor.py``), one per
implementation, the next one starting while the last is judged.  Graph parity is not asked (as in the
suites: most controls are eager torch that no graph captures, which would say nothing about draws).
An implementation's *catch depth* on a seed is the fewest draws at which some cell rejects it (0: the
refusal table or a corner does, whatever the seed); its row shows the worst of ``--seeds`` (seed 0 is
the one ``tools/certify-cells`` uses).  The draws of a run with N examples are the first N of this sequence, so
the table says which depths catch which implementations.  Each implementation gets at most
``--seconds-per-impl`` over all its seeds, the whole run ``--seconds``: what either cuts short is
reported with the draws it got through.  Prints a markdown table (docs/draws.md); its last two columns give each
finished seed's depth and, for a catch some draws miss, the draws a cell at which a miss has a 1% chance
(:func:`rare_catch_depth`).
"""
from __future__ import annotations

import argparse
import importlib
import math
import time

import hypothesis
import torch

from oracles.draws import over_cell_draws

DEFAULT_DEPTHS = (2, 4, 6, 10, 20, 50)
NOT_ASKED = "not asked of the suites' controls (eager torch, mostly not capturable)"


class _Caught(Exception):
    pass


class _OutOfTime(Exception):
    pass


def catch_depth(entry, impl, cell, max_depth: int, deadline: float, device: torch.device, seed: int = 0,
                watch=None) -> tuple[int | None, str, int]:
    """(draws needed or None, the oracle that caught it, draws tried) on one cell, drawing with ``seed``."""
    from oracles.battery import NUMERICS, Battery

    battery = Battery(entry, impl, device, entry.strategy_module, watch, graph_parity_skipped=NOT_ASKED, cell=cell)
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

    @over_cell_draws(battery.strategy, cell, device, max_depth, seed, print_blob=False,
                     verbosity=hypothesis.Verbosity.quiet)
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


def wrong_implementations(op_names, only, device: torch.device):
    """(entry, implementation name, its ``--impl`` spec, the cell its row names or None) for every row of
    every suite's WRONG table, and on a GPU of its GPU suite's ``WRONG_ON_GPU`` (``test_<op>_on_gpu.py``: wrong
    by the GPU's own arithmetic only) (``only``: these implementation names, if any).  The spec is the one the
    suite judges (its ``SUITE``'s implementation label: the gdn ops keep theirs in ``gdn_impls.py``), else
    ``suites/<family>/<op>_impls.py``'s function of that name."""
    from ops.catalog import entries

    for name, entry in entries().items():
        if op_names and name not in op_names:
            continue
        try:
            tests = importlib.import_module(f"suites.{entry.family}.test_{name}")
        except ImportError:
            continue
        suite = getattr(tests, "SUITE", None)
        rows = list(getattr(tests, "WRONG", []))
        if device.type == "cuda":
            try:
                rows += importlib.import_module(f"suites.{entry.family}.test_{name}_on_gpu").WRONG_ON_GPU
            except (ImportError, AttributeError):
                pass
        for row in rows:
            if not only or row[0] in only:
                named = row[1] if len(row) >= 3 else None
                spec = suite.judge(row[0]).label if suite is not None and suite.judge is not None else \
                    f"suites.{entry.family}.{name}_impls:{row[0]}"
                yield entry, row[0], spec, named


def measure(entry, impl, named, depths, seeds, deadline, device, watch) -> tuple[int | None, str, dict, bool, dict]:
    """(worst catch depth over ``seeds`` or None, what caught it there, draws tried by seed and cell, whether
    every seed finished in time, each finished seed's catch depth or None).  A seed that misses makes the worst
    a miss, but the later seeds still run: :func:`rare_catch_depth` estimates from every seed, and stopping at
    the first miss would leave it the seeds before it only."""
    worst, worst_by, tried, by_seed, missed = None, "", {}, {}, False
    for seed in seeds:
        best, oracle = None, ""
        # the cell the suite's row names first: the time limit should not run out on the others
        for cell in sorted(entry.cells, key=lambda cell: cell.id != named):
            limit = max(depths) if best is None else best - 1  # only a smaller depth elsewhere changes the answer
            depth, caught_by, tried[seed, cell.id] = catch_depth(entry, impl, cell, limit, deadline, device, seed,
                                                                 watch)
            if depth is not None and (best is None or depth < best):
                best, oracle = depth, f"{caught_by} on {cell.id}"
            if best == 0 or time.monotonic() > deadline:
                break
        if time.monotonic() > deadline:
            return None, "", tried, False, by_seed
        by_seed[seed] = best
        if best is None:
            missed = True
            continue
        if worst is None or best > worst:
            worst, worst_by = best, oracle + (f" (seed {seed})" if len(seeds) > 1 and best else "")
        if best == 0:
            break   # the refusal table and the corners do not depend on the seed
    if missed:
        return None, "", tried, True, by_seed
    return worst, worst_by, tried, True, by_seed


MISS = 0.01   # the chance of a miss at which a rare catch's depth is read (rare_catch_depth)


def rare_catch_depth(by_seed: dict, max_depth: int, miss: float = MISS) -> int | None:
    """The draws a cell at which a wrong implementation caught on some draws only is missed with chance at most
    ``miss``, taking each draw as an independent chance p of a catch, p estimated from the finished seeds
    (``by_seed``: the catch depth, or None where ``max_depth`` draws missed): the geometric law's maximum
    likelihood, catches over draws tried (a catch at draw d tried d, a miss ``max_depth``).  0 where every seed
    caught it at depth 0 (the refusal table or a corner: no chance in it); None where no seed caught it."""
    caught = [depth for depth in by_seed.values() if depth is not None]
    if not caught:
        return None
    if not any(caught):
        return 0
    tried = sum(caught) + max_depth * (len(by_seed) - len(caught))
    chance = len(caught) / tried
    if chance >= 1:
        return 1
    return math.ceil(math.log(miss) / math.log1p(-chance))


def rare_column(by_seed: dict, max_depth: int) -> str:
    depth = rare_catch_depth(by_seed, max_depth)
    return "" if depth is None or len(by_seed) < 2 else str(depth)


def seed_column(by_seed: dict) -> str:
    """Each finished seed's catch depth ("seed: depth", "missed" where every depth missed): a rare catch's spread,
    which the worst alone does not show."""
    return ", ".join(f"{seed}: {'missed' if depth is None else depth}" for seed, depth in by_seed.items())


def main(argv=None) -> int:
    import ops  # noqa: F401 - chooses the Triton interpreter before Triton loads

    from tools.engine.impl_executor import ImplementationHost
    from tools.engine.worker import hosted_implementation

    parser = argparse.ArgumentParser(prog="python -m suites.measure_draws", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--op", action="append", default=[], help="only this op (repeatable)")
    parser.add_argument("--depths", default=",".join(map(str, DEFAULT_DEPTHS)))
    parser.add_argument("--seeds", default="0", help="comma-separated draw seeds; the row shows the worst")
    parser.add_argument("--seconds-per-impl", type=float, default=120.0)
    parser.add_argument("--seconds", type=float, default=None, help="the whole run's limit (default: none)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="only this wrong implementation (repeatable)")
    args = parser.parse_args(argv)
    try:
        depths = [int(d) for d in args.depths.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--depths {args.depths!r} / --seeds {args.seeds!r}: comma-separated integers")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    device = torch.device(args.device)
    run_deadline = None if args.seconds is None else time.monotonic() + args.seconds
    print(f"| op | wrong implementation | catch depth | caught by | " + " | ".join(f"{d} draws" for d in depths)
          + f" | each seed | draws for a {MISS:.0%} miss |")
    print("|---|---|---|---|" + "---|" * (len(depths) + 2), flush=True)
    spare = ImplementationHost(args.device, call_limit_s=args.seconds_per_impl)
    try:
        for entry, name, spec, named in wrong_implementations(args.op, args.only, device):
            if run_deadline is not None and time.monotonic() > run_deadline:
                print(f"| {entry.name} | {name} | ? (the run's time limit) | | " + " | ".join("?" for _ in depths)
                      + " | | |", flush=True)
                continue
            # the next host starts (an interpreter, torch) while this implementation is judged
            host, spare = spare, ImplementationHost(args.device, call_limit_s=args.seconds_per_impl)
            try:
                impl = hosted_implementation(spec, entry.name, entry.backend, host)
                deadline = time.monotonic() + args.seconds_per_impl
                if run_deadline is not None:
                    deadline = min(deadline, run_deadline)
                best, oracle, tried, finished, by_seed = measure(entry, impl, named, depths, seeds, deadline, device,
                                                                 host.watch)
            finally:
                host.close()
            shown = str(best) if best is not None else (f"> {max(depths)}" if finished else
                                                        f"? (time limit; draws tried {tried})")
            marks = ["caught" if best is not None and best <= d else ("missed" if finished else "?") for d in depths]
            print(f"| {entry.name} | {name} | {shown} | {oracle} | " + " | ".join(marks)
                  + f" | {seed_column(by_seed)} | {rare_column(by_seed, max(depths))} |", flush=True)
    finally:
        spare.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
