"""What the judge's own side of a paged_decode example costs (issue 26), on the CPU: per recipe drawn from
the paged cells' strategies, the seconds and the torch ops (each a kernel launch on a GPU) of the float64
truth, the reference's legitimate orders (as the judge computes them: together, ``oracles.legitimate_orders.legitimate_outputs``),
the stock op and the band computation.

    PYTHONPATH=. python docs/lab/paged_judge_cost.py [--draws N] [--caps cpu|cuda] [--max-elements E] [--op OP]

``--caps cuda`` draws with the GPU's bounds (rows up to 256, long tables, 16 KV heads), each recipe's table
(and selection) cut so its caches hold at most ``--max-elements`` elements, built on the CPU: the shapes a
GPU certification judges, scaled down in context only.  Prints a table of the parts (seconds, ops, each
per example).
"""
from __future__ import annotations

import argparse
import collections
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from oracles.band import check_band
from oracles.draws import cell_draws
from oracles.legitimate_orders import legitimate_outputs
from oracles.tensors import as_outputs, clone_inputs
from ops.attention import paged_decode as dense_op
from ops.attention import paged_decode_nvfp4kv as nvfp4_op

ENTRIES = {entry.name: entry for entry in (dense_op.ENTRY, nvfp4_op.ENTRY)}


class OpCount(TorchDispatchMode):
    """Counts the aten ops run under it: on a GPU each is a launch (or a host-side op) of a few microseconds."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def timed(totals: dict, part: str, call):
    """``call()``, its seconds and then its ops added to ``part`` (counted on a second call: counting slows
    every op down)."""
    start = time.perf_counter()
    result = call()
    totals[part][0] += time.perf_counter() - start
    counter = OpCount()
    with counter:
        call()
    totals[part][1] += counter.ops
    return result


def judge_side(entry, kwargs, totals: dict) -> None:
    """The parts of one example's parity oracle that are the judge's own (the kernel's call left out)."""
    truth = timed(totals, "truth", lambda: as_outputs(entry.truth(**clone_inputs(kwargs))))
    stock = timed(totals, "stock", lambda: as_outputs(entry.stock(**clone_inputs(kwargs))))
    orders = timed(totals, "orders (all)", lambda: legitimate_outputs(entry.legitimate_orders, kwargs, ()))
    # the stock op's output stands for the kernel's: the band's cost does not depend on which it judges
    timed(totals, "band", lambda: check_band(stock, stock, truth, "vs float64 truth", orders=orders,
                                             limit=entry.band_limit))


def scaled_down(recipe: dict, max_elements: int) -> dict:
    """``recipe`` with its table (and selection) cut to caches of at most ``max_elements`` elements."""
    per_page = recipe["B"] * recipe["S"] * recipe["Hkv"] * recipe["D"]
    pages = min(recipe["M"], max(1, max_elements // per_page))
    return {**recipe, "M": pages, "T": None if recipe["T"] is None else min(recipe["T"], 2 * pages + 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=10, help="draws per cell (besides the CPU corners)")
    parser.add_argument("--caps", choices=("cpu", "cuda"), default="cpu", help="whose bounds the draws take")
    parser.add_argument("--max-elements", type=int, default=2**20, help="--caps cuda: the largest cache kept")
    parser.add_argument("--op", choices=sorted(ENTRIES), action="append", help="default: both")
    args = parser.parse_args()
    torch.set_num_threads(1)   # one certification worker's share of a machine
    totals = collections.defaultdict(lambda: [0.0, 0])
    examples = 0
    for name in args.op or sorted(ENTRIES):
        entry = ENTRIES[name]
        strategy = entry.strategy_module
        for cell in entry.cells:
            if args.caps == "cpu":
                recipes = strategy.corners(cell, "cpu") + cell_draws(strategy, cell, "cpu", args.draws, 0)
            else:
                recipes = [scaled_down(r, args.max_elements) for r in cell_draws(strategy, cell, "cuda", args.draws, 0)]
            for recipe in recipes:
                judge_side(entry, strategy.build(recipe, "cpu"), totals)
                examples += 1
    parts = {part: totals[part] for part in ("truth", "stock", "band", "orders (all)")}
    whole = [sum(v[0] for v in parts.values()), sum(v[1] for v in parts.values())]
    print(f"{examples} examples ({args.caps} caps), one thread")
    print("| part | seconds | ops | ms an example | ops an example |")
    print("|---|---|---|---|---|")
    for part, (seconds, ops) in {**parts, "judge side (all)": whole}.items():
        print(f"| {part} | {seconds:.2f} | {ops} | {1e3 * seconds / examples:.1f} | {ops / examples:.0f} |")


if __name__ == "__main__":
    main()
