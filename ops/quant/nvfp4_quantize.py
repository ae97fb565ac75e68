"""quant/nvfp4_quantize — bf16 to NVFP4: E2M1 codes, one E4M3 scale per 16 elements, bit for bit.

Contract (CONTRACTS.md): ``nvfp4_quantize(x bf16 [M, K], global_scale fp32 [1]) -> (packed uint8
[M, K/2], block_scales e4m3 [M, K/16])``; per 16-element block, every float32 operation IEEE
round-to-nearest-even:

    bmax = max|x|;  sf = e4m3_satfinite_rne(global_scale * (bmax / 6))
    out_scale = 0 if sf == 0 else 1 / (float(sf) * (1 / global_scale));  code = e2m1_rne(x * out_scale)

element 2j in the low nibble of byte j; bitwise parity; batch-invariant (rows are independent).

Bytes: read ``2 * M * K`` (x), write ``M * K / 2`` (codes) and ``M * K / 16`` (scales). [8192, 8192] is
168 MB, 39 us at 4.3 TB/s.

Exactness on the GPU. Triton's float32 ``a / b`` and ``1 / b`` compile to approximate division on
NVIDIA GPUs (``div.full.f32``, up to 2 ulp off), so the three divisions of the contract are
``tl.math.div_rn``; one ulp in ``bmax / 6`` moves a block scale that sits on an E4M3 tie, one ulp in
``out_scale`` moves an element that sits on an E2M1 midpoint. ``IEEE_DIVISION=False`` builds the
kernel with the plain operators: it is the negative control that the battery must reject on a GPU.
The E4M3 rounding is integer arithmetic on the float32 bits (Triton's float8 cast is not RNE under
the interpreter), and the E2M1 rounding one float32 add whose ulp is the E2M1 step: both exact on every device, and pinned
against the references value by value in ``suites/quant/test_nvfp4_quantize.py``. ``x`` is loaded as
int32 words, two bf16 bit patterns each: the interpreter's bf16 cast mangles subnormals, which the
battery found on the tiny-amax inputs of the strategy, and a shift (even element) or a mask (odd) is one
instruction per element. On a GPU ``bmax / 6`` is a product corrected by two FMAs, proved to be the IEEE
quotient for every bf16 ``bmax`` (the kernel says how); the interpreter, whose ``tl.fma`` rounds twice,
keeps ``div_rn`` there.

Speed. The kernel is bound by instruction issue on the integer ALU, not by memory, so the launch plan
names an ``E2M1Path``: ways of computing the same codes with fewer ALU instructions (the default takes
513 SASS instructions per thread on an 8 x 512 tile where the first version took 910). The measurements
that chose it, per path and tile, are in docs/ops/nvfp4_quantize.md.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, BenchCase, Cell, Entry, Parity, Span
from ops.triton_backend import interpreting
from references.formats.nvfp4 import NVFP4_BLOCK, nvfp4_global_scale
from references.quant import nvfp4_quantize as contract


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class E2M1Path:
    """How the kernel computes the codes and block scales. Every path gives the same bits (the quant suite
    runs each against the default); they differ in instructions on the integer ALU, the kernel's bound.
    The GPU-only options are inline PTX; under the interpreter their twins run instead."""
    lean_rounding: bool = False         # the rounding by float ops (``_e2m1_index_at_bit_22``), one clamp
    #                                     per element; else ``_e2m1_satfinite_rne`` per element
    placement_by_imad_hi: bool = False  # lean: nibbles placed by IMAD.HI (FMA pipe) rather than LEA.HI (ALU)
    signs_by_prmt: bool = False         # lean: sign bits gathered 8 at a time by PRMT (GPU)
    scales_by_cvt: bool = False         # block scales by ``cvt.rn.satfinite.e4m3x2`` (GPU)
    block_max_by_bf16x2: bool = False   # block max by ``max.xorsign.abs.bf16x2`` (GPU)

    def __post_init__(self):
        if (self.placement_by_imad_hi or self.signs_by_prmt) and not self.lean_rounding:
            raise ValueError(f"{self}: placement_by_imad_hi and signs_by_prmt are options of lean_rounding")
        if self.placement_by_imad_hi and self.signs_by_prmt:
            raise ValueError(f"{self}: signs_by_prmt places the nibbles by shifts; placement_by_imad_hi does not apply")

    def label(self) -> str:
        options = (("lean", self.lean_rounding), ("IMAD.HI placement", self.placement_by_imad_hi),
                   ("PRMT signs", self.signs_by_prmt), ("cvt scales", self.scales_by_cvt),
                   ("bf16x2 max", self.block_max_by_bf16x2))
        return " + ".join(name for name, on in options if on) or "per-element"


PER_ELEMENT = E2M1Path()
LEAN = E2M1Path(lean_rounding=True)
# H200: 45.4 us on [8192, 8192], 89% of copy (docs/ops/nvfp4_quantize.md)
DEFAULT_PATH = E2M1Path(lean_rounding=True, signs_by_prmt=True, scales_by_cvt=True, block_max_by_bf16x2=True)


@dataclasses.dataclass(frozen=True)
class TileShape:
    """The tunable half of a plan, independent of the input: what ``bench_variants`` sweeps."""
    elements: int    # elements per program: short rows are stacked until the tile is full
    max_blocks: int  # 16-element blocks per program row, at most
    num_warps: int


DEFAULT_GPU_TILE = TileShape(elements=8192, max_blocks=64, num_warps=4)  # 8 x 1024 elements, 64 per thread
# The interpreter pays about 3 ms per program whatever its size, so it takes 8x larger tiles.
INTERPRETER_TILE_ELEMENTS = 65536


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    block_rows: int   # rows per program
    blocks: int       # 16-element blocks per program along a row
    num_warps: int
    path: E2M1Path


def launch_plan(rows: int, blocks_per_row: int, on_interpreter: bool, tile: TileShape = DEFAULT_GPU_TILE,
                path: E2M1Path = DEFAULT_PATH) -> LaunchPlan:
    elements = INTERPRETER_TILE_ELEMENTS if on_interpreter else tile.elements
    blocks = min(triton.next_power_of_2(blocks_per_row), tile.max_blocks)
    # short rows are stacked until the tile is full, so K = 16 still moves 8 KB per program
    block_rows = max(1, min(triton.next_power_of_2(rows), elements // (NVFP4_BLOCK * blocks)))
    return LaunchPlan(block_rows=block_rows, blocks=blocks, num_warps=tile.num_warps, path=path)


# Tiles of the variants: 16 to 64 elements (one to four whole blocks) per thread.
VARIANT_TILES = tuple(TileShape(elements=elements, max_blocks=max_blocks, num_warps=num_warps)
                      for elements, num_warps in ((2048, 2), (2048, 4), (4096, 4), (4096, 8), (8192, 4), (8192, 8),
                                                  (16384, 8))
                      for max_blocks in (32, 64))
# the per-element path's fastest tiles on the H200, for comparison
PER_ELEMENT_TILES = (TileShape(elements=2048, max_blocks=64, num_warps=2),
                     TileShape(elements=4096, max_blocks=64, num_warps=8),
                     TileShape(elements=4096, max_blocks=32, num_warps=8),
                     TileShape(elements=4096, max_blocks=32, num_warps=4))
LEAN_PRMT_CVT = E2M1Path(lean_rounding=True, signs_by_prmt=True, scales_by_cvt=True)
# one option at a time against LEAN or LEAN_PRMT_CVT, at 32 and 64 elements per thread
ONE_CHANGE_PATHS = (E2M1Path(lean_rounding=True, placement_by_imad_hi=True),
                    E2M1Path(lean_rounding=True, scales_by_cvt=True),
                    E2M1Path(lean_rounding=True, signs_by_prmt=True),
                    DEFAULT_PATH)
ONE_CHANGE_TILES = (TileShape(elements=4096, max_blocks=32, num_warps=4),
                    TileShape(elements=8192, max_blocks=64, num_warps=4))


def bench_variants(x: torch.Tensor, global_scale: torch.Tensor) -> dict:
    """Launch plans around the default, for ``tools/bench --variants`` to time on the device: the best
    plans of the per-element E2M1 path for comparison, then the lean paths on every tile."""
    variants = {}

    def add(tile: TileShape, path: E2M1Path):
        plan = launch_plan(x.shape[0], x.shape[1] // NVFP4_BLOCK, False, tile, path)
        label = f"{plan.block_rows}x{16 * plan.blocks} tile {tile.num_warps}w {path.label()}"
        variants[label] = lambda x, global_scale, plan=plan: run_plan(x, global_scale, plan)

    for tile in PER_ELEMENT_TILES:
        add(tile, PER_ELEMENT)
    for path in (LEAN, LEAN_PRMT_CVT):
        for tile in VARIANT_TILES:
            add(tile, path)
    for path in ONE_CHANGE_PATHS:
        for tile in ONE_CHANGE_TILES:
            add(tile, path)
    return variants


# -- kernel ---------------------------------------------------------------------------------------
ONE_SIXTH = tl.constexpr(0.1666666716337204)  # fl(1/6), float32 0x3E2AAAAB
# The interpreter's tl.fma multiplies and adds in float32, two roundings: there bmax / 6 stays div_rn.
@triton.jit
def _e4m3_satfinite_rne(scale):
    """(code, value) of float32 ``scale`` rounded to E4M3: nearest, ties to even, saturating at 448.

    Finite input only (the contract's scales are); the code is an int32 in 0..255, the value its float32.
    """
    sign = (scale.to(tl.int32, bitcast=True) >> 24) & 0x80
    magnitude = tl.minimum(tl.abs(scale), 448.0)
    bits = magnitude.to(tl.int32, bitcast=True)
    # Normal range (>= 2**-6): keep 3 of the 23 mantissa bits, adding just under half an E4M3 ulp plus
    # the kept lowest bit (ties to even); a carry into the exponent is the right answer.
    rounded = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -0x100000
    normal_code = (rounded >> 20) - (120 << 3)  # float32 exponent bias 127 -> E4M3 bias 7
    # Subnormal range (< 2**-6): multiples of 2**-9. magnitude * 512 < 8 is exact, and adding 2**23
    # rounds it to an integer, ties to even; 8 steps is 2**-6, code 8, the smallest normal.
    steps = (magnitude * 512.0 + 8388608.0) - 8388608.0
    is_normal = magnitude >= 0.015625
    code = tl.where(is_normal, normal_code, steps.to(tl.int32)) | sign
    value = tl.where(is_normal, rounded.to(tl.float32, bitcast=True), steps * 0.001953125)
    return code, tl.where(sign != 0, -value, value)


@triton.jit
def _e4m3_satfinite_rne_cvt(scale):
    """``_e4m3_satfinite_rne`` by the sm_89+ conversion instructions: 3 instructions for ~14.

    ``cvt.rn.satfinite.e4m3x2.f32`` rounds to nearest even and saturates finite overflow and inf to
    ±448 (PTX ISA: .satfinite), which is the contract's clamp to ±448 followed by RNE (values in (448,
    464) round to 448 either way); subnormal E4M3 results are produced, not flushed. The code is the low
    byte (operand b); ``cvt.rn.f16x2.e4m3x2`` widens it exactly (every E4M3 value is an f16), and f16 to
    f32 is exact. Finite input (the contract's scales are); the integer twin runs on the interpreter.
    """
    return tl.inline_asm_elementwise(
        """{
        .reg .b16 code, low, high;
        .reg .b32 widened;
        cvt.rn.satfinite.e4m3x2.f32 code, 0f00000000, $2;
        cvt.rn.f16x2.e4m3x2 widened, code;
        mov.b32 {low, high}, widened;
        cvt.f32.f16 $1, low;
        cvt.u32.u16 $0, code;
        }""",
        "=r,=r,r",
        [scale],
        dtype=(tl.int32, tl.float32),
        is_pure=True,
        pack=1,
    )


@triton.jit
def _e2m1_satfinite_rne(y, floor):
    """E2M1 code (int32, 0..15) of float32 ``y`` whose magnitude is first raised to ``floor`` (0 or 6):
    ties to the even index, saturating at 6, sign bit kept. ``y`` must not be NaN (see the kernel).

    Rounding to E2M1 is rounding to one mantissa bit in the binade of |y|, or to steps of 0.5 below 1:
    adding 2**(e + 22), e = max(exponent, 0), leaves exactly that step as the ulp of the sum, and the
    float32 add rounds to nearest, ties to even; the sum's low bits count the steps k (0..4 below 2, 2..4
    below 4, 2..3 up to 6; a k that reaches the next binade is that binade's first index), and the index
    is 2e + k. Magnitudes are clamped to 6 first: everything above rounds to 6 (index 7, e = 2, k = 3),
    so no index needs saturating. 11 instructions with the scaling multiply (SASS for sm_90, Triton 3.6).
    """
    magnitude = tl.minimum(tl.maximum(tl.abs(y), floor), 6.0)
    binade = tl.maximum(magnitude.to(tl.int32, bitcast=True) & 0x7F800000, 0x3F800000)  # 2**e, e >= 0
    power = binade + (22 << 23)  # 2**(e + 22)
    steps = (magnitude + power.to(tl.float32, bitcast=True)).to(tl.int32, bitcast=True) - power
    index = steps + ((binade >> 22) - 254)  # (binade >> 22) - 254 = 2e
    return index | ((y.to(tl.int32, bitcast=True) >> 28) & 0x8)


TWO_POW_MINUS_104 = tl.constexpr(4.930380657631324e-32)  # 2**(22 - 126), float32 0x0B800000
TWO_POW_MINUS_126 = tl.constexpr(1.1754943508222875e-38)  # float32 0x00800000, the smallest normal
TWO_POW_126 = tl.constexpr(8.507059173023462e37)


@triton.jit
def _e2m1_index_at_bit_22(magnitude, FMA_ROUNDS_ONCE: tl.constexpr):
    """E2M1 index (0..7) of float32 ``magnitude`` in [0, 6], ties to the even index, as the uint32
    ``index << 22``: the rounding of ``_e2m1_satfinite_rne`` in 5 instructions, 2 of them on the ALU.

    With power = 2**(max(e, 0) + 22), e the exponent of the magnitude, fl(magnitude + power) - power is
    the E2M1 value v (the step 2**(e-1), or 0.5 below 1, is the ulp of the sum: the rounding of
    ``_e2m1_satfinite_rne``), and v * 2**-126 is exact in float32 with the bits ``index << 22``: E2M1's
    exponent bias 1 against float32's 127 and its subnormal limit 1 against 2**-126 line up, 0.5 ->
    0x00400000, 1 -> 0x00800000, 1.5 -> 0x00C00000, ..., 6 -> 0x01C00000 (no .ftz in this kernel). All of
    it is done scaled by 2**-126: scaled_power = power * 2**-126 is the exponent field of magnitude *
    2**-104 raised to that of 2**-104 (an exact scaling; smaller magnitudes give a subnormal or zero
    field, floored the same way); the FMA magnitude * 2**-126 + scaled_power rounds the exact
    (magnitude + power) * 2**-126 once, at the normal magnitude 2**(e - 104), so it is fl(magnitude +
    power) * 2**-126; subtracting scaled_power is exact (Sterbenz: both within a factor 2). The
    interpreter's tl.fma rounds the subnormal product first: there (FMA_ROUNDS_ONCE=False) the sum is
    taken unscaled and scaled after, the same value in two exact steps more.
    """
    scaled_bits = (magnitude * TWO_POW_MINUS_104).to(tl.int32, bitcast=True)
    scaled_power = tl.maximum(scaled_bits & 0x7F800000, 0x0B800000).to(tl.float32, bitcast=True)
    if FMA_ROUNDS_ONCE:
        rounded = tl.fma(magnitude, TWO_POW_MINUS_126, scaled_power)
    else:
        rounded = (magnitude + scaled_power * TWO_POW_126) * TWO_POW_MINUS_126
    return (rounded - scaled_power).to(tl.uint32, bitcast=True)


@triton.jit
def _nibble_at_bit_28(index22, y):
    """uint32 ``code << 28`` (code = index | sign << 3) from ``index << 22`` and the float32 ``y`` whose
    sign the code takes (one mask and one IMAD; ``y * 0`` would be NaN for y = ±inf, which huge global
    scales reach)."""
    return index22 * 64 + (y.to(tl.uint32, bitcast=True) & 0x80000000)


@triton.jit
def _max_magnitude_bf16x2(a, b):
    """Per 16-bit half: the larger magnitude of two bf16 (int32 words of two), its sign the XOR of theirs.

    ``max.xorsign.abs.bf16x2`` (sm_86+): the max of bf16 values is one of them, exact, subnormals kept;
    the garbage sign is dropped by the caller's |.|. Finite input (the contract's x)."""
    return tl.inline_asm_elementwise("max.xorsign.abs.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def _block_max_bf16x2(words):
    """max |x| of each block from its words ([blocks, rows, 2, 4] int32, two bf16 each) as float32: 7 bf16x2
    maxima and one float32 max for 16 elements, where the float32 path takes 15 FMNMX (``block_max_by_bf16x2``)."""
    shape: tl.constexpr = [words.shape[0], words.shape[1], 2, 2, 2]  # j = 2 a + b: split takes b, then a
    words_02, words_13 = tl.split(tl.reshape(words, shape))
    words_0, words_2 = tl.split(words_02)
    words_1, words_3 = tl.split(words_13)
    halves = _max_magnitude_bf16x2(_max_magnitude_bf16x2(words_0, words_1), _max_magnitude_bf16x2(words_2, words_3))
    half_0, half_1 = tl.split(halves)
    pair = _max_magnitude_bf16x2(half_0, half_1)
    low = (pair << 16).to(tl.float32, bitcast=True)
    high = (pair & -65536).to(tl.float32, bitcast=True)
    return tl.maximum(tl.abs(low), tl.abs(high))


@triton.jit
def _sign_bytes(y0, y1, y2, y3):
    """PRMT: byte k = 0xFF where ``y_k`` (float32, as int32) is negative, else 0: 3 instructions for 4."""
    return tl.inline_asm_elementwise(
        """{
        .reg .b32 first, second;
        prmt.b32 first, $1, $2, 0x00FB;
        prmt.b32 second, $3, $4, 0xFB00;
        prmt.b32 $0, first, second, 0x7610;
        }""",
        "=r,r,r,r,r",
        [y0, y1, y2, y3],
        dtype=tl.int32,
        is_pure=True,
        pack=1,
    )


@triton.jit
def _sign_bits_of_nibbles(y_low, y_high, ON_GPU: tl.constexpr):
    """uint32 [..., 2] with the sign of ``y_low[..., j]`` at bit 8j + 3 and of ``y_high[..., j]`` at bit
    8j + 7 (float32 [..., 2, 4]): the code's sign bits of one word of 8 nibbles. On a GPU by PRMT
    (``_sign_bytes``) and 2 LOP3 per word; on the interpreter by shifts."""
    if ON_GPU:
        shape: tl.constexpr = [y_low.shape[0], y_low.shape[1], 2, 2, 2]  # j = 2 a + b: split takes b, then a
        low_02, low_13 = tl.split(tl.reshape(y_low.to(tl.int32, bitcast=True), shape))
        low_0, low_2 = tl.split(low_02)
        low_1, low_3 = tl.split(low_13)
        high_02, high_13 = tl.split(tl.reshape(y_high.to(tl.int32, bitcast=True), shape))
        high_0, high_2 = tl.split(high_02)
        high_1, high_3 = tl.split(high_13)
        low_signs = _sign_bytes(low_0, low_1, low_2, low_3)
        high_signs = _sign_bytes(high_0, high_1, high_2, high_3)
        signs = (low_signs & 0x08080808) | (high_signs & -0x7F7F7F80)  # -0x7F7F7F80 = 0x80808080
        return signs.to(tl.uint32, bitcast=True)
    else:
        j = tl.arange(0, 4)[None, None, None, :]
        low_sign = (y_low.to(tl.uint32, bitcast=True) >> 31) << (8 * j + 3).to(tl.uint32)
        high_sign = (y_high.to(tl.uint32, bitcast=True) >> 31) << (8 * j + 7).to(tl.uint32)
        return tl.sum(low_sign | high_sign, axis=3)


# The sizes change from call to call and gain nothing from specialization (each distinct one is a
# compile); the row stride stays specialized: its divisibility by 16 is what lets the loads vectorize.
@triton.jit(do_not_specialize=["rows", "blocks_per_row", "place_multiplier"])
def _quantize_tiles(
    # input: x as int32 words, two bf16 each (element 2j in the low half), rows of contiguous words
    x_words_ptr, stride_xm, global_scale_ptr, rows, blocks_per_row,
    # outputs
    packed_ptr, stride_pm, scales_ptr, stride_sm,
    # 256, a runtime value so that ptxas keeps the placement multiplications (PLACEMENT_BY_IMAD_HI) as
    # IMAD.HI on the FMA pipe instead of turning them into shift-adds (LEA.HI) on the integer ALU
    place_multiplier,
    # meta: the plan's E2M1Path, option by option
    BLOCK_ROWS: tl.constexpr, BLOCKS: tl.constexpr, IEEE_DIVISION: tl.constexpr, FUSED_QUOTIENT: tl.constexpr,
    LEAN_ROUNDING: tl.constexpr, PLACEMENT_BY_IMAD_HI: tl.constexpr, SIGNS_BY_PRMT: tl.constexpr,
    SCALES_BY_CVT: tl.constexpr, BLOCK_MAX_BY_BF16X2: tl.constexpr,
):
    # The tile is [blocks, rows, half, 4] words: word (b, r, h, j) holds elements 16 b + 8 h + 2 j and the
    # next of row r. Triton spreads a warp's lanes over the leading dimension after the 4 contiguous
    # words, so with the halves behind the blocks each thread holds whole blocks (two 16-byte loads): the
    # block max needs no shuffle and each block's scale is computed once, not by both threads of a pair.
    block = tl.program_id(1) * BLOCKS + tl.arange(0, BLOCKS)[:, None]
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)[None, :]
    live = (block < blocks_per_row) & (row < rows)  # [blocks, rows]; whole blocks: K % 16 == 0
    half = tl.arange(0, 2)[None, None, :, None]
    row_offset = row.to(tl.int64)[:, :, None, None]
    word = (block[:, :, None, None] * 8 + half * 4 + tl.arange(0, 4)[None, None, None, :]).to(tl.int64)
    words = tl.load(x_words_ptr + row_offset * stride_xm + word, mask=live[:, :, None, None], other=0)
    # bf16 bits as the high half of a float32: exact, subnormals included (the interpreter's bf16 cast
    # mangles subnormals, which the battery found on the tiny-amax inputs of the strategy)
    even = (words << 16).to(tl.float32, bitcast=True)  # [blocks, rows, 2, 4]
    odd = (words & -65536).to(tl.float32, bitcast=True)

    if BLOCK_MAX_BY_BF16X2 and FUSED_QUOTIENT:  # on a GPU only: the interpreter cannot run PTX
        block_max = _block_max_bf16x2(words)
    else:
        block_max = tl.max(tl.max(tl.maximum(tl.abs(even), tl.abs(odd)), axis=3), axis=2)
    global_scale = tl.load(global_scale_ptr)
    if IEEE_DIVISION and FUSED_QUOTIENT:
        # fl(bmax / 6) as fl(bmax * fl(1/6)) corrected once by its exact residual: the IEEE quotient for
        # every bf16 bmax (all 32639 positive finite ones tried exactly in test_nvfp4_quantize.py), in 3
        # instructions where div_rn's are 10 plus a range check and a branch to a slow path.
        quotient = block_max * ONE_SIXTH
        quotient = tl.fma(tl.fma(quotient, -6.0, block_max), ONE_SIXTH, quotient)
        scale = global_scale * quotient
        decode_scale = tl.math.div_rn(1.0, global_scale)
    elif IEEE_DIVISION:
        scale = global_scale * tl.math.div_rn(block_max, 6.0)
        decode_scale = tl.math.div_rn(1.0, global_scale)
    else:
        scale = global_scale * (block_max / 6.0)
        decode_scale = 1.0 / global_scale
    if SCALES_BY_CVT and FUSED_QUOTIENT:  # on a GPU only: the interpreter cannot run PTX
        scale_code, scale_value = _e4m3_satfinite_rne_cvt(scale)
    else:
        scale_code, scale_value = _e4m3_satfinite_rne(scale)
    if IEEE_DIVISION:
        reciprocal = tl.math.div_rn(1.0, scale_value * decode_scale)
    else:
        reciprocal = 1.0 / (scale_value * decode_scale)
    out_scale = tl.where(scale_value == 0.0, 0.0, reciprocal)
    # Where out_scale overflows to inf (a tiny block scale under a huge global scale) the contract's
    # x * inf is ±inf, code 7 with the sign, and 0 * inf is NaN, code 7. Such blocks are scaled by 1 and
    # floored at magnitude 6 instead, and +0 added: -0 + +0 = +0, so every code comes out the contract's
    # without a NaN test per element. Elsewhere the -0 added changes nothing, -0 and inf included.
    overflowed = out_scale == float("inf")
    multiplier = tl.where(overflowed, 1.0, out_scale)[:, :, None, None]
    # -0.0 from its bits: a -0.0 literal reaches the PTX as +0.0 (Triton 3.6)
    addend = tl.where(overflowed, 0, -2147483648).to(tl.float32, bitcast=True)[:, :, None, None]
    floor = tl.where(overflowed, 6.0, 0.0)[:, :, None, None]
    if SIGNS_BY_PRMT:
        # the lean rounding; the signs gathered from the float32 sign bits 8 at a time by PRMT (sign
        # replicating byte selects) instead of a mask and an IMAD per element
        y_low = tl.fma(even, multiplier, addend)
        y_high = tl.fma(odd, multiplier, addend)
        low = _e2m1_index_at_bit_22(tl.minimum(tl.abs(y_low), 6.0), FUSED_QUOTIENT)
        high = _e2m1_index_at_bit_22(tl.minimum(tl.abs(y_high), 6.0), FUSED_QUOTIENT)
        pair = low + high * 16  # the byte's two 3-bit indices at bits 22..24 and 26..28
        j = tl.arange(0, 4)[None, None, None, :]
        placed = tl.where(j == 3, pair << 2, pair >> (22 - 8 * tl.minimum(j, 2)).to(tl.uint32))
        packed_words = tl.sum(placed, axis=3) | _sign_bits_of_nibbles(y_low, y_high, FUSED_QUOTIENT)
        packed_words |= tl.where(overflowed, 0x77777777, 0).to(tl.uint32)[:, :, None]
        half_word = (block[:, :, None] * 2 + tl.arange(0, 2)[None, None, :]).to(tl.int64)
        tl.store(packed_ptr + row.to(tl.int64)[:, :, None] * stride_pm + half_word,
                 packed_words.to(tl.int32, bitcast=True), mask=live[:, :, None])
    elif LEAN_ROUNDING:
        # The same codes with fewer instructions on the integer ALU (LOP3, SHF, IADD3, LEA, IMNMX, FMNMX:
        # a warp instruction every other clock): one clamp per element, no floor (y = x + 0 in overflowed
        # blocks, finite, so its sign is the contract's: -0 gives +0, the NaN's code 7; the magnitudes
        # are then ORed with index 7 per word below), the rounding by float ops (_e2m1_index_at_bit_22),
        # the sign by a mask and an IMAD, the placement by LEA.HI. Bitwise the same as the branch below:
        # test_lean_* and test_every_bench_variant_is_bitwise_the_default in the quant suite.
        y_low = tl.fma(even, multiplier, addend)
        y_high = tl.fma(odd, multiplier, addend)
        low = _nibble_at_bit_28(_e2m1_index_at_bit_22(tl.minimum(tl.abs(y_low), 6.0), FUSED_QUOTIENT), y_low)
        high = _nibble_at_bit_28(_e2m1_index_at_bit_22(tl.minimum(tl.abs(y_high), 6.0), FUSED_QUOTIENT), y_high)
        # byte j of the pair (low nibble element 2j) at bits 24..31, then moved to bits 8j of the word
        if PLACEMENT_BY_IMAD_HI:
            shift_8 = place_multiplier.to(tl.uint32)
        else:  # constant: ptxas makes each umulhi-and-add one LEA.HI (ALU) where IMAD.HI needs a zeroing move
            shift_8 = tl.full([], 256, tl.uint32)
        shift_16 = shift_8 * shift_8
        shift_24 = shift_16 * shift_8
        pair = tl.umulhi(low, shift_24 * 16) + high
        j = tl.arange(0, 4)[None, None, None, :]
        multiplier_j = tl.where(j == 0, shift_8, tl.where(j == 1, shift_16, shift_24))
        placed = tl.where(j == 3, pair, tl.umulhi(pair, multiplier_j))
        packed_words = tl.sum(placed, axis=3)  # [blocks, rows, 2]: disjoint bytes, the sum is an OR
        packed_words |= tl.where(overflowed, 0x77777777, 0).to(tl.uint32)[:, :, None]
        half_word = (block[:, :, None] * 2 + tl.arange(0, 2)[None, None, :]).to(tl.int64)
        tl.store(packed_ptr + row.to(tl.int64)[:, :, None] * stride_pm + half_word,
                 packed_words.to(tl.int32, bitcast=True), mask=live[:, :, None])
    else:
        low = _e2m1_satfinite_rne(tl.fma(even, multiplier, addend), floor)
        high = _e2m1_satfinite_rne(tl.fma(odd, multiplier, addend), floor)
        # element 2j -> low nibble of byte j: one byte per word, eight contiguous bytes per block
        packed = tl.reshape((low | (high << 4)).to(tl.uint8), [BLOCKS, BLOCK_ROWS, 8])
        byte = (block[:, :, None] * 8 + tl.arange(0, 8)[None, None, :]).to(tl.int64)
        tl.store(packed_ptr + row.to(tl.int64)[:, :, None] * stride_pm + byte, packed, mask=live[:, :, None])
    tl.store(scales_ptr + row.to(tl.int64) * stride_sm + block, scale_code.to(tl.uint8), mask=live)


# -- host wrapper ---------------------------------------------------------------------------------
def _as_words(x: torch.Tensor) -> torch.Tensor:
    """``x`` as int32 ``[M, K/2]``, two bf16 per word; a row layout that does not split into whole words
    (odd row stride or offset, non-contiguous columns) is copied first."""
    whole_words = x.stride(1) == 1 and x.stride(0) % 2 == 0 and x.storage_offset() % 2 == 0
    # not x.contiguous(): a one-row view with an odd row stride counts as contiguous and comes back as is
    dense = x if whole_words else torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)
    return dense.view(torch.int32)


def run_plan(x: torch.Tensor, global_scale: torch.Tensor, plan: LaunchPlan, ieee_division: bool = True):
    """Launch ``plan`` on already-validated inputs (``ieee_division=False`` is the negative control)."""
    rows, cols = x.shape
    packed = torch.empty(rows, cols // 2, dtype=torch.uint8, device=x.device)
    block_scales = torch.empty(rows, cols // NVFP4_BLOCK, dtype=torch.float8_e4m3fn, device=x.device)
    if rows == 0 or cols == 0:
        return packed, block_scales
    blocks_per_row = cols // NVFP4_BLOCK
    grid = (triton.cdiv(rows, plan.block_rows), triton.cdiv(blocks_per_row, plan.blocks))
    words = _as_words(x)
    # the lean path stores whole 32-bit words of codes: K / 2 bytes per row is a multiple of 8
    out = packed.view(torch.int32) if plan.path.lean_rounding else packed
    _quantize_tiles[grid](
        words, words.stride(0), global_scale, rows, blocks_per_row,
        out, out.stride(0), block_scales.view(torch.uint8), block_scales.stride(0), 256,
        BLOCK_ROWS=plan.block_rows, BLOCKS=plan.blocks, IEEE_DIVISION=ieee_division,
        FUSED_QUOTIENT=not interpreting(), LEAN_ROUNDING=plan.path.lean_rounding,
        PLACEMENT_BY_IMAD_HI=plan.path.placement_by_imad_hi, SIGNS_BY_PRMT=plan.path.signs_by_prmt,
        SCALES_BY_CVT=plan.path.scales_by_cvt, BLOCK_MAX_BY_BF16X2=plan.path.block_max_by_bf16x2,
        num_warps=plan.num_warps,
    )
    return packed, block_scales


def nvfp4_quantize(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    contract.validate(x, global_scale)
    plan = launch_plan(x.shape[0], x.shape[1] // NVFP4_BLOCK, interpreting())
    return run_plan(x, global_scale, plan)


def bytes_moved(x: torch.Tensor, global_scale: torch.Tensor) -> int:
    rows, cols = x.shape
    return rows * cols * x.element_size() + rows * cols // 2 + rows * cols // NVFP4_BLOCK + global_scale.element_size()


def _bench_input(rows: int, cols: int):
    def make(device):
        x = torch.randn(rows, cols, device=device).to(torch.bfloat16)
        return {"x": x, "global_scale": nvfp4_global_scale(x)}
    return make


# -- catalog entry --------------------------------------------------------------------------------
def params_of(x, global_scale):
    return {"M": x.shape[0], "K": x.shape[1]}


CELLS = (
    Cell("decode_activations", "per-token activation quantization before an NVFP4 GEMM/GEMV in decode: M 1..16",
         {"M": Span(1, 16), "K": Span(16, 16384)}),
    Cell("prefill_and_weights", "prefill activations and offline weight quantization: M 17..4096 rows",
         {"M": Span(17, 4096), "K": Span(16, 16384)}),
)

ENTRY = Entry.of_contract(
    contract,
    kernel=nvfp4_quantize,
    parity=Parity.BITWISE,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    batch_invariant=True,
    batch_args=("x",),
    bench=(
        BenchCase("bf16 [8192, 8192]", _bench_input(8192, 8192), bytes_moved, ">= 70% of copy bandwidth"),
    ),
)
