"""gemm/fp8_gemv — decode GEMV on an E4M3 weight with one per-tensor scale: y = (x @ w^T) * w_scale.

Contract (CONTRACTS.md): ``fp8_gemv(x bf16 [M, K], w e4m3 [N, K], w_scale fp32 [1]) -> y bf16 [M, N]``,
``1 <= M <= 16``, any K; float32 accumulation; band parity (against float64 truth, within twice the
error of dequantize-to-bf16 + ``torch.matmul``).

Bytes: read ``N * K`` (w) + ``2 * M * K`` (x), write ``2 * M * N``. N = K = 8192: 67 MB, 15.6 us at
4.3 TB/s; the stock op writes and reads a bf16 copy of w besides (201 MB).

An E4M3 value (4 significant bits, exponents 2**-9..2**8) is exact in bf16, so each [BLOCK_N, BLOCK_K]
weight tile is converted and multiplied with the bf16 activations on the tensor cores, exactly; only
the float32 sum rounds, and ``w_scale`` is applied once per output. See ``gemv_launch`` for the plan
and the split-K reduction.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ops.gemm.gemv_launch import (
    GemvPlan,
    PlanShape,
    accumulate,
    clamp_rows,
    gemv_cells,
    gemv_entry,
    core_products,
    gemv_plan,
    plan_variants,
    run_tiles,
    step_bounds,
    store_rows,
)
from ops.triton_backend import interpreting, sm_count
from references.gemm import fp8_gemv as contract

E4M3_BITS = 8


# -- launch plan ----------------------------------------------------------------------------------
# M = 1 on CUDA cores, M > 1 on tensor cores: the H200 sweep's best at N = K = 8192, 18.2 us at M = 1 (86.8%
# of copy); every plan timed, and why the CUDA cores win at M = 1, in docs/ops/fp8_gemv.md.
DEFAULT_M1_SHAPE = PlanShape(block_n=32, step_bytes=256, num_stages=5, num_warps=4, split_below=0.5, cores_at_m1=True)
DEFAULT_SHAPE = PlanShape(block_n=32, step_bytes=128, num_stages=6, num_warps=2, split_below=0.5)  # M > 1

# Plans for tools/bench --variants around the defaults: tile, step, pipeline depth, warps, split threshold.
VARIANT_SHAPES = tuple(
    [PlanShape(block_n=32, step_bytes=step_bytes, num_stages=num_stages, num_warps=4, split_below=0.5)
     for step_bytes, num_stages in ((128, 4), (128, 6), (256, 3), (256, 4), (256, 6), (512, 3))]
    + [PlanShape(block_n=32, step_bytes=step_bytes, num_stages=num_stages, num_warps=2, split_below=0.5)
       for step_bytes in (128, 256) for num_stages in (3, 4, 6)]
    + [PlanShape(block_n=64, step_bytes=128, num_stages=4, num_warps=4, split_below=2.0),
       PlanShape(block_n=64, step_bytes=128, num_stages=6, num_warps=4, split_below=0.5),
       PlanShape(block_n=64, step_bytes=128, num_stages=4, num_warps=8, split_below=0.5)]
    + [PlanShape(block_n=block_n, step_bytes=step_bytes, num_stages=num_stages, num_warps=4, split_below=split_below,
                 cores_at_m1=True)
       for block_n, step_bytes in ((16, 256), (32, 128), (32, 256), (64, 128), (64, 256))
       for num_stages in (3, 5) for split_below in (0.5, 2.0)]
    + [PlanShape(block_n=block_n, step_bytes=step_bytes, num_stages=num_stages, num_warps=4, split_below=0.5,
                 cores_at_m1=True)
       for block_n, step_bytes in ((16, 128), (16, 256), (32, 128)) for num_stages in (4, 6)]
    + [PlanShape(block_n=block_n, step_bytes=128, num_stages=4, num_warps=8, split_below=0.5, cores_at_m1=True)
       for block_n in (32, 64)]
)


# -- kernel ---------------------------------------------------------------------------------------
# Specialized on K, the chunk and the strides only (see nvfp4_gemv: the loads vectorize on those).
@triton.jit(do_not_specialize=["rows", "cols", "stride_ym"])
def _fp8_gemv_tiles(
    # activations
    x_bits_ptr, stride_xm, stride_xk, rows,
    # weight
    w_ptr, stride_wn, stride_wk, w_scale_ptr, cols, depth,
    # outputs: y (one split) or partials
    y_ptr, stride_ym, partial_ptr, chunk,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    COMPILED: tl.constexpr, NUM_STAGES: tl.constexpr, CUDA_CORES: tl.constexpr,
):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    start, whole, stop = step_bounds(chunk, depth, BLOCK_K)
    columns = start + tl.arange(0, BLOCK_K)
    w_tile = w_ptr + clamp_rows(offs_n, cols)[:, None] * stride_wn + columns[None, :] * stride_wk
    # E4M3 -> float32 is exact on a GPU and under the interpreter (NaN codes aside: not weights)
    if CUDA_CORES:  # M = 1
        x_row = x_bits_ptr + columns * stride_xk
        products = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
        for _ in tl.range(start, whole, BLOCK_K, num_stages=NUM_STAGES):
            products = core_products(products, tl.load(w_tile).to(tl.float32), tl.load(x_row))
            w_tile += BLOCK_K * stride_wk
            x_row += BLOCK_K * stride_xk
        if whole < stop:
            live = whole + tl.arange(0, BLOCK_K) < stop
            products = core_products(products, tl.load(w_tile, mask=live[None, :], other=0.0).to(tl.float32),
                                     tl.load(x_row, mask=live, other=0))
        acc = tl.sum(products, axis=1)[:, None]
    else:
        offs_m = tl.arange(0, BLOCK_M)
        x_rows = (offs_m < rows)[:, None]  # padding rows of x are not read (an M = 1 call reads one row)
        x_tile = x_bits_ptr + offs_m[:, None].to(tl.int64) * stride_xm + columns[None, :] * stride_xk
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
        for _ in tl.range(start, whole, BLOCK_K, num_stages=NUM_STAGES):
            acc = accumulate(acc, tl.load(w_tile).to(tl.float32), tl.load(x_tile, mask=x_rows, other=0), COMPILED)
            w_tile += BLOCK_K * stride_wk
            x_tile += BLOCK_K * stride_xk
        if whole < stop:
            live = (whole + tl.arange(0, BLOCK_K) < stop)[None, :]
            acc = accumulate(acc, tl.load(w_tile, mask=live, other=0.0).to(tl.float32),
                             tl.load(x_tile, mask=x_rows & live, other=0), COMPILED)
    store_rows(acc, y_ptr, stride_ym, partial_ptr, tl.program_id(1), rows, cols, offs_n, tl.load(w_scale_ptr),
               BLOCK_M, SPLIT)


# -- host wrapper ---------------------------------------------------------------------------------
def plan_for(x, w, shape: PlanShape) -> GemvPlan:
    """``shape``'s plan for these inputs on their device (the interpreter's blocks on a CPU)."""
    return gemv_plan(w.shape[0], w.shape[1], E4M3_BITS, sm_count(x.device), interpreting(), shape, x.shape[0])


def default_plan(x, w) -> GemvPlan:
    return plan_for(x, w, DEFAULT_M1_SHAPE if x.shape[0] == 1 else DEFAULT_SHAPE)


def run_plan(x, w, w_scale, plan: GemvPlan) -> torch.Tensor:
    """Launch ``plan`` on already-validated inputs (``tools/bench`` sweeps plans through this)."""
    return run_tiles(_fp8_gemv_tiles, x, w.shape[0], (w, w.stride(0), w.stride(1), w_scale), w_scale, False, plan)


def fp8_gemv(x, w, w_scale) -> torch.Tensor:
    contract.validate(x, w, w_scale)
    return run_plan(x, w, w_scale, default_plan(x, w))


def bench_variants(x, w, w_scale) -> dict:
    """Launch plans around the default, for ``tools/bench --variants`` to time on the device."""
    plans = plan_variants(w.shape[0], x.shape[1], E4M3_BITS, sm_count(x.device), x.shape[0], VARIANT_SHAPES)
    return {label: lambda x, w, w_scale, plan=plan: run_plan(x, w, w_scale, plan) for label, plan in plans.items()}


def bytes_moved(x, w, w_scale) -> int:
    return w.numel() + x.numel() * x.element_size() + 2 * x.shape[0] * w.shape[0] + w_scale.element_size()


def _dequantize(w, w_scale):
    return w.float() * w_scale.reshape(())


def _bench_input(rows: int, cols: int, depth: int):
    def make(device):
        generator = torch.Generator(device=device).manual_seed(rows)
        weight = torch.randn(cols, depth, generator=generator, device=device) * 0.02
        w_scale = weight.abs().amax().reshape(1) / 448
        w = (weight / w_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        x = torch.randn(rows, depth, generator=generator, device=device).bfloat16()
        return {"x": x, "w": w, "w_scale": w_scale}
    return make


# -- catalog entry --------------------------------------------------------------------------------
def params_of(x, w, w_scale):
    return {"M": x.shape[0], "N": w.shape[0], "K": x.shape[1]}


CELLS = gemv_cells(1, "Llama-3 8B/70B FP8 checkpoints")
_TARGET_M1 = (">= 75% of copy bandwidth (stock dequantize + bf16 matmul: 4%, 391 us; "
              "cuBLAS bf16 GEMV on bf16 weights: 70%)")
ENTRY = gemv_entry(contract, fp8_gemv, params_of, CELLS, _bench_input, bytes_moved, _TARGET_M1, _dequantize)
