"""gemm/nvfp4_gemv — decode GEMV on an NVFP4 weight: y = x @ W^T, W dequantized on the fly.

Contract (CONTRACTS.md): ``nvfp4_gemv(x bf16 [M, K], packed uint8 [N, K/2], block_scales e4m3
[N, K/16], global_scale fp32 [1]) -> y bf16 [M, N]``, ``1 <= M <= 16``; ``W`` is ``nvfp4_quantize``'s
dequantization ``e2m1(code) * sf * (1 / global_scale)``; float32 accumulation; band parity
(against float64 truth, within twice the error of dequantize-to-bf16 + ``torch.matmul``).

Bytes: read ``N * K / 2`` (codes) + ``N * K / 16`` (scales) + ``2 * M * K`` (x), write ``2 * M * N``.
N = K = 8192: 36 MB of weights, 8.8 us at 4.3 TB/s; the stock op moves a bf16 copy of W besides.

Per step a program decodes a [BLOCK_N, BLOCK_K] tile: byte j of a row holds elements 2j (low nibble)
and 2j+1 (high nibble); the two values are joined pairwise in registers, so one tensor-core product per
step meets x as it lies in memory. ``e2m1(code) * sf`` has at most 6 significant bits: exact in bf16, so
the product with bf16 x is exact and only the float32 sum rounds; ``1 / global_scale`` (IEEE)
is applied once per output. On a GPU the decode is a table lookup in inline PTX (``E2M1_PAIRS_PTX``)
or (a plan option) bit placement (``E2M1_PLACED_PTX``: the values times 2**-7, undone on the float32
sums, exactly), under the interpreter arithmetic (the placed plan's twin: the same values times 2**-7).
M = 1 on CUDA cores (a plan option) decodes bytes [.., 8] against their block scales, to float32
(``E2M1_FLOAT32_PTX`` on a GPU), and meets x's even and odd columns separately. Plan options also
prefetch each step's block scales one step ahead and step addresses from fixed int32 offsets. M > 1 on
a GPU (the default plan) is a Gluon kernel that loads the packed bytes in the tensor cores' operand
layout and decodes them there, so the decoded tile never passes through shared memory. See
``gemv_launch`` for the plan and the split-K reduction.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from ops.gemm.gemv_launch import (
    GemvPlan,
    PlanShape,
    accumulate,
    clamp_rows,
    gemv_cells,
    gemv_entry,
    gemv_plan,
    plan_variants,
    run_tiles,
    step_bounds,
    store_rows,
)
from ops.triton_backend import interpreting, sm_count
from references.formats.nvfp4 import NVFP4_BLOCK, nvfp4_dequantize, nvfp4_global_scale, nvfp4_quantize
from references.gemm import nvfp4_gemv as contract
from references.validation import require_within_limits

E2M1_BITS = 4
SCALE_BLOCK = tl.constexpr(NVFP4_BLOCK)  # elements per E4M3 block scale, for the kernels


# -- launch plan ----------------------------------------------------------------------------------
# M = 1 on CUDA cores with the float32 decode, prefetched scales and stepped addresses (the H200 sweep's best
# at N = K = 8192: 19.3 us, 45.7% of copy). M > 1 on a GPU: the placed decode into the operand registers
# (Gluon), 64 rows a program, 32-byte steps and K split for 5 programs an SM, above FEW_ROWS rows with x staged
# in shared memory, where the Triton kernel's tensor-core plan took 2x the M = 1 time; under the interpreter
# that Triton plan. Every plan timed, and the sm_90 instruction counts that chose the options, in
# docs/ops/nvfp4_gemv.md.
DEFAULT_M1_SHAPE = PlanShape(block_n=16, step_bytes=128, num_stages=4, num_warps=2, split_below=2.0, cores_at_m1=True,
                             float32_decode=True, prefetch_scales=True, stepped=True)
TENSOR_CORE_SHAPE = PlanShape(block_n=32, step_bytes=128, num_stages=6, num_warps=4, split_below=2.0,
                              placed_decode=True, prefetch_scales=True, stepped=True)
OPERAND_DECODE_SHAPE = dataclasses.replace(TENSOR_CORE_SHAPE, block_n=64, step_bytes=64, split_below=8.0,
                                           operand_decode=True, programs_per_sm=2)
# At most FEW_ROWS rows: 32-byte steps (fewer registers) and K split for 5 programs an SM, the H100's best at M = 4
# (23.4 us against OPERAND_DECODE_SHAPE's 25.7). Above, the same with x staged in shared memory once a step, where
# each of the 4 warps loaded the step's whole x tile from global: the H100's best at M = 16 (24.3 us against 28.1)
FEW_ROWS, FEW_ROWS_SHAPE = 4, dataclasses.replace(OPERAND_DECODE_SHAPE, step_bytes=32, programs_per_sm=5)
MANY_ROWS_SHAPE = dataclasses.replace(FEW_ROWS_SHAPE, x_shared=True)

# Plans for tools/bench --variants: each decode and loop option alone and together, around one tile.
_TABLE_DECODE_BEST = PlanShape(block_n=32, step_bytes=128, num_stages=4, num_warps=4, split_below=0.5)
_LEAN_LOOP = dict(placed_decode=True, prefetch_scales=True, stepped=True)
_CORES_FLOAT32 = dict(cores_at_m1=True, float32_decode=True)


def _around(**changes) -> PlanShape:
    return dataclasses.replace(_TABLE_DECODE_BEST, **changes)


VARIANT_SHAPES = (
    _around(), _around(step_bytes=256, num_stages=3),  # the table decode's best, for comparison
    _around(placed_decode=True), _around(placed_decode=True, prefetch_scales=True),
    _around(placed_decode=True, stepped=True), _around(prefetch_scales=True, stepped=True),
    _around(step_bytes=256, num_stages=3, placed_decode=True, stepped=True),
    *(_around(num_stages=num_stages, **_LEAN_LOOP) for num_stages in (3, 4, 6)),
    _around(block_n=64, num_warps=8, placed_decode=True, stepped=True),
    *(_around(block_n=64, num_stages=num_stages, num_warps=8, split_below=split_below, **_LEAN_LOOP)
      for num_stages, split_below in ((3, 0.5), (4, 0.5), (4, 2.0))),
    _around(block_n=16, **_LEAN_LOOP), _around(num_warps=2, **_LEAN_LOOP),
    _around(max_registers=128, **_LEAN_LOOP),
    *(_around(block_n=64, num_stages=num_stages, num_warps=8, max_registers=128, **_LEAN_LOOP)
      for num_stages in (3, 4, 5)),
    _around(block_n=16, **_CORES_FLOAT32), _around(block_n=16, prefetch_scales=True, **_CORES_FLOAT32),
    _around(block_n=16, stepped=True, **_CORES_FLOAT32),
    *(_around(block_n=block_n, num_stages=num_stages, num_warps=num_warps, prefetch_scales=True, stepped=True,
              **_CORES_FLOAT32)
      for block_n, num_stages, num_warps in ((16, 3, 4), (16, 4, 4), (16, 6, 4), (16, 4, 2), (32, 4, 4), (32, 6, 4),
                                             (32, 4, 8), (64, 4, 8))),
    _around(block_n=16, cores_at_m1=True, **_LEAN_LOOP), _around(num_stages=6, cores_at_m1=True, **_LEAN_LOOP),
    TENSOR_CORE_SHAPE,
    *(dataclasses.replace(OPERAND_DECODE_SHAPE, block_n=block_n, step_bytes=step_bytes, programs_per_sm=per_sm)
      for block_n, step_bytes, per_sm in ((64, 64, 1), (64, 64, 2), (64, 64, 4), (64, 64, 8), (32, 64, 2), (32, 64, 4),
                                          (64, 32, 2), (64, 32, 4), (64, 32, 5), (64, 128, 1))),
    # M = 16's x traffic (issue 27): each warp reads the step's whole x, 4x the packed bytes at 16 rows a warp; x read
    # by half the warps (32 rows a warp), or once a step by the program into shared memory, each warp's operand there
    *(dataclasses.replace(OPERAND_DECODE_SHAPE, block_n=block_n, step_bytes=step_bytes, programs_per_sm=per_sm,
                          rows_a_warp=32)
      for block_n, step_bytes, per_sm in ((64, 64, 2), (64, 32, 5), (128, 64, 2), (128, 32, 2))),
    *(dataclasses.replace(OPERAND_DECODE_SHAPE, block_n=block_n, step_bytes=step_bytes, programs_per_sm=per_sm,
                          rows_a_warp=rows_a_warp, x_shared=True)
      for block_n, step_bytes, per_sm, rows_a_warp in ((64, 64, 2, 16), (64, 64, 4, 16), (64, 32, 5, 16),
                                                       (64, 128, 1, 16), (128, 64, 2, 16), (64, 64, 2, 32))),
)

# -- kernel ---------------------------------------------------------------------------------------
# Four packed bytes (eight E2M1 codes) -> four bf16 pairs, each code's value times its byte's scale.
# The magnitude index (3 bits) of each code selects, by byte permute (prmt), the high and the low byte
# of its bf16 value from two 8-entry tables: {0, 0.5, 1, 1.5, 2, 3, 4, 6} = 0x0000 0x3F00 0x3F80 0x3FC0
# 0x4000 0x4040 0x4080 0x40C0; the code's sign bit is or-ed into bit 15; one bf16x2 fma (+ -0.0)
# multiplies by the scale, exactly (at most 6 significant bits, no subnormal). $4: the four bytes;
# $5, $6: their scales as bf16 pairs; $0, $1: low-nibble values (elements 2j); $2, $3: high-nibble.
# About 4 instructions per weight, against about 8 for the arithmetic decode (SASS for sm_90).
E2M1_PAIRS_PTX = tl.constexpr("""
{
.reg .b32 t, u, sel_lo, sel_hi, hb, lb, lo01, lo23, hi01, hi23, s01, s23, nz;
mov.b32 nz, 0x80008000;
and.b32 t, $4, 0x07070707;
shr.b32 u, t, 4;
or.b32 u, u, t;
prmt.b32 sel_lo, u, 0, 0x4420;
shr.b32 t, $4, 4;
and.b32 t, t, 0x07070707;
shr.b32 u, t, 4;
or.b32 u, u, t;
prmt.b32 sel_hi, u, 0, 0x4420;
prmt.b32 hb, 0x3F3F3F00, 0x40404040, sel_lo;
prmt.b32 lb, 0xC0800000, 0xC0804000, sel_lo;
prmt.b32 lo01, lb, hb, 0x5140;
prmt.b32 lo23, lb, hb, 0x7362;
prmt.b32 hb, 0x3F3F3F00, 0x40404040, sel_hi;
prmt.b32 lb, 0xC0800000, 0xC0804000, sel_hi;
prmt.b32 hi01, lb, hb, 0x5140;
prmt.b32 hi23, lb, hb, 0x7362;
prmt.b32 s01, $4, 0, 0x1404;
prmt.b32 s23, $4, 0, 0x3424;
and.b32 t, s01, 0x80008000;
or.b32 hi01, hi01, t;
and.b32 t, s23, 0x80008000;
or.b32 hi23, hi23, t;
shl.b32 s01, s01, 4;
shl.b32 s23, s23, 4;
and.b32 t, s01, 0x80008000;
or.b32 lo01, lo01, t;
and.b32 t, s23, 0x80008000;
or.b32 lo23, lo23, t;
fma.rn.bf16x2 $0, lo01, $5, nz;
fma.rn.bf16x2 $1, lo23, $6, nz;
fma.rn.bf16x2 $2, hi01, $5, nz;
fma.rn.bf16x2 $3, hi23, $6, nz;
}
""")


# For CUDA-core products (float32): four packed bytes -> their eight values as float32, each code's value
# times its byte's scale. Each code's 3 magnitude bits go to bits 9..11 of a float16 and its sign to bit
# 15, two codes a 32-bit word (bytes 0 and 2, or 1 and 3): the float16 reads as e2m1(code) * 2**-14 (0.5 a
# float16 subnormal); cvt.f32.f16 is exact, and one multiply by scale * 2**14 gives e2m1(code) * scale
# exactly (at most 6 significant bits). $8: the four bytes; $9..$12: their scales times 2**14, float32;
# $0..$3: low-nibble values (elements 2j) of bytes 0..3; $4..$7: high-nibble values. 35 instructions per
# eight codes and no byte unpacking, against 33 plus 8 bf16 -> float32 moves for E2M1_PAIRS_PTX.
E2M1_FLOAT32_PTX = tl.constexpr("""
{
.reg .b32 a, b, p02l, p02h, p13l, p13h;
.reg .b16 h0, h1, h2, h3, h4, h5, h6, h7;
.reg .f32 f;
shl.b32 a, $8, 9;
and.b32 a, a, 0x0E000E00;
shl.b32 b, $8, 12;
and.b32 b, b, 0x80008000;
or.b32 p02l, a, b;
shl.b32 a, $8, 5;
and.b32 a, a, 0x0E000E00;
shl.b32 b, $8, 8;
and.b32 b, b, 0x80008000;
or.b32 p02h, a, b;
shl.b32 a, $8, 1;
and.b32 a, a, 0x0E000E00;
shl.b32 b, $8, 4;
and.b32 b, b, 0x80008000;
or.b32 p13l, a, b;
shr.b32 a, $8, 3;
and.b32 a, a, 0x0E000E00;
and.b32 b, $8, 0x80008000;
or.b32 p13h, a, b;
mov.b32 {h0, h2}, p02l;
mov.b32 {h1, h3}, p13l;
mov.b32 {h4, h6}, p02h;
mov.b32 {h5, h7}, p13h;
""" + "\n".join(f"cvt.f32.f16 f, h{i};\nmul.rn.f32 ${i}, f, ${9 + i % 4};" for i in range(8)) + """
}
""")


# Bit placement into bf16 (no table): a code's 3 magnitude bits go to bits 6..8 of a bf16 and its sign to
# bit 15, so the bf16 reads as e2m1(code) * 2**-126 (0.5 a bf16 subnormal); one bf16x2 fma by the block
# scale times 2**119 (exact in bf16: 448 * 2**119 < bf16's largest) gives e2m1(code) * scale * 2**-7,
# exact (at most 6 significant bits, at least 2**-17: normal); the kernel multiplies its float32 sums by
# 2**7. Codes at w's nibbles k and k + 4 (16 bits apart) share one shift: a byte permute first makes
# them the low (or high) nibbles of bytes (0, 1) or (2, 3), the pairs the outputs hold. $4: the four
# bytes; $5, $6: their scales times 2**119 as bf16 pairs; $0, $1: low-nibble values, $2, $3: high.
# 21 instructions per eight codes (prmt, 4 x (2 shifts, and, and-or), 4 fma) against 33 for the table.
E2M1_PLACED_PTX = tl.constexpr("""
{
.reg .b32 w, s, m0, m1, m2, m3, nz;
mov.b32 nz, 0x80008000;
prmt.b32 w, $4, 0, 0x3120;
shl.b32 m0, w, 6;
and.b32 m0, m0, 0x01C001C0;
shl.b32 s, w, 12;
and.b32 s, s, 0x80008000;
or.b32 m0, m0, s;
shl.b32 m1, w, 2;
and.b32 m1, m1, 0x01C001C0;
shl.b32 s, w, 8;
and.b32 s, s, 0x80008000;
or.b32 m1, m1, s;
shr.b32 m2, w, 2;
and.b32 m2, m2, 0x01C001C0;
shl.b32 s, w, 4;
and.b32 s, s, 0x80008000;
or.b32 m2, m2, s;
shr.b32 m3, w, 6;
and.b32 m3, m3, 0x01C001C0;
and.b32 s, w, 0x80008000;
or.b32 m3, m3, s;
fma.rn.bf16x2 $0, m0, $5, nz;
fma.rn.bf16x2 $1, m2, $6, nz;
fma.rn.bf16x2 $2, m1, $5, nz;
fma.rn.bf16x2 $3, m3, $6, nz;
}
""")
PLACED_SCALE = tl.constexpr(2.0**119)  # the block scale's factor for E2M1_PLACED_PTX: weights times 2**-7
PLACED_UNDO = tl.constexpr(128.0)  # 2**7, on the float32 sums


@triton.jit
def _e2m1_times_2_pow_14(code):
    """float32 value of E2M1 ``code`` (int32, low 4 bits) times 2**-14, exactly.

    E2M1 is a float with 2 exponent bits (bias 1) and 1 mantissa bit; moved into float16's fields
    (bias 15) it reads as the same number times 2**-14, its subnormal 0.5 as a float16 subnormal. The
    float16 -> float32 conversion is exact (subnormals included) on a GPU and under the interpreter.
    """
    bits = ((code & 0x7) << 9) | ((code & 0x8) << 12)
    return bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def dequantize_pairs(packed, scale, PTX_DECODE: tl.constexpr, PLACED: tl.constexpr = False):
    """(element 2j, element 2j + 1) of each packed byte j: ``e2m1(nibble) * scale``, exactly (``PLACED``:
    times 2**-7, which the caller undoes on its float32 sums).

    ``packed`` uint8, ``scale`` float32 (broadcast against ``packed``). With ``PTX_DECODE`` (GPU only: the
    interpreter has no inline assembly) bf16 by table lookup or (``PLACED``) bit placement, else float32
    by arithmetic.
    """
    if PTX_DECODE:
        if PLACED:
            return tl.inline_asm_elementwise(E2M1_PLACED_PTX, "=r,=r,=r,=r,r,r,r",
                                             [packed, (scale * PLACED_SCALE).to(tl.bfloat16)],
                                             dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
        return tl.inline_asm_elementwise(E2M1_PAIRS_PTX, "=r,=r,=r,=r,r,r,r", [packed, scale.to(tl.bfloat16)],
                                         dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
    else:
        code = packed.to(tl.int32)
        if PLACED:  # the values the PTX gives: times 2**-7
            scale = scale * 128.0  # undoes the 2**-14 of the decode, less 2**7
        else:
            scale = scale * 16384.0  # undoes the 2**-14 of the decode
        return _e2m1_times_2_pow_14(code) * scale, _e2m1_times_2_pow_14(code >> 4) * scale


@triton.jit
def dequantize_pairs_float32(packed, scale):
    """``dequantize_pairs`` as float32 by ``E2M1_FLOAT32_PTX`` (GPU only)."""
    return tl.inline_asm_elementwise(E2M1_FLOAT32_PTX, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r",
                                     [packed, scale * 16384.0], dtype=(tl.float32, tl.float32), is_pure=True, pack=4)


@triton.jit
def dequantize_tile(packed, scales, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PTX_DECODE: tl.constexpr,
                    PLACED: tl.constexpr):
    """The [BLOCK_N, BLOCK_K] weight tile, columns in order, from its packed bytes [BLOCK_N, BLOCK_K / 2]
    and block scales [BLOCK_N, BLOCK_K / 16] (without the global scale): byte j holds columns 2j (low
    nibble) and 2j + 1 (high), so the low and high values are joined pairwise, in registers."""
    low, high = dequantize_pairs(tl.reshape(packed, [BLOCK_N, BLOCK_K // SCALE_BLOCK, SCALE_BLOCK // 2]),
                                 tl.reshape(scales.to(tl.float32), [BLOCK_N, BLOCK_K // SCALE_BLOCK, 1]), PTX_DECODE,
                                 PLACED)
    return tl.reshape(tl.join(low, high), [BLOCK_N, BLOCK_K])


@triton.jit
def core_pair_products(products, packed, scales, x_pairs, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       PTX_DECODE: tl.constexpr, FLOAT32_DECODE: tl.constexpr, PLACED: tl.constexpr):
    """``core_products`` for a step's packed bytes [BLOCK_N, BLOCK_K / 2] and block scales [BLOCK_N,
    BLOCK_K / 16] into ``products`` [BLOCK_N, BLOCK_K / 16, 8]: the low-nibble values against x's even
    columns, the high-nibble ones against the odd; ``x_pairs`` [BLOCK_K / 2] holds x's columns 2j (low
    half) and 2j + 1 (high half) as one int32, so x is read in 16-byte vectors and never rearranged."""
    blocks: tl.constexpr = BLOCK_K // SCALE_BLOCK
    packed = tl.reshape(packed, [BLOCK_N, blocks, SCALE_BLOCK // 2])
    scales = tl.reshape(scales.to(tl.float32), [BLOCK_N, blocks, 1])
    if FLOAT32_DECODE:
        low, high = dequantize_pairs_float32(packed, scales)
    else:
        low, high = dequantize_pairs(packed, scales, PTX_DECODE, PLACED)
    x_pairs = tl.reshape(x_pairs, [1, blocks, SCALE_BLOCK // 2])
    even = (x_pairs << 16).to(tl.float32, bitcast=True)
    odd = (x_pairs & -65536).to(tl.float32, bitcast=True)
    return products + low.to(tl.float32) * even + high.to(tl.float32) * odd


# The block scales' loads are single bytes (their layout follows the packed bytes'): no cp.async (at least
# 4 bytes), so Triton's pipeline leaves them synchronous, one global latency a step (sm_90 SASS: 4
# LDG.E.U8 a thread a 32 x 128 B step, consumed at once). With PREFETCH_SCALES a step loads the next
# step's scales into registers and uses the ones its predecessor loaded.
@triton.jit
def _first_scales(scale_tile, start, whole, block, PREFETCH: tl.constexpr):
    """The first step's block scales, where prefetched (else nothing: a placeholder)."""
    if PREFETCH:
        return tl.load(scale_tile, mask=(tl.zeros_like(block) + start < whole)[None, :], other=0.0)
    else:
        return tl.zeros([1, 1], tl.float32)


@triton.jit
def _step_scales(scales, scale_tile, k, whole, block, BLOCK_K: tl.constexpr, PREFETCH: tl.constexpr):
    """(what the next step gets, this step's block scales): those prefetched, or loaded now."""
    if PREFETCH:
        upcoming = tl.load(scale_tile + BLOCK_K // SCALE_BLOCK,
                           mask=(tl.zeros_like(block) + k + BLOCK_K < whole)[None, :], other=0.0)
        return upcoming, scales
    else:
        return scales, tl.load(scale_tile)


# M, N and y's row stride change from call to call and gain nothing from specialization (each distinct
# one is a compile). K, the chunk and the weights' strides stay specialized: without their divisibility
# by 16 the loads are neither vectorized nor pipelined (cp.async), measured on the sm_90 PTX.
@triton.jit(do_not_specialize=["rows", "cols", "stride_ym"])
def _nvfp4_gemv_tiles(
    # activations
    x_bits_ptr, stride_xm, stride_xk, rows,
    # weight
    packed_ptr, stride_pn, scales_ptr, stride_sn, global_scale_ptr, cols, depth,
    # outputs: y (one split) or partials
    y_ptr, stride_ym, partial_ptr, chunk,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    COMPILED: tl.constexpr, PTX_DECODE: tl.constexpr, NUM_STAGES: tl.constexpr, CUDA_CORES: tl.constexpr,
    FLOAT32_DECODE: tl.constexpr, PLACED_DECODE: tl.constexpr,
    PREFETCH_SCALES: tl.constexpr, STEPPED: tl.constexpr,
):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    start, whole, stop = step_bounds(chunk, depth, BLOCK_K)
    if CUDA_CORES:  # M = 1; x read as int32 pairs: stride_xk == 1 and x 4-byte aligned (the host checks)
        # bytes and x's pairs load as [BLOCK_N, BLOCK_K / 2] rows (16-byte vectors), then are viewed as
        # [BLOCK_N, blocks, 8] against the block scales [BLOCK_N, blocks, 1]
        row = clamp_rows(offs_n, cols)[:, None]
        pair = start // 2 + tl.arange(0, BLOCK_K // 2)
        block = start // SCALE_BLOCK + tl.arange(0, BLOCK_K // SCALE_BLOCK)
        packed_tile = packed_ptr + row * stride_pn + pair[None, :]
        scale_tile = scales_ptr + row * stride_sn + block[None, :]
        x_pairs = x_bits_ptr.to(tl.pointer_type(tl.int32), bitcast=True) + pair
        products = tl.zeros([BLOCK_N, BLOCK_K // SCALE_BLOCK, SCALE_BLOCK // 2], tl.float32)
        scales = _first_scales(scale_tile, start, whole, block, PREFETCH_SCALES)
        if STEPPED:  # addresses from fixed offsets and the step, not pointer tensors carried through the loop
            packed_offsets = (row * stride_pn + pair[None, :]).to(tl.int32)
            scale_offsets = (row * stride_sn + block[None, :]).to(tl.int32)
            for k in tl.range(0, whole - start, BLOCK_K, num_stages=NUM_STAGES):
                step_tile = scales_ptr + k // SCALE_BLOCK + scale_offsets
                scales, step_scales = _step_scales(scales, step_tile, k + start, whole, block, BLOCK_K, PREFETCH_SCALES)
                products = core_pair_products(products, tl.load(packed_ptr + k // 2 + packed_offsets), step_scales,
                                              tl.load(x_pairs + k // 2), BLOCK_N, BLOCK_K, PTX_DECODE, FLOAT32_DECODE,
                                              PLACED_DECODE)
            packed_tile += (whole - start) // 2
            scale_tile += (whole - start) // SCALE_BLOCK
            x_pairs += (whole - start) // 2
        else:
            for k in tl.range(start, whole, BLOCK_K, num_stages=NUM_STAGES):
                scales, step_scales = _step_scales(scales, scale_tile, k, whole, block, BLOCK_K, PREFETCH_SCALES)
                products = core_pair_products(products, tl.load(packed_tile), step_scales, tl.load(x_pairs),
                                              BLOCK_N, BLOCK_K, PTX_DECODE, FLOAT32_DECODE, PLACED_DECODE)
                packed_tile += BLOCK_K // 2
                scale_tile += BLOCK_K // SCALE_BLOCK
                x_pairs += BLOCK_K // 2
        if whole < stop:  # K is a multiple of 16: the step's blocks are whole or absent
            live = whole - start + 2 * pair < stop
            block_live = whole - start + SCALE_BLOCK * block < stop
            products = core_pair_products(products, tl.load(packed_tile, mask=live[None, :], other=0),
                                          tl.load(scale_tile, mask=block_live[None, :], other=0.0),
                                          tl.load(x_pairs, mask=live, other=0), BLOCK_N, BLOCK_K,
                                          PTX_DECODE, FLOAT32_DECODE, PLACED_DECODE)
        acc = tl.sum(tl.sum(products, axis=2), axis=1)[:, None]
    else:
        offs_m = tl.arange(0, BLOCK_M)
        x_rows = (offs_m < rows)[:, None]  # padding rows of x are not read (an M = 1 call reads one row)
        weight_row = clamp_rows(offs_n, cols)[:, None]
        byte = start // 2 + tl.arange(0, BLOCK_K // 2)
        group = start // SCALE_BLOCK + tl.arange(0, BLOCK_K // SCALE_BLOCK)
        column = start + tl.arange(0, BLOCK_K)
        packed_tile = packed_ptr + weight_row * stride_pn + byte[None, :]
        scale_tile = scales_ptr + weight_row * stride_sn + group[None, :]
        x_tile = x_bits_ptr + offs_m[:, None].to(tl.int64) * stride_xm + column[None, :] * stride_xk
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
        scales = _first_scales(scale_tile, start, whole, group, PREFETCH_SCALES)
        if STEPPED:  # addresses from fixed offsets and the step, not pointer tensors carried through the loop
            packed_offsets = (weight_row * stride_pn + byte[None, :]).to(tl.int32)
            scale_offsets = (weight_row * stride_sn + group[None, :]).to(tl.int32)
            x_offsets = (offs_m[:, None] * stride_xm + column[None, :] * stride_xk).to(tl.int32)
            for k in tl.range(0, whole - start, BLOCK_K, num_stages=NUM_STAGES):
                step_tile = scales_ptr + k // SCALE_BLOCK + scale_offsets
                scales, step_scales = _step_scales(scales, step_tile, k + start, whole, group, BLOCK_K, PREFETCH_SCALES)
                weights = dequantize_tile(tl.load(packed_ptr + k // 2 + packed_offsets), step_scales, BLOCK_N, BLOCK_K,
                                          PTX_DECODE, PLACED_DECODE)
                acc = accumulate(acc, weights, tl.load(x_bits_ptr + k * stride_xk + x_offsets, mask=x_rows, other=0),
                                 COMPILED)
            packed_tile += (whole - start) // 2
            scale_tile += (whole - start) // SCALE_BLOCK
            x_tile += (whole - start) * stride_xk
        else:
            for k in tl.range(start, whole, BLOCK_K, num_stages=NUM_STAGES):
                scales, step_scales = _step_scales(scales, scale_tile, k, whole, group, BLOCK_K, PREFETCH_SCALES)
                weights = dequantize_tile(tl.load(packed_tile), step_scales, BLOCK_N, BLOCK_K, PTX_DECODE,
                                          PLACED_DECODE)
                acc = accumulate(acc, weights, tl.load(x_tile, mask=x_rows, other=0), COMPILED)
                packed_tile += BLOCK_K // 2
                scale_tile += BLOCK_K // SCALE_BLOCK
                x_tile += BLOCK_K * stride_xk
        if whole < stop:  # K is a multiple of 16: the step's blocks are whole or absent
            live = (whole + tl.arange(0, BLOCK_K) < stop)[None, :]
            packed = tl.load(packed_tile, mask=(whole + 2 * tl.arange(0, BLOCK_K // 2) < stop)[None, :], other=0)
            scale = tl.load(scale_tile, mask=(whole + SCALE_BLOCK * tl.arange(0, BLOCK_K // SCALE_BLOCK) < stop)[None, :],
                            other=0.0)
            weights = dequantize_tile(packed, scale, BLOCK_N, BLOCK_K, PTX_DECODE, PLACED_DECODE)
            acc = accumulate(acc, weights, tl.load(x_tile, mask=x_rows & live, other=0), COMPILED)
    if PLACED_DECODE:
        acc = acc * PLACED_UNDO  # exact: a power of two
    decode_scale = tl.math.div_rn(1.0, tl.load(global_scale_ptr))
    store_rows(acc, y_ptr, stride_ym, partial_ptr, tl.program_id(1), rows, cols, offs_n, decode_scale, BLOCK_M, SPLIT)


# M > 1 on a GPU: mma.sync's operand A layout for bf16 with k_width = 16 gives a thread 16 consecutive values of
# K a row (operand B's the same K: the two sides are permuted alike), which are 8 packed bytes, one block scale's
# block; the same parent with k_width = 8 on the packed uint8 tile gives the thread exactly those bytes. So a
# step loads its packed bytes straight from global memory in that byte layout (a warp's load: 8 rows of 32
# bytes, whole sectors) and each block's scale once, decodes them in registers (E2M1_PLACED_PTX) into the bf16
# operand, and the layout conversions are register renamings: the decoded tile never touches shared memory,
# where Triton's tl.dot path (above) stores and reloads it each step (docs/ops/nvfp4_gemv.md). Gluon writes the
# layouts out; it has no interpreter.
# The launch signature is the tile kernels' (``run_tiles``) and X_SHARED; CUDA_CORES, COMPILED and NUM_STAGES do not
# apply; the warps (``rows_a_warp``) come with the launch.
@gluon.jit(do_not_specialize=["rows", "cols", "stride_ym"])
def _nvfp4_gemv_operand_tiles(
    x_bits_ptr, stride_xm, stride_xk, rows,
    packed_ptr, stride_pn, scales_ptr, stride_sn, global_scale_ptr, cols, depth,
    y_ptr, stride_ym, partial_ptr, chunk,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, SPLIT: gl.constexpr,
    COMPILED: gl.constexpr, CUDA_CORES: gl.constexpr, NUM_STAGES: gl.constexpr, X_SHARED: gl.constexpr,
):
    # the warps split the rows, BLOCK_N / num_warps a warp (16-row mma tiles); each reads all of the step's x
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[gl.num_warps(), 1],
                                                  instr_shape=[16, 8])
    a_bytes: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=8)
    a_values: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=16)
    b_values: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=16)
    BLOCK_BYTES: gl.constexpr = BLOCK_K // 2
    GROUPS: gl.constexpr = BLOCK_BYTES // 8   # block scales a row a step: a thread's 8 bytes are one block
    # the byte tile as [BLOCK_N, GROUPS, 8] (a register renaming), and its scales' layout, one a block
    blocks: gl.constexpr = gl.reshape(gl.zeros([BLOCK_N, BLOCK_BYTES], gl.uint8, a_bytes),
                                      [BLOCK_N, GROUPS, 8]).type.layout
    block_scales: gl.constexpr = gl.SliceLayout(2, blocks)
    # this split's K: whole steps start..whole unmasked, then one masked step whole..stop (as step_bounds)
    start = gl.program_id(1) * chunk
    stop = gl.minimum(start + chunk, depth)
    whole = start + (stop - start) // BLOCK_K * BLOCK_K
    # rows past N read row N - 1 (never stored), so the steps' loads need no mask (as clamp_rows)
    first_row = gl.program_id(0) * BLOCK_N
    weight_rows = gl.minimum(first_row + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_bytes)),
                             cols - 1).to(gl.int64)
    byte = gl.arange(0, BLOCK_BYTES, layout=gl.SliceLayout(0, a_bytes))
    packed_tile = packed_ptr + weight_rows[:, None] * stride_pn + (start // 2 + byte)[None, :]
    scale_rows = gl.minimum(first_row + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, block_scales)),
                            cols - 1).to(gl.int64)
    group = gl.arange(0, GROUPS, layout=gl.SliceLayout(0, block_scales))
    scale_tile = scales_ptr + scale_rows[:, None] * stride_sn + (start // SCALE_BLOCK + group)[None, :]
    # x: each warp reads the whole step's x in its operand layout (two 16-byte vectors of a thread fill a sector
    # between them), or (X_SHARED) the program reads it once, 16 bytes a thread along whole rows (BLOCK_K <= 256),
    # into shared memory, where each warp reads its operand: swizzled in pairs of rows, no bank conflicts either way
    if X_SHARED:
        x_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[8, 1],
                                                  threads_per_warp=[BLOCK_K // 8, 256 // BLOCK_K],
                                                  warps_per_cta=[1, gl.num_warps()], order=[0, 1])
        x_staged = gl.allocate_shared_memory(gl.int16, [BLOCK_K, BLOCK_M],
                                             gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=2, order=[0, 1]))
    else:
        x_layout: gl.constexpr = b_values
        x_staged = 0
    k = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, x_layout))
    m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, x_layout))
    x_tile = x_bits_ptr + m[None, :].to(gl.int64) * stride_xm + (start + k)[:, None] * stride_xk
    x_rows = (m < rows)[None, :]  # padding rows of x are not read
    acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, mma)
    for step in range(0, whole - start, BLOCK_K):
        acc = _operand_step(acc, gl.load(packed_tile + step // 2), gl.load(scale_tile + step // SCALE_BLOCK),
                            _x_operand(gl.load(x_tile + step * stride_xk, mask=x_rows, other=0), x_staged, b_values,
                                       X_SHARED),
                            BLOCK_N, BLOCK_K, GROUPS, a_values)
    if whole < stop:  # K is a multiple of 16: a byte's block is whole or absent, as the byte is
        live = (whole + 2 * byte < stop)[None, :]
        block_live = (whole + SCALE_BLOCK * group < stop)[None, :]
        acc = _operand_step(acc, gl.load(packed_tile + (whole - start) // 2, mask=live, other=0),
                            gl.load(scale_tile + (whole - start) // SCALE_BLOCK, mask=block_live, other=0.0),
                            _x_operand(gl.load(x_tile + (whole - start) * stride_xk,
                                               mask=x_rows & (whole + k < stop)[:, None], other=0),
                                       x_staged, b_values, X_SHARED),
                            BLOCK_N, BLOCK_K, GROUPS, a_values)
    acc = acc * PLACED_UNDO  # exact: a power of two
    out_rows = gl.program_id(0) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
    out_m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma))
    live_out = (out_rows < cols)[:, None] & (out_m < rows)[None, :]
    if SPLIT:  # partials[split, m, n], float32, unscaled: sum_splits applies the scale once (as store_rows)
        slot = (gl.program_id(1) * rows + out_m[None, :]).to(gl.int64) * cols + out_rows[:, None]
        gl.store(partial_ptr + slot, acc, mask=live_out)
    else:
        decode_scale = gl.div_rn(1.0, gl.load(global_scale_ptr))
        gl.store(y_ptr + out_m[None, :].to(gl.int64) * stride_ym + out_rows[:, None],
                 (acc * decode_scale).to(gl.bfloat16), mask=live_out)


@gluon.jit
def _x_operand(x_bits, x_staged, b_values: gl.constexpr, X_SHARED: gl.constexpr):
    """The step's x [BLOCK_K, BLOCK_M] (int16) in operand B's layout: as loaded, or (``X_SHARED``) through
    ``x_staged``, the program's copy in shared memory (the compiler puts a barrier each side of the store)."""
    if X_SHARED:
        x_staged.store(x_bits)
        return x_staged.load(b_values)
    else:
        return x_bits


@gluon.jit
def _operand_step(acc, packed, raw_scales, x_bits, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                  GROUPS: gl.constexpr, a_values: gl.constexpr):
    """``acc`` plus one step's products: ``packed`` [BLOCK_N, BLOCK_K / 2] in operand A's byte layout,
    ``raw_scales`` [BLOCK_N, GROUPS] (one a block of 8 bytes), ``x_bits`` [BLOCK_K, BLOCK_M] (int16) in operand
    B's."""
    blocks = gl.reshape(packed, [BLOCK_N, GROUPS, 8])
    scales = gl.expand_dims((raw_scales.to(gl.float32) * PLACED_SCALE).to(gl.bfloat16), 2)
    scales, blocks = gl.broadcast(scales, blocks)
    low, high = gl.inline_asm_elementwise(E2M1_PLACED_PTX, "=r,=r,=r,=r,r,r,r", [blocks, scales],
                                          dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=4)
    weights = gl.convert_layout(gl.reshape(gl.join(low, high), [BLOCK_N, BLOCK_K]), a_values)
    return mma_v2(weights, x_bits.to(gl.bfloat16, bitcast=True), acc)


# -- host wrapper ---------------------------------------------------------------------------------
def plan_for(x, packed, shape: PlanShape) -> GemvPlan:
    """``shape``'s plan for these inputs on their device (the interpreter's blocks on a CPU)."""
    return gemv_plan(packed.shape[0], x.shape[1], E2M1_BITS, sm_count(x.device), interpreting(), shape, x.shape[0])


def default_shape(rows: int) -> PlanShape:
    """The plan shape for ``rows`` rows of x (the sweeps that chose each: above)."""
    return DEFAULT_M1_SHAPE if rows == 1 else FEW_ROWS_SHAPE if rows <= FEW_ROWS else MANY_ROWS_SHAPE


def default_plan(x, packed) -> GemvPlan:
    return plan_for(x, packed, default_shape(x.shape[0]))


def _int32_offsets(x, packed, block_scales) -> bool:
    """Whether every element's offset from its tensor's start fits int32 (the stepped addresses' need)."""
    def last(t):
        return sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
    return max(last(x), last(packed), last(block_scales)) < 2**31 - 2**16


def run_plan(x, packed, block_scales, global_scale, plan: GemvPlan, ptx_decode: bool | None = None) -> torch.Tensor:
    """Launch ``plan`` on already-validated inputs (``tools/bench`` sweeps plans through this).

    ``ptx_decode``: the table-lookup decode (default: whenever compiled for a GPU) or the arithmetic one.
    """
    weight_args = (packed, packed.stride(0), block_scales, block_scales.stride(0), global_scale)
    if plan.operand_decode:
        return run_tiles(_nvfp4_gemv_operand_tiles, x, packed.shape[0], weight_args, global_scale, True, plan,
                         X_SHARED=plan.x_shared)
    if plan.cuda_cores and not (x.stride(1) == 1 and x.data_ptr() % 4 == 0):  # x not readable as int32 pairs
        plan = dataclasses.replace(plan, cuda_cores=False)
    return run_tiles(_nvfp4_gemv_tiles, x, packed.shape[0], weight_args, global_scale, True, plan,
                     PTX_DECODE=plan.compiled if ptx_decode is None else ptx_decode,
                     FLOAT32_DECODE=plan.float32_decode and plan.compiled and ptx_decode is not False
                     and not plan.placed_decode, PLACED_DECODE=plan.placed_decode,
                     PREFETCH_SCALES=plan.prefetch_scales,
                     STEPPED=plan.stepped and _int32_offsets(x, packed, block_scales))


def kernel_limits(x, packed, block_scales, global_scale) -> str | None:
    """This kernel's own limits, narrower than the contract's: it reads a row's packed bytes and block scales as
    contiguous (any row stride, so a tensor-parallel slice of a packed weight is within them)."""
    for name, tensor in (("packed", packed), ("block_scales", block_scales)):
        if tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
            return f"{name}: stride(-1) = {tensor.stride(-1)}; this kernel reads each row as contiguous bytes"
    return None


def nvfp4_gemv(x, packed, block_scales, global_scale) -> torch.Tensor:
    contract.validate(x, packed, block_scales, global_scale)
    require_within_limits(kernel_limits(x, packed, block_scales, global_scale))
    return run_plan(x, packed, block_scales, global_scale, default_plan(x, packed))


def bench_variants(x, packed, block_scales, global_scale) -> dict:
    """Launch plans around the default, for ``tools/bench --variants`` to time on the device."""
    plans = plan_variants(packed.shape[0], x.shape[1], E2M1_BITS, sm_count(x.device), x.shape[0], VARIANT_SHAPES)
    variants = {label: lambda x, packed, block_scales, global_scale, plan=plan:
                run_plan(x, packed, block_scales, global_scale, plan) for label, plan in plans.items()}
    default = gemv_plan(packed.shape[0], x.shape[1], E2M1_BITS, sm_count(x.device), False, TENSOR_CORE_SHAPE,
                        x.shape[0])
    variants["tensor-core plan, arithmetic decode"] = lambda x, packed, block_scales, global_scale: run_plan(
        x, packed, block_scales, global_scale, default, ptx_decode=False)
    return variants


def bytes_moved(x, packed, block_scales, global_scale) -> int:
    """Packed weights + scales + x + y (the issue's count; the global scale's 4 bytes besides)."""
    return (packed.numel() + block_scales.numel() + x.numel() * x.element_size()
            + 2 * x.shape[0] * packed.shape[0] + global_scale.element_size())


def _bench_input(rows: int, cols: int, depth: int):
    def make(device):
        generator = torch.Generator(device=device).manual_seed(rows)
        weight = (torch.randn(cols, depth, generator=generator, device=device) * 0.02).bfloat16()
        global_scale = nvfp4_global_scale(weight)
        packed, block_scales = nvfp4_quantize(weight, global_scale)
        x = torch.randn(rows, depth, generator=generator, device=device).bfloat16()
        return {"x": x, "packed": packed, "block_scales": block_scales, "global_scale": global_scale}
    return make


# -- catalog entry --------------------------------------------------------------------------------
def params_of(x, packed, block_scales, global_scale):
    return {"M": x.shape[0], "N": packed.shape[0], "K": x.shape[1]}


CELLS = gemv_cells(NVFP4_BLOCK, "Llama-3 8B/70B, Qwen2 72B")
_TARGET_M1 = ">= 65% of copy bandwidth, packed weights + scales (stock dequantize + bf16 matmul: 0.7%, 1240 us)"
ENTRY = dataclasses.replace(gemv_entry(contract, nvfp4_gemv, params_of, CELLS, _bench_input, bytes_moved, _TARGET_M1,
                                       nvfp4_dequantize), limits=kernel_limits)
