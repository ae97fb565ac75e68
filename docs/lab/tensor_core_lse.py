"""How far paged_decode's legitimate orders put lse from the float64 truth, the tensor-core order beside the
fp32 ones, over recipes of the strategy (CPU; no kernel runs): per order, the median and worst lse error in
fp32 ULP of the row scale, and the mean signed error (the tensor core's truncation is biased low).

    PYTHONPATH=. python docs/lab/tensor_core_lse.py [--seeds N] [--head-dim D]
"""
from __future__ import annotations

import argparse
import statistics

import torch

from oracles.band import output_error, row_ulp
from references.attention import paged_decode as contract
from references.attention.paged_decode_strategy import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--head-dim", type=int, default=256)
    args = parser.parse_args()
    orders = ("one_pass", "online_blocks", "split_d_by_16", "split_kv_4", contract.TENSOR_CORE_ORDER)
    worst = {order: [] for order in orders}
    signed = {order: [] for order in orders}
    for seed in range(args.seeds):
        recipe = {"B": 2, "M": 4, "S": 64, "Hkv": 2, "group": 4, "D": args.head_dim, "T": None,
                  "kv_dtype": "bfloat16", "lengths": "full", "holes": False,
                  "values": ("normal", "large_scores")[seed % 2], "layout": "contiguous",
                  "sm_scale": args.head_dim ** -0.5, "kv_scale": 1.0, "seed": 1000 + seed}
        inputs = build(recipe, "cpu")
        arguments = (inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["page_table"], inputs["seq_lens"],
                     inputs["sm_scale"], inputs["kv_scale"], inputs["page_select"])
        _, true_lse = contract.truth(*arguments)
        ulp = row_ulp(true_lse, torch.float32)
        for order in orders:
            _, lse = contract.LEGITIMATE_ORDERS[order](*arguments)
            worst[order].append(output_error(lse, true_lse).error_ulp)
            signed[order].append(((lse.double() - true_lse) / ulp).mean().item())
    print(f"D = {args.head_dim}, {args.seeds} recipes (2 rows of 256 tokens, 8 query heads), lse error in fp32 ULP")
    print("| order | median worst | max worst | mean signed |")
    print("|---|---|---|---|")
    for order in orders:
        print(f"| {order} | {statistics.median(worst[order]):.3g} | {max(worst[order]):.3g} | "
              f"{statistics.mean(signed[order]):+.3g} |")


if __name__ == "__main__":
    main()
