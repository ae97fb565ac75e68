"""Issue 27: does a Hopper tensor core's truncating fp32 accumulation explain ``paged_decode_nvfp4kv``'s lse on sm_90?

On an H100 the ``dense_nvfp4_kv`` cell failed at 100 draws on lse: 2.31 ULP from the float64 truth against a 1-ULP
band (stock 0.307 ULP; docs/results/2026-12-05e/certify_sm90_paged.log), on a recipe the Triton interpreter passes
(0.585 ULP).  The kernel (``_decode_splits_nvfp4``) takes the scores as six chained tensor-core dots of K's three
exact bf16 parts against q's even and odd halves.  This script recomputes, on the CPU, the kernel's lse with the
score dots on the tensor core's arithmetic (``references/tensor_core.py``: block FMAs of 16 products, aligned and
truncated, rounded toward zero) and, beside it, with the scores as fp32 round-to-nearest sums on CUDA cores (the
proposed ``LaunchPlan.scores_on_cuda_cores``), and reports each one's lse error in fp32 ULP of the row scale
against the float64 truth, next to the errors of the contract's legitimate fp32 orders and the band they make.

    PYTHONPATH=. python docs/lab/nvfp4kv_tensor_core_lse.py --seeds 300 --cells 400
    (docs/results/2026-12-05e/nvfp4kv_tensor_core_lse_cpu.log)

The shrunk recipe built on the CPU is not the H100's input: the strategy draws with a generator on the build's
device, and torch's CPU and CUDA generators differ (truth lse 4.02 on the CPU where the H100's was 12.09).  So the
mechanism is judged statistically: the recipe with other seeds, and the cell's corners and draws.

What is emulated, step for step with the kernel:

- K decoded by the Dequant line (``decode_cache``: ``e2m1 * scale`` exact, times ``fp32(1 / g)`` rounded once,
  the kernel's ``(k.to(fp32) * 2^14) * decode_scale``), times ``k_unit`` (the power of two that brings the decode
  scale to [1, 2)), split into three bf16 parts by round-to-nearest-even as ``_split_in_bf16``;
- tensor cores: the six dots chained in the kernel's order (lo even, lo odd, mid even, mid odd, hi even, hi odd),
  each over D/2 elements in k-steps of 16 through ``tensor_core_dot`` with the running accumulator as C;
- CUDA cores: ``q_even . k_even + q_odd . k_odd`` of the fp32 ``K * k_unit``, each half as the sm_90a code takes
  it (``cuda_kernel``: 8 lanes each chaining FMAs over every 8th column, then a butterfly), or for comparison as
  one chain of fp32 FMAs over all D/2 (``cuda_fma``) or a pairwise tree of fp32-rounded products (``cuda_tree``),
  every add round to nearest (an FMA's sum emulated in float64, then rounded: exact but for rare double
  roundings);
- then the kernel's tail: times ``sm_scale / k_unit`` in float64, rounded once to fp32; the softmax in float64
  (``exp(s - m)`` summed, the splits merged by their log-sum-exp: ``m + log(l)``), lse rounded to fp32.
"""
from __future__ import annotations

import argparse
import json

import torch

from oracles.band import FLOOR_ULP, LEGITIMATE_FACTOR, output_error, row_ulp
from oracles.draws import cell_draws
from ops.catalog import entries
from references.attention import paged_decode_nvfp4kv as contract
from references.attention import paged_decode_nvfp4kv_strategy as strategy
from references.tensor_core import tensor_core_dot

SHRUNK = {"B": 2, "D": 64, "Hkv": 1, "M": 1, "S": 16, "T": None, "block_scales": "zero_and_subnormal",
          "codes": "midpoints", "global_scale": "amax", "group": 1, "holes": False, "kv_dtype": "nvfp4",
          "kv_scale": 1.0, "layout": "contiguous", "lengths": "mixed", "seed": 0, "sm_scale": 0.125,
          "values": "normal"}
KINDS = ("tensor_core", "cuda_kernel", "cuda_fma", "cuda_tree")
LANES = 8   # lanes of a warp across a half tile's columns in the sm_90a layout (threadsPerWarp [4, 8])


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


def split_in_bf16(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_split_in_bf16`` of an fp32 ``k`` already times ``k_unit``: three bf16 parts (as fp32), largest first."""
    hi = _bf16(k)
    rest = k - hi
    mid = _bf16(rest)
    return hi, mid, _bf16(rest - mid)


def fp32_fma_chain(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``sum_j q_j k_j`` over the last axis as a chain of fp32 FMAs in order (each rounded once to nearest)."""
    q, k = q.double(), k.double()
    acc = torch.zeros(torch.broadcast_shapes(q.shape[:-1], k.shape[:-1]), dtype=torch.float64)
    for j in range(q.shape[-1]):
        acc = (acc + q[..., j] * k[..., j]).to(torch.float32).double()
    return acc.float()


def fp32_tree(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``sum_j q_j k_j``: products rounded to fp32, then added pairwise (a tl.sum's shuffle tree), fp32."""
    terms = (q.double() * k.double()).float()
    while terms.shape[-1] > 1:
        terms = terms[..., 0::2] + terms[..., 1::2]
    return terms[..., 0]


def fp32_lanes(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``sum_j q_j k_j`` as ``tl.sum(q * k, axis=1)`` compiles for sm_90a (``docs/lab/nvfp4kv_sass.py``: 1 FMUL +
    7 FFMA a chain): lane l of ``LANES`` chains FMAs over columns l, l + LANES, ..., then a butterfly over the
    lanes (``shfl.bfly`` 4, 2, 1: lane l adds lane l ^ 4's sum first), every add fp32 round to nearest."""
    chains = torch.stack([fp32_fma_chain(q[..., lane::LANES], k[..., lane::LANES]) for lane in range(LANES)], -1)
    width = LANES
    while width > 1:
        width //= 2
        chains = chains[..., :width] + chains[..., width:2 * width]
    return chains[..., 0]


def kernel_lse(call: dict, kind: str) -> torch.Tensor:
    """The kernel's lse (fp32 ``[B, Hq]``) with the scores of ``kind``."""
    q, table, seq_lens = call["q"], call["page_table"], call["seq_lens"]
    keys = contract.decode_cache(call["k_packed"], call["k_scales"], call["kv_global_scale"])   # [P, S, Hkv, D]
    batch, query_heads, head_dim = q.shape
    _, page_size, kv_heads, _ = keys.shape
    group = query_heads // kv_heads
    decode_scale = (1.0 / call["kv_global_scale"].double()).float()           # div_rn in fp32
    exponent = int(((decode_scale.view(torch.int32) >> 23) & 0xFF).item())
    unit_exponent = max(127 - exponent, -126)
    k_unit, sm_scale = 2.0 ** unit_exponent, contract.dense_contract.scale_value(call["sm_scale"])
    lse = torch.full((batch, query_heads), float("-inf"), dtype=torch.float32)
    for b in range(batch):
        tokens = [t for t in range(min(int(seq_lens[b]), table.shape[1] * page_size))
                  if 0 <= int(table[b, t // page_size]) < keys.shape[0]]
        if not tokens or query_heads == 0:
            continue
        pages = torch.tensor([int(table[b, t // page_size]) for t in tokens])
        slots = torch.tensor([t % page_size for t in tokens])
        for h in range(query_heads):
            k = keys[pages, slots, h // group] * k_unit                     # [n, D] fp32, exact
            q_row = q[b, h].float()
            halves = (q_row[0::2], k[:, 0::2]), (q_row[1::2], k[:, 1::2])
            if kind == "tensor_core":
                (q_even, k_even), (q_odd, k_odd) = halves
                parts_even, parts_odd = split_in_bf16(k_even), split_in_bf16(k_odd)
                dots = None
                for part in (2, 1, 0):                                       # lo, mid, hi; even before odd
                    dots = tensor_core_dot(q_even, parts_even[part], torch.bfloat16, dots)
                    dots = tensor_core_dot(q_odd, parts_odd[part], torch.bfloat16, dots)
            else:
                half_sum = {"cuda_kernel": fp32_lanes, "cuda_fma": fp32_fma_chain, "cuda_tree": fp32_tree}[kind]
                dots = half_sum(*halves[0]) + half_sum(*halves[1])
            scores = (dots.double() * (sm_scale / k_unit)).float().double()
            top = scores.max()
            lse[b, h] = (top + torch.log(torch.exp(scores - top).sum())).float()
    return lse


def judge(recipe: dict) -> dict:
    """lse errors (ULP) of the emulated kernels, the stock op and the legitimate orders; the band they make."""
    entry = entries()["paged_decode_nvfp4kv"]
    call = strategy.build(recipe, "cpu")
    arguments = {name: value for name, value in call.items()}
    _, true_lse = contract.truth(**arguments)
    lses = {kind: kernel_lse(call, kind) for kind in KINDS}
    errors = {kind: output_error(lse, true_lse).error_ulp for kind, lse in lses.items()}
    finite_rows = true_lse.isfinite()
    ulp = row_ulp(true_lse, torch.float32)
    signed = {kind: ((lse.double() - true_lse) / ulp)[finite_rows].tolist() for kind, lse in lses.items()}
    _, stock_lse = entry.stock(**arguments)
    orders = contract.paged_decode_nvfp4kv_in_orders(**arguments)
    legitimate = {"stock": output_error(stock_lse, true_lse).error_ulp}
    legitimate.update({name: output_error(lse, true_lse).error_ulp for name, (_, lse) in orders.items()})
    finite = [e for e in legitimate.values() if e == e and e != float("inf")]
    band = max(LEGITIMATE_FACTOR * max(finite, default=0.0), FLOOR_ULP)
    return {"errors": errors, "legitimate": legitimate, "band": band, "signed": signed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=0, metavar="N",
                        help="also the dense cell's corners and its first N draws (certify-cells' seed 0)")
    parser.add_argument("--recipe", help="a recipe as JSON (default: issue 27's shrunk recipe)")
    parser.add_argument("--seeds", type=int, default=0, metavar="N",
                        help="also the shrunk recipe with seeds 1..N (its CPU build is not the H100's input: "
                             "torch's CPU and CUDA generators differ)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shrunk = json.loads(args.recipe) if args.recipe else SHRUNK
    result = judge(shrunk)
    print("The shrunk recipe:", json.dumps(shrunk, sort_keys=True))
    print(f"band {result['band']:.3g} ULP (max(2 x E, 1)); lse error vs float64 truth, fp32 ULP of the row scale:")
    for kind, error in result["errors"].items():
        print(f"  kernel, scores {kind:12s} {error:.3g}")
    for name, error in sorted(result["legitimate"].items(), key=lambda item: -item[1]):
        print(f"  legitimate {name:22s} {error:.3g}")
    if args.seeds:
        _table([{**shrunk, "seed": seed} for seed in range(1, args.seeds + 1)],
               f"the shrunk recipe, seeds 1..{args.seeds}")
    if args.cells:
        cell = next(c for c in entries()["paged_decode_nvfp4kv"].cells if c.id == "dense_nvfp4_kv")
        recipes = strategy.corners(cell, "cpu") + cell_draws(strategy, cell, "cpu", args.cells, 0)
        _table(recipes, f"dense_nvfp4_kv, corners + {args.cells} draws")


def _table(recipes: list[dict], title: str) -> None:
    """One row a recipe: the band, the worst legitimate error and the emulated kernels' errors (ULP)."""
    print(f"\n{title}: {len(recipes)} recipes")
    print("| recipe | band | E (worst legitimate) | " + " | ".join(KINDS) + " |")
    print("|---|---:|---:|" + "---:|" * len(KINDS))
    outside = {kind: 0 for kind in KINDS}
    worst_ratio = {kind: 0.0 for kind in KINDS}
    signed = {kind: [] for kind in KINDS}
    for i, recipe in enumerate(recipes):
        result = judge(recipe)
        worst = max(result["legitimate"].values())
        for kind in KINDS:
            outside[kind] += result["errors"][kind] > result["band"]
            worst_ratio[kind] = max(worst_ratio[kind], result["errors"][kind] / result["band"])
            signed[kind] += result["signed"][kind]
        print(f"| {i} | {result['band']:.3g} | {worst:.3g} | " +
              " | ".join(f"{result['errors'][kind]:.3g}" for kind in KINDS) + " |", flush=True)
    print("recipes outside the band: " + ", ".join(f"{kind} {count}" for kind, count in outside.items()))
    print("worst error / band: " + ", ".join(f"{kind} {ratio:.3g}" for kind, ratio in worst_ratio.items()))
    print("mean signed lse error over the rows (ULP; truncation toward zero is biased low): " +
          ", ".join(f"{kind} {sum(v) / max(1, len(v)):+.3g} ({len(v)} rows)" for kind, v in signed.items()))

if __name__ == "__main__":
    main()
