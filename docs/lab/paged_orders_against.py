"""The paged references' truth and legitimate orders now against those of an earlier revision (issue 26: the
orders computed together): per recipe of the paged cells' strategies (the device's corners and draws, and on the
CPU GPU-shaped draws cut to small caches too), how many outputs are bit for bit the same, the largest difference
(o in bf16 ULPs, lse in fp32 ULPs, each of its row's largest |value|), how far the band each revision sets moved,
and what the orders cost an example each way (seconds, the device synchronized).  Recipes go round the cells, corners
first, until an op's ``--seconds`` are spent.

    PYTHONPATH=. python docs/lab/paged_orders_against.py REVISION [--device cpu|cuda] [--draws N] [--cuda-draws N]
        [--seconds S]

REVISION is a git revision, or a folder holding the two reference files at their paths (a machine without the
repository's history: ``git archive REVISION references/attention | tar x -C FOLDER`` here, carried there).
"""
from __future__ import annotations

import argparse
import collections
import math
import importlib.util
import itertools
import pathlib
import subprocess
import sys
import tempfile
import time

import torch

from oracles.band import band_reports
from oracles.draws import cell_draws
from oracles.legitimate_orders import legitimate_outputs
from oracles.tensors import as_outputs, clone_inputs
from ops.attention import paged_decode as dense_op
from ops.attention import paged_decode_nvfp4kv as nvfp4_op

MODULES = {"paged_decode": "references/attention/paged_decode.py",
           "paged_decode_nvfp4kv": "references/attention/paged_decode_nvfp4kv.py"}


def earlier_contracts(revision: str, folder: pathlib.Path) -> dict:
    """The two reference modules as they were at ``revision`` (or in that folder), imported under other names (the
    NVFP4-KV one on the earlier dense one)."""
    modules = {}
    for op, path in MODULES.items():
        if pathlib.Path(revision).is_dir():
            source = (pathlib.Path(revision) / path).read_text()
        else:
            source = subprocess.run(["git", "show", f"{revision}:{path}"], check=True, capture_output=True,
                                    text=True).stdout
        source = source.replace("from references.attention import paged_decode as dense_contract",
                                "import earlier_paged_decode as dense_contract")
        (folder / f"earlier_{op}.py").write_text(source)
    sys.path.insert(0, str(folder))
    for op in MODULES:
        spec = importlib.util.spec_from_file_location(f"earlier_{op}", folder / f"earlier_{op}.py")
        modules[op] = importlib.util.module_from_spec(spec)
        sys.modules[f"earlier_{op}"] = modules[op]
        spec.loader.exec_module(modules[op])
    return modules


def ulps(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| in ULPs of a's dtype at each row's largest finite |b| (0 where both agree, NaN included)."""
    same = (a == b) | (a.isnan() & b.isnan())
    if bool(same.all()):
        return 0.0
    scale = torch.where(b.isfinite(), b.abs(), 0).amax(dim=-1, keepdim=True).double().clamp(min=1e-30)
    spacing = torch.finfo(a.dtype).eps * 2.0 ** torch.floor(torch.log2(scale))
    diff = torch.where(same, 0.0, (a.double() - b.double()).abs() / spacing)
    return float(diff.nan_to_num(nan=float("inf")).max())


def timed(call, device: str):
    """``call()`` and its seconds, the device's work included."""
    start = time.perf_counter()
    result = call()
    if device == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def round_robin(lists: list[list]) -> list:
    """The lists' items taken one from each in turn: a cut list still covers every cell."""
    return [item for row in itertools.zip_longest(*lists) for item in row if item is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision")
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--cuda-draws", type=int, default=5, help="on the CPU: GPU-shaped draws a cell, cut small")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seconds", type=float, default=math.inf, help="an op's budget: no new recipe past it")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        earlier = earlier_contracts(args.revision, pathlib.Path(folder))
        for entry in (dense_op.ENTRY, nvfp4_op.ENTRY):
            old = earlier[entry.name]
            same, total, worst = collections.Counter(), collections.Counter(), collections.defaultdict(float)
            band_moves, examples, seconds = [], 0, collections.Counter()
            strategy = entry.strategy_module
            per_cell = []
            for cell in entry.cells:
                recipes = strategy.corners(cell, args.device) + cell_draws(strategy, cell, args.device, args.draws, 0)
                if args.device == "cpu":
                    recipes += [{**r, "M": min(r["M"], 64), "B": min(r["B"], 16),
                                 "T": None if r["T"] is None else min(r["T"], 131)}
                                for r in cell_draws(strategy, cell, "cuda", args.cuda_draws, 0)]
                per_cell.append(recipes)
            started = time.monotonic()
            for recipe in round_robin(per_cell):
                if time.monotonic() - started > args.seconds:
                    break
                kwargs = strategy.build(recipe, args.device)
                new_orders, spent = timed(lambda: legitimate_outputs(entry.legitimate_orders, kwargs, ()),
                                          args.device)
                seconds["together"] += spent
                old_orders, spent = timed(lambda: {name: as_outputs(order(**clone_inputs(kwargs)))
                                                   for name, order in old.LEGITIMATE_ORDERS.items()}, args.device)
                seconds["one at a time"] += spent
                pairs = {**{f"{name}": (new_orders[name], old_orders[name]) for name in old_orders},
                         "truth": (as_outputs(entry.truth(**clone_inputs(kwargs))),
                                   as_outputs(old.truth(**clone_inputs(kwargs))))}
                for name, (new, before) in pairs.items():
                    for position, (a, b) in enumerate(zip(new, before)):
                        key = ("truth" if name == "truth" else "orders", ("o", "lse")[position])
                        total[key] += 1
                        difference = ulps(a, b)
                        same[key] += difference == 0.0
                        worst[key] = max(worst[key], difference)
                stock = as_outputs(entry.stock(**clone_inputs(kwargs)))
                new_band = band_reports(stock, stock, pairs["truth"][0], new_orders, entry.band_limit)
                old_band = band_reports(stock, stock, pairs["truth"][1], old_orders, entry.band_limit)
                band_moves += [abs(n.allowed_error_ulp - o.allowed_error_ulp) for n, o in zip(new_band, old_band)]
                examples += 1
            print(f"{entry.name}: {examples} recipes against {args.revision}; the orders an example: together "
                  f"{1e3 * seconds['together'] / max(examples, 1):.1f} ms, one at a time (before) "
                  f"{1e3 * seconds['one at a time'] / max(examples, 1):.1f} ms")
            for key in sorted(total):
                print(f"  {key[0]} {key[1]}: {same[key]} of {total[key]} bit for bit, largest difference "
                      f"{worst[key]:.3g} ULP")
            print(f"  band: largest move {max(band_moves):.3g} ULP, {sum(m == 0 for m in band_moves)} of "
                  f"{len(band_moves)} unchanged")


if __name__ == "__main__":
    main()
