"""attention/paged_decode — one decode step of grouped-query attention over a paged KV cache.

Contract (CONTRACTS.md): ``paged_decode(q[B, Hq, D], k_cache[P, S, Hkv, D], v_cache, page_table[B, M],
seq_lens[B], sm_scale, kv_scale=1.0, page_select=None) -> (o bf16[B, Hq, D], lse fp32[B, Hq])``:
softmax attention of each row's query over its *attended set* — tokens below ``seq_lens[b]`` on valid
(``>= 0``) pages, and, with ``page_select[B, T]``, only on the selected logical pages (duplicates once,
out-of-range entries ignored); natural-log ``lse``; an empty set gives ``o = 0``, ``lse = -inf``;
bf16 or e4m3 caches (element = ``float(x) * kv_scale``); band parity; batch-invariant.

Bytes: read the attended K and V (``2 * n_b * Hkv * D * itemsize`` per row: the whole cost), q
(``2 * B * Hq * D``), the page table or selection; write o (``2 * B * Hq * D``) and lse
(``4 * B * Hq``); plus split partials written and read once (``B * Hq * splits * (D + 3) * 4``, 0.8%
of the bf16 KV bytes at the bench shape).  B=64, L=8192, Hkv=8, D=128 in bf16 is 2.15 GB of K and V: 500 us
at the H200's 4.3 TB/s.

Split-K ("flash-decoding"): one program per (row, KV head, split) streams its split's tokens tile by
tile with an online softmax, and serves all G query heads of the KV head at once (a G x BLOCK_N
tensor-core dot, G padded to a power of two, no exp computed on the padding), so each K/V tile is
read once per group.  A second kernel merges a
row's splits by their log-sum-exp.  What makes it right:

- Batch invariance: a split is a fixed number of token positions (``LaunchPlan.split_tokens``), chosen
  from the head dim and the cache dtype only — never from B — so a row's partition, and so its bits,
  are the same alone or in any batch.  The grid covers the table's capacity (``M * S`` positions, or ``T * S`` sparse);
  splits past a row's length write nothing and the merge never reads them: no host sync, and the same
  launch replays in a CUDA graph whatever the metadata.
- Invalid memory is never loaded: a slot is read only when its token is below ``seq_lens``, its page
  is ``>= 0`` (and inside the pool), and, sparse, its entry counts; masked loads give 0, and the
  masked scores are set to -inf before the running max, so NaN garbage cannot reach a reduction.
- Overflow: every exp is taken relative to the running max (``exp(s - m)``, ``m`` = -inf handled),
  in float64 from the subtraction on (libdevice's, or, e4m3's plan, ``_exp_float64_short``: 2^-30
  relative, no branches), or in fp32 by ``_exp_difference``: the exact
  difference, Cody-Waite, and the exp's own rounding carried into the float64 ``l`` — the GPU's fast
  fp32 exp cost lse a full ULP.
- Precision: ``q . k`` multiplies exactly and accumulates in fp32: bf16 caches on bf16 tensor cores;
  e4m3 caches widened to fp16 (exact, one instruction per two elements) against q scaled per head by a
  power of two into fp16's range (``_query_in_fp16``), the scale undone on the scores.  ``p`` is
  split into 16-bit ``hi + lo`` halves so ``p @ v`` keeps ~16 bits of p (bf16) or ~22 (fp16, with an
  absolute error under 2^-25 for p below fp16's normal range), or (e4m3's plan) one fp16 ``2^15 p``:
  11 bits above 2^-29, where the stock op's bf16 p keeps 8;
  ``l`` (the denominator, hence ``lse``) is accumulated in float64, and the merge runs in float64 and
  rounds o and lse once.
- Sparse duplicates: ``page_select`` is sorted per row on the device; an entry counts when it is in
  ``0..M-1`` and differs from its sorted predecessor (see ``references/attention/paged_decode.py``).
  A small kernel resolves each sorted entry to its physical page and live slots once per row
  (``_resolve_selection``), so the decode's sparse tiles read one level of metadata, like dense.
"""
from __future__ import annotations

import dataclasses
import enum

import torch
import triton
import triton.language as tl

from ops.catalog import Arch, BenchCase, Cell, Entry, OneOf, Parity, Span
from ops.triton_backend import interpreting
from ops.triton_masks import block_and
from references.attention import paged_decode as contract
from references.validation import require_within_limits


# -- launch plan ----------------------------------------------------------------------------------
class Exp(enum.Enum):
    """How ``p = exp(s - m)`` is computed; each keeps ``lse`` within the band by its own derivation."""
    FLOAT64_LIBDEVICE = "float64 libdevice"  # float64 from the subtraction on
    FLOAT64_SHORT = "float64 short"          # float64 by ``_exp_float64_short``: 8 DFMAs, no branches
    FP32_CODY_WAITE = "fp32 Cody-Waite"      # fp32 ``_exp_difference``, its rounding carried into float64 l


class POperand(enum.Enum):
    """How ``p`` meets V on the 16-bit tensor cores."""
    HI_LO_HALVES = "hi + lo halves"  # two 16-bit halves: ~16 bits of p (bf16) or ~22 (fp16)
    FP16_SCALED = "one fp16 2^15 p"  # e4m3 caches only: 11 bits for every p above 2^-29


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    block_n: int       # token slots per K/V tile
    split_tokens: int  # token positions per program: a multiple of block_n, never a function of B
    num_warps: int
    num_stages: int
    max_registers: int | None = None  # ptxas cap per thread (None: Triton's choice)
    # The G query heads of a group fill the dot's rows, padded to a power of two and to at least this
    # many (Triton 3.6 takes M >= 1 and pads inside the m16n8k16 instruction).  Either way no exp is
    # computed past the group's power of two (``computed`` in the kernel); 16 rows keep q's fragments
    # whole, fewer duplicate them into the padded rows each tile (IMAD.MOV, ptxas sm_90).
    min_dot_rows: int = 16
    exp: Exp = Exp.FLOAT64_LIBDEVICE
    p_operand: POperand = POperand.HI_LO_HALVES
    # e4m3 V -> fp16 by inline ``cvt.rn.f16x2.e4m3x2`` where it was loaded (``_e4m3_to_fp16``; the
    # interpreter runs its twin): no per-element select and repacking
    convert_ptx: bool = False
    lazy_rescale: bool = False  # rescale l and acc only in tiles where a row's max moved (the same bits)


def launch_plan(head_dim: int, cache_dtype: torch.dtype) -> LaunchPlan:
    if interpreting():
        # The interpreter pays per op, not per element (~20 ms for a two-tile program here): wide
        # tiles, and splits of 128 positions so the CPU strategy's rows (<= 256 positions) still span
        # two splits of two tiles, through both the online rescale and the merge.
        plan = LaunchPlan(block_n=64, split_tokens=128, num_warps=4, num_stages=1)
        e4m3 = {knob: value for knob, value in E4M3_PLAN.items() if knob not in ("num_stages", "split_tokens")}
        return plan if cache_dtype != torch.float8_e4m3fn else dataclasses.replace(plan, **e4m3)
    # Tiles of 16 KB of bf16 K (128 x 64, 64 x 128, 32 x 256 tokens x D), moved by cp.async into a
    # 3-stage pipeline (metadata -> K/V -> math).  Splits of 1024 positions: fewer partials and programs
    # than 512 or 256 (622 us against 650 and 726 at the bench shape, H200), the partials under 1% of the
    # KV bytes, and still 8 splits per KV head for one 8K row.  D=256 runs 8 warps (255 registers at 4).
    # e4m3 keeps at most 64 tokens a tile (wider, Triton converts V after its shared-memory transpose),
    # a cap of 128 registers (4 programs per SM) and splits of 2048 (its rescales are rarer): 397 us.
    # The sweeps and instruction counts behind each choice: docs/ops/paged_decode.md.
    # Sparse runs the dense plan (the selection resolved beforehand by ``_resolve_selection``).
    num_warps = 8 if head_dim == 256 else 4
    block_n = 16384 // (2 * head_dim)
    plan = LaunchPlan(block_n=block_n, split_tokens=1024, num_warps=num_warps, num_stages=3)
    if cache_dtype == torch.float8_e4m3fn:
        plan = dataclasses.replace(plan, block_n=min(block_n, 64), max_registers=128 if num_warps == 4 else None,
                                   **E4M3_PLAN)
    return plan


# The e4m3 default's split, stages, row padding, numerics, V conversion and rescale: the one line to change for
# another sweep winner (bench_variants' e4m3 labels are relative to it).
E4M3_PLAN = {"split_tokens": 2048, "num_stages": 3, "min_dot_rows": 1, "exp": Exp.FLOAT64_SHORT,
             "p_operand": POperand.FP16_SCALED, "convert_ptx": True, "lazy_rescale": True}


def _widened(cache_dtype: torch.dtype):
    """The 16-bit type a cache element is widened to for the tensor cores: bf16 caches stay bf16; e4m3
    becomes fp16 — exact, and one ``cvt.rn.f16x2.e4m3x2`` per two elements on sm_90, where bf16 needs
    a second conversion per element (fp16 -> bf16), which made the conversions, not the bytes, bound
    the e4m3 kernel (1011 us, 1.55x the bf16 time, H200)."""
    return tl.float16 if cache_dtype == torch.float8_e4m3fn else tl.bfloat16


E4M3_TO_FP16_PTX = tl.constexpr("""
{
.reg .b32 kept;
.reg .b16 lo, hi;
and.b32 kept, $2, $3;
mov.b32 {lo, hi}, kept;
cvt.rn.f16x2.e4m3x2 $0, lo;
cvt.rn.f16x2.e4m3x2 $1, hi;
}
""")


@triton.jit
def _e4m3_to_fp16(x, keep, PTX: tl.constexpr):
    """e4m3 ``x`` as fp16 (exact) where ``keep`` (int32, -1 or 0, broadcast against ``x``), else 0.

    ``PTX`` (GPU only): four bytes a register, one AND with the row's ``keep`` and two
    ``cvt.rn.f16x2.e4m3x2`` — the ``keep`` operand, not a load, also keeps Triton from hoisting the
    conversion past V's shared-memory transpose (which then reads e4m3 a byte at a time); every code
    checked on the GPU by suites/attention's test_e4m3_conversion_every_code.  Else Triton's conversion."""
    if PTX:
        return tl.inline_asm_elementwise(E4M3_TO_FP16_PTX, "=r,=r,r,r,r,r,r", [x.to(tl.uint8, bitcast=True), keep],
                                         dtype=tl.float16, is_pure=True, pack=4)
    else:
        return tl.where(keep != 0, x.to(tl.float16), 0.0)


P_SCALE = tl.constexpr(32768.0)  # one fp16 p is 2^15 p (p <= 1): 11 bits for every p above 2^-29


def _dot_operand(widened):
    # 16-bit tensor cores on the GPU; the interpreter's bf16 dot is wrong, so it multiplies in fp32 —
    # every operand (bf16 q, fp16-scaled q, k, v, e4m3 widened, p's 16-bit halves) is exact in both,
    # so only the accumulation order differs.
    return tl.float32 if interpreting() else widened


# -- kernels --------------------------------------------------------------------------------------
@triton.jit
def _live_positions(seq_lens_ptr, seq_lens_stride, row, pages_per_row, page_size, entries, SPARSE: tl.constexpr):
    """Token positions a row's splits cover: its length (dense), or its whole selection (sparse)."""
    if SPARSE:
        positions = entries * page_size
    else:
        seq_len = tl.load(seq_lens_ptr + row * seq_lens_stride)
        positions = tl.minimum(tl.maximum(seq_len, 0), pages_per_row * page_size)
    return positions


@triton.jit
def _round_to_bf16(x):
    """fp32 -> bf16, round to nearest even, on the bits (the interpreter's own cast truncates)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def _query_in_fp16(q):
    """bf16 q as an fp16 operand, and the per-head factor that undoes its scaling.

    fp16 holds an e4m3 element exactly but not bf16's exponent range, so each head is scaled by the
    power of two that puts its largest |q| in [2^14, 2^15): exact, and every element above 2^-29 of
    that largest stays exact (the rest lose under 2^-40 of it, far below the fp32 accumulation's own
    rounding).  Both factors are kept normal; a zero head gets the largest, an inf/NaN head the
    smallest, which leaves inf and NaN what they were."""
    largest = tl.max(tl.abs(q.to(tl.float32)), axis=1)
    exponent = (largest.to(tl.int32, bitcast=True) >> 23) & 0xFF       # biased fp32 exponent
    scale_field = tl.minimum(tl.maximum(268 - exponent, 1), 253)       # 2^(14 - unbiased exponent)
    scale = (scale_field << 23).to(tl.float32, bitcast=True)
    unscale = ((254 - scale_field) << 23).to(tl.float32, bitcast=True)
    return (q.to(tl.float32) * scale[:, None]).to(tl.float16), unscale


@triton.jit
def _exp_difference(s, m):
    """``exp(s - m)`` for finite fp32 ``s <= m`` as fp32 ``p`` and ``p_error``, ``p + p_error`` within 2^-25 of
    it relative — a float64 sum of both is what ``l`` (hence ``lse``) needs, at fp32 cost.

    Cody-Waite: ``s - m = x_hi + x_lo`` exactly (TwoSum: ``s - m`` rounded in fp32 moved ``p`` by
    ``2^-24 |s - m|`` relative, up to 28 ULPs of ``p``); ``k = rint(x_hi log2 e)``; ``r = x - k ln 2``
    with ``ln 2 = LN2_HI + LN2_LO`` (``k * LN2_HI`` exact: 9 + 8 bits, and the subtraction exact by
    Sterbenz), ``|r| <= 0.347``; ``e^r = (1 + r) + r^2 P(r)``, ``P`` the Taylor terms to ``r^5 / 7!``
    (truncation ``r^8 / 8! < 2^-27.5``), ``1 + r`` split exactly into ``hi + lo`` (Fast2Sum) so only the
    small ``r^2 P`` (< 0.07) is rounded (< 2^-27.5); ``e = hi + (lo + r^2 P)`` rounded to fp32, and that
    rounding kept exactly as ``error`` (Fast2Sum).  ``p = e 2^k`` by two exact power-of-two factors
    (``k >= -159``: gradual underflow to 0 below 2^-149).  Simulated in numpy fp32 against float64
    over 2M differences: ``p`` alone within 0.8 ULP (mean 0.25), ``p + p_error`` within 2^-25.1; ``lse`` from float64 sums of
    ``p + p_error`` (splits of 1024, tiles of 64, float64 merge) within 0.43 ULP before its own fp32
    rounding, against 13 ULPs from ``p`` alone, for lse near 0 (rows of 1..3000 tokens)."""
    LOG2E: tl.constexpr = 1.4426950408889634
    LN2_HI: tl.constexpr = 0.693359375
    LN2_LO: tl.constexpr = -2.12194440e-4
    ROUNDER: tl.constexpr = 12582912.0  # 1.5 * 2^23: adding it rounds an fp32 of magnitude < 2^22 to an integer
    x_hi = s - m
    m_part = x_hi - s
    s_part = x_hi - m_part
    x_lo = (s - s_part) - (m + m_part)
    x_hi = tl.maximum(x_hi, -110.0)  # exp(-110) < 2^-150: p rounds to 0 whatever k the rest would take
    k = tl.fma(x_hi, LOG2E, ROUNDER) - ROUNDER
    r = tl.fma(-k, LN2_HI, x_hi)
    r = r + tl.fma(-k, LN2_LO, x_lo)
    poly = tl.fma(r, 1.0 / 5040.0, 1.0 / 720.0)
    poly = tl.fma(poly, r, 1.0 / 120.0)
    poly = tl.fma(poly, r, 1.0 / 24.0)
    poly = tl.fma(poly, r, 1.0 / 6.0)
    poly = tl.fma(poly, r, 0.5)
    hi = 1.0 + r
    lo = r - (hi - 1.0)
    tail = lo + (r * r) * poly
    e = hi + tail
    error = tail - (e - hi)
    k_int = k.to(tl.int32)
    k_half = k_int >> 1
    first = ((k_half + 127) << 23).to(tl.float32, bitcast=True)
    second = ((k_int - k_half + 127) << 23).to(tl.float32, bitcast=True)
    return e * first * second, error * first * second


@triton.jit
def _exp_float64_short(s, m):
    """``exp(s - m)`` in float64 for fp32 ``s <= m`` (``m`` finite), within 2^-30 of it relative for
    ``s - m >= -700`` (below, a positive number under 1e-304; NaN stays NaN): what ``l`` needs, at 8
    DFMAs of polynomial against libdevice's 11 and without its range checks and branches.

    ``x = s - m`` exact in float64; ``k = rint(x log2 e)`` by the 1.5 * 2^52 rounder; ``r = x - k ln 2``
    by two FMAs, ``|r| <= 0.3467``; ``e^r`` by Taylor to ``r^8 / 8!`` (truncation ``r^9 / 9! < 2^-31``);
    times ``2^k`` built in the exponent field (``s`` clamped to ``m - 700``: ``2^k`` normal).  The
    constants but 1/6 are rounded to 20 significant bits, so they fit SASS's float64 immediates instead
    of a pair of uniform-register moves each a tile: ``ln 2 = LN2_HI + LN2_LO`` within 2^-52, ``1/4! ..
    1/8!`` within 2^-22 relative (< 2^-32 of the result); 1/6 is float64's, from its bits (Triton's
    float literals are fp32).  Simulated in numpy over 4M differences: within 2^-31.9."""
    LOG2E: tl.constexpr = 1.4426946640014648   # only picks k
    LN2_HI: tl.constexpr = 0.6931471824645996
    LN2_LO: tl.constexpr = -1.9046542121259336e-09
    ROUNDER: tl.constexpr = 6755399441055744.0  # 1.5 * 2^52
    sixth = tl.full([1, 1], 0x3FC5555555555555, tl.int64).to(tl.float64, bitcast=True)
    s = tl.maximum(s, m - 700.0, propagate_nan=tl.PropagateNan.ALL)
    x = s.to(tl.float64) - m.to(tl.float64)
    k = tl.fma(x, LOG2E, ROUNDER) - ROUNDER
    r = tl.fma(-k, LN2_HI, x)
    r = tl.fma(-k, LN2_LO, r)
    poly = tl.fma(r, 2.48015858232975e-05, 0.00019841268658638)
    poly = tl.fma(poly, r, 0.00138888880610466)
    poly = tl.fma(poly, r, 0.00833333283662796)
    poly = tl.fma(poly, r, 0.041666656732559204)
    poly = tl.fma(poly, r, sixth)
    poly = tl.fma(poly, r, 0.5)
    poly = tl.fma(poly, r, 1.0)
    poly = tl.fma(poly, r, 1.0)
    scale = ((k.to(tl.int32) + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
    return poly * scale


# bounds and index tensors: one compile per plan (lengths: a scalar load; the table: a gather)
@triton.jit(do_not_specialize=["select_stride_b", "entries", "table_stride_b", "table_stride_m", "pages_per_row",
                               "seq_lens_stride", "page_size", "num_pages"],
            do_not_specialize_on_alignment=["seq_lens_ptr", "table_ptr"])
def _resolve_selection(
    select_ptr, select_stride_b, entries,            # sorted selection [B, T]
    table_ptr, table_stride_b, table_stride_m, pages_per_row,
    seq_lens_ptr, seq_lens_stride, page_size, num_pages,
    pages_ptr, live_slots_ptr,                       # out: [B, T], contiguous
    BLOCK: tl.constexpr,
):
    """Each sorted entry's physical page (-1 when it attends nothing) and live slots, once per row, so
    the decode reads one level of metadata before K/V, as dense does, instead of a chain of three
    (entry and predecessor -> table -> K/V) in every tile of every KV head.

    An entry counts when it lies in ``0..M-1``, differs from its sorted predecessor (duplicates
    once), names a page ``>= 0`` inside the pool, and starts below ``seq_lens``."""
    row = tl.program_id(0)
    seq_len = tl.load(seq_lens_ptr + row * seq_lens_stride)
    select_row = select_ptr + row.to(tl.int64) * select_stride_b
    table_row = table_ptr + row.to(tl.int64) * table_stride_b
    out_row = row.to(tl.int64) * entries
    for first in range(0, entries, BLOCK):
        entry = first + tl.arange(0, BLOCK)
        within = entry < entries
        logical = tl.load(select_row + entry, mask=within, other=-1)
        previous = tl.load(select_row - 1 + entry, mask=within & (entry > 0), other=-1)
        counted = within & (logical >= 0) & (logical < pages_per_row) & ((entry == 0) | (logical != previous))
        logical = tl.where(counted, logical, 0)  # no int32 overflow from the wild entries
        live_slots = tl.minimum(tl.maximum(seq_len - logical * page_size, 0), page_size)
        physical = tl.load(table_row + logical * table_stride_m, mask=counted, other=-1)
        counted = counted & (physical >= 0) & (physical < num_pages) & (live_slots > 0)
        tl.store(pages_ptr + out_row + entry, tl.where(counted, physical, -1), mask=within)
        tl.store(live_slots_ptr + out_row + entry, tl.where(counted, live_slots, 0), mask=within)


@triton.jit
def _tile_slots(position, end, offs_n, k_tile, v_tile, k_stride_p, k_stride_s, v_stride_p, v_stride_s, num_pages,
                table_row, table_stride_m, selected_pages_ptr, selected_live_slots_ptr, selected_row,
                BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr, SPARSE: tl.constexpr):
    """The tile's slots that may be read (``valid``) and their K and V row addresses: a token below
    ``end`` on a valid page inside the pool, and, sparse, a counted entry's live slot."""
    n = position + offs_n
    within = n < end
    if PAGE_SIZE >= BLOCK_N:
        # Both powers of two and tiles start at multiples of BLOCK_N: the tile lies in one page, so
        # its metadata is one scalar load and its addresses a scalar offset from loop-invariant ones
        # (the per-token division, table gather and 64-bit address arithmetic were ~60% of the loop's
        # instructions at D=128: ptxas sm_90).  ``position < end <= limit``: the entry exists.
        first_slot = position % PAGE_SIZE
        if SPARSE:
            physical = tl.load(selected_pages_ptr + selected_row + position // PAGE_SIZE)
            live_slots = tl.load(selected_live_slots_ptr + selected_row + position // PAGE_SIZE)
            valid = block_and(within & (first_slot + offs_n < live_slots), physical >= 0)
        else:
            physical = tl.load(table_row + (position // PAGE_SIZE) * table_stride_m)
            valid = block_and(within, (physical >= 0) & (physical < num_pages))
        physical = physical.to(tl.int64)
        k_rows = k_tile + (physical * k_stride_p + first_slot * k_stride_s)
        v_rows = v_tile + (physical * v_stride_p + first_slot * v_stride_s)
    else:
        if SPARSE:
            entry = n // PAGE_SIZE
            slot = n % PAGE_SIZE
            physical = tl.load(selected_pages_ptr + selected_row + entry, mask=within, other=-1)
            live_slots = tl.load(selected_live_slots_ptr + selected_row + entry, mask=within, other=0)
            valid = within & (physical >= 0) & (slot < live_slots)   # -1 unless counted, in the pool
        else:
            logical = n // PAGE_SIZE      # dense positions are tokens, and end <= seq_len
            slot = n % PAGE_SIZE
            physical = tl.load(table_row + logical * table_stride_m, mask=within, other=-1)
            valid = within & (physical >= 0) & (physical < num_pages)
        physical = physical.to(tl.int64)
        k_rows = k_tile + (physical * k_stride_p + slot * k_stride_s)[:, None]
        v_rows = v_tile + (physical * v_stride_p + slot * v_stride_s)[:, None]
    return valid, k_rows, v_rows


@triton.jit
def _rescale(m, m_new, m_base, l, acc, LAZY_RESCALE: tl.constexpr):
    """The online softmax's correction of ``l`` and ``acc`` for a running max moved from ``m`` to ``m_new``."""
    if LAZY_RESCALE:
        # m_new == m (not NaN) in every row gives alpha = exp(0) = 1, or exp(-inf) = 0 on an l and
        # acc still 0: skipping the rescale keeps the bits, and after a row's first tiles its max
        # rarely moves (the float64 exp and the acc multiply were ~80 instructions a tile)
        if tl.sum((m_new != m).to(tl.int32), axis=0) != 0:
            alpha = tl.exp((m - m_base).to(tl.float64))
            l = l * alpha
            acc = acc * alpha.to(tl.float32)[:, None]
    else:
        alpha = tl.exp((m - m_base).to(tl.float64))             # float64: it rescales l, hence lse
        l = l * alpha
        acc = acc * alpha.to(tl.float32)[:, None]
    return l, acc


@triton.jit
def _probabilities(scores, finite_scores, m_base, valid, computed, l, EXP_IN_FLOAT64: tl.constexpr,
                   SHORT_EXP: tl.constexpr):
    """``p = exp(s - m)`` of the tile (0 on invalid slots and padding rows) as fp32, and ``l`` plus its row
    sums, kept in float64 (``lse`` depends on it)."""
    if EXP_IN_FLOAT64 and SHORT_EXP:
        p_exact = _exp_float64_short(finite_scores, m_base[:, None])
        p_exact = tl.where(valid[None, :] & computed[:, None], p_exact, 0.0)
        l = l + tl.sum(p_exact, axis=1)
        p = p_exact.to(tl.float32)
    elif EXP_IN_FLOAT64:
        # float64, from the subtraction on: the GPU's fp32 exp (ex2.approx after a rounded multiply by
        # log2 e) put lse 1.03 ULP from truth on the H200 (band 1 ULP, stock 0.23) for a 16-token row
        p_exact = tl.exp(scores.to(tl.float64) - m_base.to(tl.float64)[:, None])
        p_exact = tl.where(computed[:, None], p_exact, 0.0)
        l = l + tl.sum(p_exact, axis=1)
        p = p_exact.to(tl.float32)
    else:
        p, p_error = _exp_difference(finite_scores, m_base[:, None])
        live = valid[None, :] & computed[:, None]
        p = tl.where(live, p, 0.0)
        p_error = tl.where(live, p_error, 0.0)
        l = l + tl.sum(p.to(tl.float64) + p_error.to(tl.float64), axis=1)
    return p, l


@triton.jit
def _load_v(v_rows, valid, WIDENED: tl.constexpr, OPERAND: tl.constexpr, CONVERT_V: tl.constexpr,
            PTX: tl.constexpr):
    """The tile's V as the ``p @ v`` operand (0 on invalid slots), widened where it was loaded."""
    v = tl.load(v_rows, mask=valid[:, None], other=0.0)
    if CONVERT_V:
        v = _e4m3_to_fp16(v, -valid.to(tl.int32)[:, None], PTX)
    elif WIDENED == tl.float16:
        # Widen V where it was loaded, 16 bytes a thread, before Triton moves it into the dot
        # operand through shared memory: the select (a no-op on values: masked slots load 0)
        # keeps Triton from converting after that move instead, which reads e4m3 V one byte at a
        # time (64 ld.shared.b8 a thread per 64 x 128 tile; ptxas sm_90, Triton 3.6).
        v = tl.where(valid[:, None], v.to(WIDENED), 0.0)
    return v.to(OPERAND)


@triton.jit
def _add_p_times_v(acc, p, v, WIDENED: tl.constexpr, OPERAND: tl.constexpr, P_IN_HALVES: tl.constexpr):
    """``acc + p @ v`` on the tensor cores, p as 16-bit hi + lo halves or (e4m3) one fp16 ``2^15 p``."""
    if P_IN_HALVES:
        p_hi = p.to(WIDENED)
        p_lo = (p - p_hi.to(tl.float32)).to(WIDENED)
        acc = tl.dot(p_hi.to(OPERAND), v, acc)
        acc = tl.dot(p_lo.to(OPERAND), v, acc)
    else:
        # fp16 p alone (e4m3 caches), scaled by 2^15 (p <= 1): 11 bits for every p above 2^-29, an
        # absolute error under 2^-41 below — finer than the stock op's bf16 p (8 bits) everywhere.
        p_scaled = (p * P_SCALE).to(WIDENED)
        acc = tl.dot(p_scaled.to(OPERAND), v, acc)
    return acc


# Sizes and metadata strides are not specialized (divisible by 16 or not), nor the metadata's alignment
# (scalar loads and gathers): one compiled kernel per head dim, page size, group's power of two, cache
# dtype and dense/sparse, whatever the batch, table and pool sizes.  q's and the caches' pointers and
# strides stay specialized: they set the width of the K, V and q loads.
@triton.jit(do_not_specialize=["num_pages", "kv_heads", "group", "pages_per_row", "table_stride_b",
                               "table_stride_m", "seq_lens_stride", "entries", "splits"],
            do_not_specialize_on_alignment=["table_ptr", "seq_lens_ptr", "selected_pages_ptr",
                                            "selected_live_slots_ptr"])
def _decode_splits(
    # query [B, Hq, D]
    q_ptr, q_stride_b, q_stride_h, q_stride_d,
    # caches [P, S, Hkv, D]
    k_ptr, k_stride_p, k_stride_s, k_stride_h, k_stride_d,
    v_ptr, v_stride_p, v_stride_s, v_stride_h, v_stride_d,
    num_pages, kv_heads, group,
    # metadata: page table [B, M], lengths [B]; sparse: each selected entry's page and live slots [B, T]
    table_ptr, table_stride_b, table_stride_m, pages_per_row,
    seq_lens_ptr, seq_lens_stride,
    selected_pages_ptr, selected_live_slots_ptr, entries,
    qk_scale,
    # partials, one per (row, KV head, split, head of the group)
    part_m_ptr, part_l_ptr, part_acc_ptr, splits,
    # meta
    D: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_TOKENS: tl.constexpr,
    PAGE_SIZE: tl.constexpr, SPARSE: tl.constexpr, WIDENED: tl.constexpr, OPERAND: tl.constexpr,
    EXP_IN_FLOAT64: tl.constexpr, P_IN_HALVES: tl.constexpr, REAL_ROWS: tl.constexpr, CONVERT_V: tl.constexpr,
    PTX: tl.constexpr, LAZY_RESCALE: tl.constexpr, SHORT_EXP: tl.constexpr,
):
    pid = tl.program_id(0)
    split = pid % splits
    kv_head = (pid // splits) % kv_heads
    row = pid // (splits * kv_heads)
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    in_group = offs_g < group
    # rows past the group's power of two are padding: p = 0 there, a constant the compiler folds, so
    # their exp is never computed (ptxas sm_90, rows padded to 16 for G = 4: 200 fp32 instructions a
    # tile for the Cody-Waite exp, against 336)
    computed = offs_g < REAL_ROWS

    limit = _live_positions(seq_lens_ptr, seq_lens_stride, row, pages_per_row, PAGE_SIZE, entries, SPARSE)
    start = split * SPLIT_TOKENS
    end = tl.minimum(start + SPLIT_TOKENS, limit)

    q_rows = q_ptr + row.to(tl.int64) * q_stride_b + (kv_head * group + offs_g) * q_stride_h
    q = tl.load(q_rows[:, None] + offs_d[None, :] * q_stride_d, mask=in_group[:, None], other=0.0)
    if WIDENED == tl.float16:
        q, q_unscale = _query_in_fp16(q)
    q = q.to(OPERAND)
    table_row = table_ptr + row.to(tl.int64) * table_stride_b
    selected_row = row.to(tl.int64) * entries
    k_tile = k_ptr + kv_head * k_stride_h + offs_d[None, :] * k_stride_d
    v_tile = v_ptr + kv_head * v_stride_h + offs_d[None, :] * v_stride_d
    if PAGE_SIZE >= BLOCK_N:  # loop-invariant slot offsets of a tile inside one page
        k_tile += (offs_n * k_stride_s)[:, None]
        v_tile += (offs_n * v_stride_s)[:, None]

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float64)
    acc = tl.zeros([GROUP_PAD, D], tl.float32)
    for position in range(start, end, BLOCK_N):
        valid, k_rows, v_rows = _tile_slots(
            position, end, offs_n, k_tile, v_tile, k_stride_p, k_stride_s, v_stride_p, v_stride_s, num_pages,
            table_row, table_stride_m, selected_pages_ptr, selected_live_slots_ptr, selected_row,
            BLOCK_N, PAGE_SIZE, SPARSE)
        k = tl.load(k_rows, mask=valid[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k.to(WIDENED).to(OPERAND)))
        if WIDENED == tl.float16:
            scores = scores * q_unscale[:, None]   # exact: a power of two
        scores = scores * qk_scale
        finite_scores = scores   # a masked slot's k loads as 0: its score is 0, never NaN
        scores = tl.where(valid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        m_base = tl.where(m_new == float("-inf"), 0.0, m_new)   # a group with nothing valid yet
        l, acc = _rescale(m, m_new, m_base, l, acc, LAZY_RESCALE)
        p, l = _probabilities(scores, finite_scores, m_base, valid, computed, l, EXP_IN_FLOAT64, SHORT_EXP)
        v = _load_v(v_rows, valid, WIDENED, OPERAND, CONVERT_V, PTX)
        acc = _add_p_times_v(acc, p, v, WIDENED, OPERAND, P_IN_HALVES)
        m = m_new

    part = ((row.to(tl.int64) * kv_heads + kv_head) * splits + split) * group + offs_g
    written = block_and(in_group, start < limit)
    tl.store(part_m_ptr + part, m, mask=written)
    tl.store(part_l_ptr + part, l, mask=written)
    if not P_IN_HALVES:
        acc = acc * (1.0 / P_SCALE)   # exact: a power of two
    tl.store(part_acc_ptr + part[:, None] * D + offs_d[None, :], acc, mask=written[:, None])


# bounds and index tensors: one compile per plan (lengths: a scalar load; lse: a group's few values at
# an offset of unknown alignment)
@triton.jit(do_not_specialize=["splits", "kv_heads", "group", "seq_lens_stride", "pages_per_row", "page_size",
                               "entries", "lse_stride_b"],
            do_not_specialize_on_alignment=["seq_lens_ptr"])
def _merge_splits(
    part_m_ptr, part_l_ptr, part_acc_ptr, splits, kv_heads, group,
    seq_lens_ptr, seq_lens_stride, pages_per_row, page_size, entries,
    kv_scale,
    o_ptr, o_stride_b, o_stride_h, lse_ptr, lse_stride_b,
    D: tl.constexpr, GROUP_PAD: tl.constexpr, SPLIT_TOKENS: tl.constexpr, SPARSE: tl.constexpr,
):
    pid = tl.program_id(0)
    kv_head = pid % kv_heads
    row = pid // kv_heads
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, D)
    in_group = offs_g < group
    limit = _live_positions(seq_lens_ptr, seq_lens_stride, row, pages_per_row, page_size, entries, SPARSE)
    live_splits = (limit + SPLIT_TOKENS - 1) // SPLIT_TOKENS
    first = (row.to(tl.int64) * kv_heads + kv_head) * splits * group + offs_g

    m_max = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    for split in range(0, live_splits):
        m_max = tl.maximum(m_max, tl.load(part_m_ptr + first + split * group, mask=in_group, other=float("-inf")))
    m_base = tl.where(m_max == float("-inf"), 0.0, m_max).to(tl.float64)
    total = tl.zeros([GROUP_PAD], tl.float64)
    acc = tl.zeros([GROUP_PAD, D], tl.float64)
    for split in range(0, live_splits):
        part = first + split * group
        weight = tl.exp(tl.load(part_m_ptr + part, mask=in_group, other=float("-inf")).to(tl.float64) - m_base)
        total += weight * tl.load(part_l_ptr + part, mask=in_group, other=0.0)
        split_acc = tl.load(part_acc_ptr + part[:, None] * D + offs_d[None, :], mask=in_group[:, None], other=0.0)
        acc += weight[:, None] * split_acc.to(tl.float64)

    attended = total > 0
    denominator = tl.where(attended, total, 1.0)
    o = tl.where(attended[:, None], acc * kv_scale / denominator[:, None], 0.0)
    lse = tl.where(attended, m_base + tl.log(denominator), float("-inf"))
    heads = kv_head * group + offs_g
    o_rows = o_ptr + row.to(tl.int64) * o_stride_b + heads * o_stride_h
    tl.store(o_rows[:, None] + offs_d[None, :], _round_to_bf16(o.to(tl.float32)), mask=in_group[:, None])
    tl.store(lse_ptr + row.to(tl.int64) * lse_stride_b + heads, lse.to(tl.float32), mask=in_group)


# -- host wrapper ---------------------------------------------------------------------------------
def run_plan(plan: LaunchPlan, q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0,
             page_select=None):
    """Launch ``plan`` on already-validated arguments (``tools/bench`` sweeps plans through this)."""
    batch, query_heads, head_dim = q.shape
    num_pages, page_size, kv_heads, _ = k_cache.shape
    group = query_heads // kv_heads
    pages_per_row = page_table.shape[1]
    o = torch.empty(batch, query_heads, head_dim, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(batch, query_heads, dtype=torch.float32, device=q.device)
    if batch * query_heads == 0:
        return o, lse
    widened = _widened(k_cache.dtype)
    if plan.p_operand is POperand.FP16_SCALED and widened != tl.float16:
        raise ValueError(f"{plan}: a single 16-bit p is fp16's (e4m3 caches); bf16 p keeps only 8 bits")
    sparse = page_select is not None
    entries, positions, selected_pages, selected_live_slots = selection_metadata(page_table, seq_lens, page_select,
                                                                                 page_size, num_pages)
    splits = max(1, triton.cdiv(positions, plan.split_tokens))
    part_m, part_l, part_acc = split_partials(batch * kv_heads * splits * group, head_dim, q.device)
    group_pad = max(plan.min_dot_rows, triton.next_power_of_2(group))
    _decode_splits[(batch * kv_heads * splits,)](
        q, *q.stride(),
        k_cache, *k_cache.stride(), v_cache, *v_cache.stride(),
        num_pages, kv_heads, group,
        page_table, *page_table.stride(), pages_per_row,
        seq_lens, seq_lens.stride(0),
        selected_pages, selected_live_slots, entries,
        float(sm_scale) * float(kv_scale),
        part_m, part_l, part_acc, splits,
        D=head_dim, GROUP_PAD=group_pad, BLOCK_N=plan.block_n, SPLIT_TOKENS=plan.split_tokens,
        PAGE_SIZE=page_size, SPARSE=sparse, WIDENED=widened, OPERAND=_dot_operand(widened),
        EXP_IN_FLOAT64=plan.exp is not Exp.FP32_CODY_WAITE, SHORT_EXP=plan.exp is Exp.FLOAT64_SHORT,
        P_IN_HALVES=plan.p_operand is POperand.HI_LO_HALVES, REAL_ROWS=triton.next_power_of_2(group),
        CONVERT_V=plan.convert_ptx and widened == tl.float16, PTX=not interpreting(),
        LAZY_RESCALE=plan.lazy_rescale, num_warps=plan.num_warps,
        num_stages=plan.num_stages, **({} if plan.max_registers is None else {"maxnreg": plan.max_registers}),
    )
    merge_splits((part_m, part_l, part_acc), splits, kv_heads, group, seq_lens, pages_per_row, page_size, entries,
                 float(kv_scale), o, lse, group_pad, plan.split_tokens, sparse)
    return o, lse


def host_sm_scale_limit(sm_scale) -> str | None:
    """The decode kernels' own limit: a host ``sm_scale`` (a launch argument; reading a tensor would sync)."""
    if isinstance(sm_scale, torch.Tensor):
        return "sm_scale: a tensor; this kernel takes a host number (reading a tensor would sync)"
    return None


def kernel_limits(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None) -> str | None:
    """This kernel's own limits: a host ``sm_scale`` (a launch argument) and pages of at least one slot."""
    if host_sm_scale_limit(sm_scale) is None and k_cache.shape[1] == 0:
        return "k_cache: pages of S = 0 slots; this kernel divides token positions by S"
    return host_sm_scale_limit(sm_scale)


def selection_metadata(page_table, seq_lens, page_select, page_size: int, num_pages: int):
    """``(entries, positions, selected_pages, selected_live_slots)``: dense, no entries and the table's
    ``M * S`` positions; sparse, the selection sorted on the device (duplicates become neighbours) and
    each entry resolved to its page and live slots by ``_resolve_selection``, ``T * S`` positions."""
    batch, pages_per_row = page_table.shape
    if page_select is None:
        return 0, pages_per_row * page_size, page_table, page_table   # the last two unused
    selection = torch.sort(page_select, dim=1).values
    entries = selection.shape[1]
    selected_pages, selected_live_slots = torch.empty_like(selection), torch.empty_like(selection)
    if entries:
        _resolve_selection[(batch,)](
            selection, selection.stride(0), entries,
            page_table, *page_table.stride(), pages_per_row,
            seq_lens, seq_lens.stride(0), page_size, num_pages,
            selected_pages, selected_live_slots,
            BLOCK=min(1024, triton.next_power_of_2(entries)),
        )
    return entries, entries * page_size, selected_pages, selected_live_slots


def split_partials(count: int, head_dim: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each (row, KV head, split, head of the group)'s running max (fp32), denominator (float64) and
    ``[D]`` sum (fp32), written by a decode kernel and read once by ``merge_splits``."""
    return (torch.empty(count, dtype=torch.float32, device=device),
            torch.empty(count, dtype=torch.float64, device=device),
            torch.empty(count * head_dim, dtype=torch.float32, device=device))


def merge_splits(partials, splits, kv_heads, group, seq_lens, pages_per_row, page_size, entries, kv_scale, o, lse,
                 group_pad, split_tokens, sparse):
    """Merge each row's splits by their log-sum-exp into ``o`` and ``lse`` (``kv_scale`` multiplies o)."""
    _merge_splits[(o.shape[0] * kv_heads,)](
        *partials, splits, kv_heads, group,
        seq_lens, seq_lens.stride(0), pages_per_row, page_size, entries,
        kv_scale,
        o, o.stride(0), o.stride(1), lse, lse.stride(0),
        D=o.shape[2], GROUP_PAD=group_pad, SPLIT_TOKENS=split_tokens, SPARSE=sparse, num_warps=4,
    )


def paged_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    contract.validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    require_within_limits(kernel_limits(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select))
    plan = launch_plan(q.shape[2], k_cache.dtype)
    return run_plan(plan, q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)


def bytes_moved(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None) -> int:
    """The attended K and V (what the op must read) + q + o + lse."""
    _, page_size, kv_heads, head_dim = k_cache.shape
    tokens = int(contract.attended_tokens(page_table, seq_lens, page_size, page_select).sum())
    return (2 * tokens * kv_heads * head_dim * k_cache.element_size()
            + 2 * q.numel() * q.element_size() + 4 * q.shape[0] * q.shape[1])


def bench_variants(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None) -> dict:
    """Plans around the default, for ``tools/bench --variants`` to time on the device.

    bf16 keeps the default and two plans (the sweeps in docs/ops/paged_decode.md ruled out the rest).
    e4m3: launch-plan knobs (``split``, ``stages``, ``block``, ``warps``, ``register cap``, ``rows``, ``no ptx
    convert``, ``no lazy rescale``) keep the default's numerics (the last two its bits); ``exp fp32
    Cody-Waite``, ``exp float64 libdevice`` and ``p hi+lo`` change how p is computed or multiplied, each
    within the band by its own derivation; ``round-1 default`` is the e4m3 default before the lean tile
    (splits of 1024, Cody-Waite exp, V converted by Triton, every tile rescaled)."""
    default = launch_plan(q.shape[2], k_cache.dtype)
    replace = dataclasses.replace
    if k_cache.dtype != torch.float8_e4m3fn:
        plans = {"default": default,
                 "lazy rescale": replace(default, lazy_rescale=True),
                 "split 2048, lazy rescale": replace(default, split_tokens=2048, lazy_rescale=True)}
    else:
        cody_waite = {"exp": Exp.FP32_CODY_WAITE}
        plans = {
            "default": default,
            "round-1 default": replace(default, split_tokens=1024, num_stages=3, convert_ptx=False,
                                       lazy_rescale=False, **cody_waite),
            "no ptx convert": replace(default, convert_ptx=False),
            "no lazy rescale": replace(default, lazy_rescale=False),
            "rows 8": replace(default, min_dot_rows=8),
            "rows 16": replace(default, min_dot_rows=16),
            "split 1024": replace(default, split_tokens=1024),
            "split 1024, rows 8": replace(default, split_tokens=1024, min_dot_rows=8),
            "2 stages": replace(default, num_stages=2),
            "4 stages": replace(default, num_stages=4),
            "register cap 168": replace(default, max_registers=168),
            # more blocks an SM (ncu: latency-bound at 4 blocks of 4 warps); blocks, warps and SASS of each,
            # compiled for sm_90a without a GPU: docs/lab/e4m3_occupancy_static.md
            "2 stages, register cap 96": replace(default, num_stages=2, max_registers=96),
            "block 32, 2 stages, register cap 80": replace(default, block_n=32, num_stages=2, max_registers=80),
            "8 warps, 2 stages, register cap none": replace(default, num_warps=8, num_stages=2, max_registers=None),
            "8 warps, 2 stages, register cap 64": replace(default, num_warps=8, num_stages=2, max_registers=64),
            "2 stages, rows 8": replace(default, num_stages=2, min_dot_rows=8),
            "block 32": replace(default, block_n=32),
            "register cap none": replace(default, max_registers=None),
            "split 1024, register cap none": replace(default, split_tokens=1024, max_registers=None),
            "split 1024, register cap 168": replace(default, split_tokens=1024, max_registers=168),
            "numerics: exp fp32 Cody-Waite": replace(default, **cody_waite),
            "numerics: exp fp32 Cody-Waite, rows 8": replace(default, min_dot_rows=8, **cody_waite),
            "numerics: exp fp32 Cody-Waite, split 1024": replace(default, split_tokens=1024, **cody_waite),
            "numerics: p hi+lo": replace(default, p_operand=POperand.HI_LO_HALVES),
            "numerics: exp float64 libdevice": replace(default, exp=Exp.FLOAT64_LIBDEVICE),
            "numerics: exp float64 libdevice, 2 stages": replace(default, exp=Exp.FLOAT64_LIBDEVICE, num_stages=2),
        }
    distinct = {}
    for label, plan in plans.items():
        if plan not in distinct.values():
            distinct[label] = plan
    return {label: (lambda plan=plan, **kwargs: run_plan(plan, **kwargs)) for label, plan in distinct.items()}


def _bench_call(kv_dtype: torch.dtype, selected_pages_fraction: float | None = None):
    """B=64 rows of L=8192 tokens, Hq=32, Hkv=8, D=128, pages of 64 slots (the issue's bench shape)."""
    batch, length, query_heads, kv_heads, head_dim, page_size = 64, 8192, 32, 8, 128, 64

    def make(device):
        generator = torch.Generator(device=device).manual_seed(0)
        pages_per_row = length // page_size
        num_pages = batch * pages_per_row

        def cache():
            shape = (num_pages, page_size, kv_heads, head_dim)
            return torch.randn(shape, generator=generator, device=device).to(kv_dtype)

        page_select = None
        if selected_pages_fraction is not None:
            chosen = int(pages_per_row * selected_pages_fraction)
            order = torch.rand(batch, pages_per_row, generator=generator, device=device).argsort(dim=1)
            page_select = order[:, :chosen].to(torch.int32)
        return {
            "q": torch.randn(batch, query_heads, head_dim, generator=generator, device=device).to(torch.bfloat16),
            "k_cache": cache(), "v_cache": cache(),
            "page_table": torch.randperm(num_pages, generator=generator, device=device).to(torch.int32)
                               .view(batch, pages_per_row),
            "seq_lens": torch.full((batch,), length, dtype=torch.int32, device=device),
            "sm_scale": head_dim ** -0.5,
            "kv_scale": 1.0 if kv_dtype == torch.bfloat16 else 0.5,
            "page_select": page_select,
        }

    return make


# -- catalog entry --------------------------------------------------------------------------------
def params_of(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    return {"B": q.shape[0], "context": page_table.shape[1] * k_cache.shape[1], "S": k_cache.shape[1],
            "group": q.shape[1] // k_cache.shape[2], "Hkv": k_cache.shape[2], "D": q.shape[2],
            "kv_dtype": k_cache.dtype, "T": None if page_select is None else page_select.shape[1]}


PAGED_SHAPES = {"B": Span(0, 256), "context": Span(0, 131072), "S": OneOf((16, 32, 64, 128)),
                "group": Span(1, 16), "Hkv": Span(1, 16), "D": OneOf(contract.HEAD_DIMS)}
"""The bounds both decode kernels' cells share (the contracts' cells line)."""
_DENSE = {"T": OneOf((None,))}
_SPARSE = {"T": Span(0, 2048)}
_BF16 = {"kv_dtype": OneOf((torch.bfloat16,))}
_E4M3 = {"kv_dtype": OneOf((torch.float8_e4m3fn,))}
CELLS = (
    Cell("dense_bf16_kv", "bf16 KV cache decode (Llama-3 32/8, Qwen2 28/4 GQA; groups 1..16) over tables of up to "
         "128K tokens, holes, and empty rows beside long ones", {**PAGED_SHAPES, **_BF16, **_DENSE}),
    Cell("dense_e4m3_kv", "FP8 e4m3 KV cache with a per-tensor scale (half the bytes of bf16), same regimes",
         {**PAGED_SHAPES, **_E4M3, **_DENSE}),
    Cell("sparse_bf16_kv", "page-sparse decode (Quest / top-k page selection): up to 2048 selected logical pages "
         "per row with -1 padding, duplicates and out-of-range entries", {**PAGED_SHAPES, **_BF16, **_SPARSE}),
    Cell("sparse_e4m3_kv", "page-sparse decode over an FP8 e4m3 KV cache", {**PAGED_SHAPES, **_E4M3, **_SPARSE}),
)

BENCH_SHAPE = "B=64 L=8192 Hq=32 Hkv=8 D=128 page 64"


def decode_entry(of_contract, **fields) -> Entry:
    """A paged decode kernel's entry: band parity, claimed on cpu-interp and sm90, batch-invariant over
    the rows (``q``, ``page_table``, ``seq_lens``, ``page_select``); ``fields`` say the rest."""
    return Entry.of_contract(of_contract, parity=Parity.BAND, archs=frozenset({Arch.CPU_INTERP, Arch.SM90}),
                             batch_invariant=True, batch_args=("q", "page_table", "seq_lens", "page_select"),
                             **fields)


ENTRY = decode_entry(
    contract,
    kernel=paged_decode,
    params_of=params_of,
    cells=CELLS,
    limits=kernel_limits,
    bench=(
        BenchCase(f"bf16 KV, {BENCH_SHAPE}", _bench_call(torch.bfloat16), bytes_moved,
                  ">= 70% of copy bandwidth (stock gather + SDPA: 30%, 1656 us)"),
        BenchCase(f"e4m3 KV, {BENCH_SHAPE}", _bench_call(torch.float8_e4m3fn), bytes_moved,
                  "<= 0.6x the bf16 KV time"),
        BenchCase(f"bf16 KV, 1/4 of the pages selected, {BENCH_SHAPE}", _bench_call(torch.bfloat16, 0.25),
                  bytes_moved, "<= 0.35x the dense bf16 KV time"),
    ),
)
