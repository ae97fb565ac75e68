"""nvfp4_gemv at M = 1: the default plan against the same plan with K split in 2, 3 and 4 (issue 27).

ncu on the H100 (docs/ops/nvfp4_gemv.md, 2026-12-06c) found M = 1 latency-bound: 512 programs of 2 warps, 0.48 of
a wave, 1.9 warps a scheduler. Splitting K multiplies the programs without more instructions a weight (more warps a
program did not help: 16 rows x 4 warps was slower). ``gemv_plan`` never splits when the row tiles outnumber the
SMs, so the split plans are built here, from the default one, without touching the kernel module (its code is in
the certificate's digest). Each plan is timed graph-replayed (``tools/bench.median_us``) beside the copy bandwidth,
and its output compared with the default's (a split sums K in another order: within the band, not bitwise).
Run on the GPU from the repository root: ``PYTHONPATH=. python3 docs/lab/nvfp4_gemv_split_m1.py``.
"""
import dataclasses

import torch
import triton

from ops.gemm import nvfp4_gemv as module
from tools.bench import copy_bandwidth_gbps, median_us

N = K = 8192


def split(plan, splits: int):
    chunk = triton.cdiv(triton.cdiv(K, splits), plan.block_k) * plan.block_k
    return dataclasses.replace(plan, splits=triton.cdiv(K, chunk), chunk=chunk)


def main() -> None:
    device = torch.device("cuda")
    inputs = module.ENTRY.bench[0].make(device)   # M = 1 N = K = 8192
    x, packed, scales, global_scale = inputs["x"], inputs["packed"], inputs["block_scales"], inputs["global_scale"]
    assert x.shape == (1, K) and packed.shape[0] == N
    copy = copy_bandwidth_gbps(device)
    moved = module.bytes_moved(**inputs)
    default = module.default_plan(x, packed)
    expected = module.run_plan(x, packed, scales, global_scale, default).float()
    print(f"{torch.cuda.get_device_name()}, copy {copy:.0f} GB/s; {moved / 1e6:.1f} MB a call; default {default}")
    for splits in (1, 2, 3, 4):
        plan = default if splits == 1 else split(default, splits)
        out = module.run_plan(x, packed, scales, global_scale, plan).float()
        us, how = median_us(lambda plan=plan: module.run_plan(x, packed, scales, global_scale, plan))
        differ = (out - expected).abs().max().item()
        print(f"splits {plan.splits} (chunk {plan.chunk}): {us:.2f} us {how}, {moved / us / 1e3:.0f} GB/s, "
              f"{moved / us / 1e3 / copy:.1%} of copy; largest difference from the default {differ:.3g}")


if __name__ == "__main__":
    main()
