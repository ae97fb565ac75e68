"""Issue 27: launch plans of ``_decode_splits`` for the e4m3 bench case compiled for sm_90a on a machine with no
GPU: registers, spills, shared memory, the blocks an SM holds, and the SASS of the main loop's hot path.

The e4m3 bench case (B=64 L=8192 Hq=32 Hkv=8 D=128, pages of 64) specialises the kernel as the host wrapper
launches it from caches of two pages (``docs/lab/nvfp4kv_sass.py``'s recording, ``tools/compile_receipts``'
stand-in driver).  Blocks an SM (sm_90, as CUDA's occupancy calculator counts them): registers are allocated
per warp in units of 256 within each of the 4 sub-partitions' 16384 (so 97..128 registers all give 16 warps
an SM, 89..96 give 20, 73..80 24, 65..72 28), shared memory per block plus 1 KB reserved within 228 KB,
at most 64 warps and 32 blocks.  The hot path is the main loop less its widest skipped region (the lazy
rescale, skipped while the rows' max stays); per 64 tokens scales a 32-token tile's count by 2.

    python3 docs/lab/e4m3_occupancy_static.py [--only LABEL ...] [--opcodes]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "docs" / "lab"))

from nvfp4kv_sass import main_loop, opcode  # noqa: E402 - sets the environment (prepare_environment) first

import torch  # noqa: E402
import triton.runtime.jit as jit  # noqa: E402

from ops.attention import paged_decode as kernel  # noqa: E402
from tools.compile_receipts import Launch, compile_launch  # noqa: E402

HEAD_DIM, PAGE_SIZE, KV_HEADS, GROUP = 128, 64, 8, 4
REGISTERS_PER_SUB_PARTITION, SUB_PARTITIONS, REGISTER_UNIT = 16384, 4, 256
SHARED_PER_SM, SHARED_RESERVED_PER_BLOCK = 228 * 1024, 1024
MAX_WARPS, MAX_BLOCKS = 64, 32


def candidates() -> dict[str, kernel.LaunchPlan]:
    """The plans studied, by label: the default and launch-only changes of it (the default's numerics)."""
    default = kernel.launch_plan(HEAD_DIM, torch.float8_e4m3fn)
    replace = dataclasses.replace
    plans = {"default (3 stages, cap 128)": default,
             "2 stages": replace(default, num_stages=2)}
    for stages in (2, 3):
        for cap in (112, 104, 96, 88, 80, 72):
            plans[f"{stages} stages, cap {cap}"] = replace(default, num_stages=stages, max_registers=cap)
    for stages in (2, 3):
        plans[f"block 32, {stages} stages"] = replace(default, block_n=32, num_stages=stages)
        for cap in (96, 80, 72, 64):
            plans[f"block 32, {stages} stages, cap {cap}"] = replace(default, block_n=32, num_stages=stages,
                                                                     max_registers=cap)
    for stages in (2, 3):
        plans[f"8 warps, {stages} stages, no cap"] = replace(default, num_warps=8, num_stages=stages,
                                                             max_registers=None)
        for cap in (64, 56, 48):
            plans[f"8 warps, {stages} stages, cap {cap}"] = replace(default, num_warps=8, num_stages=stages,
                                                                    max_registers=cap)
    plans["8 warps, block 32, 2 stages, cap 64"] = replace(default, num_warps=8, block_n=32, num_stages=2,
                                                           max_registers=64)
    return plans


def decode_launch(plan: kernel.LaunchPlan) -> Launch:
    """``plan``'s ``_decode_splits`` launch for the e4m3 bench case, recorded, not run."""
    q = torch.zeros(1, KV_HEADS * GROUP, HEAD_DIM, dtype=torch.bfloat16)
    cache = torch.zeros(2, PAGE_SIZE, KV_HEADS, HEAD_DIM).to(torch.float8_e4m3fn)
    launches, run = [], jit.JITFunction.run
    jit.JITFunction.run = lambda self, *args, grid, warmup, **kwargs: launches.append(Launch(self, args, kwargs, ""))
    try:
        kernel.run_plan(plan, q, cache, cache.clone(), torch.arange(2, dtype=torch.int32).view(1, 2),
                        torch.tensor([2 * PAGE_SIZE], dtype=torch.int32), HEAD_DIM ** -0.5, 0.5)
    finally:
        jit.JITFunction.run = run
    return next(launch for launch in launches if launch.kernel.fn.__name__ == "_decode_splits")


def blocks_per_sm(registers: int, shared_bytes: int, warps: int) -> tuple[int, str]:
    """(blocks an sm_90 SM holds, the limit that binds)."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    by_registers = (REGISTERS_PER_SUB_PARTITION // per_warp) * SUB_PARTITIONS // warps
    by_shared = SHARED_PER_SM // (shared_bytes + SHARED_RESERVED_PER_BLOCK)
    limits = {"registers": by_registers, "shared": by_shared, "warps": MAX_WARPS // warps, "blocks": MAX_BLOCKS}
    least = min(limits.values())
    return least, "+".join(name for name, value in limits.items() if value == least)


SHARED_OPCODES = ("LDS", "LDSM", "STS", "STSM", "LDGSTS")


def study(label: str, plan: kernel.LaunchPlan, show_opcodes: bool) -> dict:
    launch = decode_launch(plan)
    started = time.monotonic()
    _, receipt = compile_launch(launch, "sm_90a")
    compiled = launch.kernel.run(*launch.args, grid=(1,), warmup=True, **launch.kwargs)
    body, skipped = main_loop(compiled.asm["sass"])
    rescale = max((inside for inside, _ in skipped), key=len, default=[])
    hot = [instruction for i, instruction in enumerate(body) if i not in set(rescale)]
    per_64 = 64 // plan.block_n
    counts = collections.Counter(opcode(instruction) for instruction in hot)
    blocks, bound = blocks_per_sm(receipt["registers"], receipt["shared_bytes"], plan.num_warps)
    row = {"label": label, "registers": receipt["registers"], "spills": receipt["spill_bytes"],
           "shared_kb": receipt["shared_bytes"] / 1024, "blocks": blocks, "bound": bound,
           "warps_per_sm": blocks * plan.num_warps, "loop": len(body), "rescale": len(rescale),
           "hot_tile": len(hot), "hot_per_64": len(hot) * per_64,
           # warp instructions an SM issues per 64 tokens of one block: a block's warps each run the path
           "issue_per_64": len(hot) * per_64 * plan.num_warps,
           # shared-memory instructions (loads, stores, cp.async) and barriers of the whole block per 64 tokens
           "shared_ops_per_64": sum(counts[name] for name in SHARED_OPCODES) * per_64 * plan.num_warps,
           "barriers_per_64": counts["BAR"] * per_64,
           "local_in_hot_path": counts["LDL"] + counts["STL"],   # spill traffic a tile pays
           "seconds": time.monotonic() - started}
    if show_opcodes:
        row["opcodes"] = counts.most_common(16)
    return row


HEADER = ("| plan | regs | spill B (LDL+STL on hot path) | shared KB | blocks/SM (bound) | warps/SM | loop "
          "| rescale | hot path/tile | hot/64 tok | warp-instr/64 tok/block | shared instr/64 tok/block "
          "| BAR/64 tok |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def markdown(row: dict) -> str:
    return (f"| {row['label']} | {row['registers']} | {row['spills']} ({row['local_in_hot_path']}) | "
            f"{row['shared_kb']:.1f} | {row['blocks']} ({row['bound']}) | {row['warps_per_sm']} | {row['loop']} | "
            f"{row['rescale']} | {row['hot_tile']} | {row['hot_per_64']} | {row['issue_per_64']} | "
            f"{row['shared_ops_per_64']} | {row['barriers_per_64']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="LABEL", help="only plans whose label contains this")
    parser.add_argument("--opcodes", action="store_true", help="the hot path's most frequent opcodes")
    args = parser.parse_args()
    print(HEADER, flush=True)
    for label, plan in candidates().items():
        if args.only and not any(part in label for part in args.only):
            continue
        try:
            row = study(label, plan, args.opcodes)
        except Exception as error:  # noqa: BLE001 - a plan that does not compile is a row of the table
            print(f"| {label} | does not compile: {type(error).__name__}: {str(error).splitlines()[0][:120]} |",
                  flush=True)
            continue
        print(markdown(row), flush=True)
        if args.opcodes:
            print(f"<!-- {label}: {row['opcodes']} ({row['seconds']:.0f} s) -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
