"""attention/paged_decode_nvfp4kv — paged GQA decode over an NVFP4 KV cache (the seeds' GB300 target).

Contract (CONTRACTS.md): ``paged_decode_nvfp4kv(q[B, Hq, D], k_packed uint8[P, S, Hkv, D/2], k_scales
e4m3[P, S, Hkv, D/16], v_packed, v_scales, kv_global_scale fp32[1], page_table[B, M], seq_lens[B],
sm_scale, page_select=None) -> (o bf16[B, Hq, D], lse fp32[B, Hq])``: ``attention/paged_decode`` with
every K and V element ``e2m1(code) * float(scale) * (1 / kv_global_scale)`` (the NVFP4 Dequant line;
element 2j in the low nibble); band parity; batch-invariant.

Bytes: read the attended K and V, ``2 * n_b * Hkv * (D/2 + D/16)`` per row (72 bytes a token and
head at D = 128 where bf16 reads 256: 0.28x), q (``2 * B * Hq * D``); write o and lse; plus the split
partials (``B * Hq * splits * (D + 3) * 4``, 0.7% of the NVFP4 KV bytes at the bench shape with splits
of 2048).  B=64, L=8192, Hkv=8, D=128 is 604 MB of K and V: 140 us at the H200's 4.3 TB/s.

The structure is ``paged_decode``'s (``ops/attention/paged_decode.py``, whose pieces it imports): one
program per (row, KV head, split of ``split_tokens`` positions, never a function of B: batch
invariance), serving the G query heads of the KV head at once; the sparse selection sorted and
resolved once per row (``selection_metadata``); splits merged in float64 by their log-sum-exp
(``merge_splits``).  What is new is the tile's decode, in registers, and the scores' summation:

- V as exact bf16 operands: an E2M1 code's bits placed in an fp16 (``sign << 15 | (code & 7) << 9``) are
  ``e2m1(code) * 2^-14`` (index 1 lands in fp16's subnormals as 0.5 * 2^-14); e4m3 -> fp16 is exact;
  their product ``e2m1 * scale * 2^-14`` is exact in fp16 (at most 6 significant bits, every value a
  multiple of 2^-24 up to 6 * 448 * 2^-14), and ``e2m1 * scale`` exact in bf16.  So V reaches the tensor
  cores with no rounding, and the one per-tensor factor ``1 / kv_global_scale`` is applied to the partial
  sums instead of to each element: that moves o by at most an fp32 rounding, far inside its bf16 band.
  p multiplies V as bf16 hi + lo halves (``paged_decode``'s bf16 path: 16 bits over fp32's whole range).
  One fp16 ``2^15 p`` lost every p under 2^-39: on the H200 a row whose heavy tokens have zero V
  blocks came out 0 where its truth was 6.5e-13 (183 ULP of its row scale).
- K as the Dequant line decodes it: the exact ``e2m1 * scale`` times ``1 / kv_global_scale``, rounded
  once in fp32, element by element.  lse ~ max s carries the scores' error in fp32 ULPs:
  ``1 / kv_global_scale`` folded into the scores instead of each element put it 1.2 ULP from truth on
  the H200 where every legitimate fp32 order was within 0.16 (docs/ops/paged_decode_nvfp4kv.md).  ``q . k``
  is taken in fp32 on the CUDA cores (``LaunchPlan.scores_on_cuda_cores``): one query row of the group at a
  time, round-to-nearest FMAs over ``K * 2^e`` (``2^e`` brings the decode scale to [1, 2): exact, and no
  product falls in fp32's subnormals), an fp32 dot order like the legitimate ones; scaled back in float64
  with ``sm_scale`` and rounded once.  The plan it replaced (a bench variant now) took three tensor-core
  dots of K's exact bf16 parts (``k_hi + k_mid + k_lo``): exact products, but a Hopper tensor core's fp32
  accumulation truncates toward zero (``references/tensor_core.py``), which put lse 2.31 ULP off on an
  H100 against a 1-ULP band (issue 27; ``docs/lab/nvfp4kv_tensor_core_lse.py``).  ``sm_scale`` reaches
  the kernel as an fp32 hi + lo pair (48 bits) when it is a number, or as a pointer when it is a tensor on
  q's device, read in the kernel: no host sync, graph-capturable, so no limit of its own.
- A tile is decoded as two half tiles, the even elements (low nibbles) and the odd ones (high nibbles),
  from one vector read of each slot's bytes and one of its D/16 scales, and never joined: q, the score dots and the V accumulator
  are split the same way, and o's columns interleaved at the store (``_nvfp4_halves``).
- The decode scale ``1 / kv_global_scale`` is computed on the device (IEEE ``div_rn``: no host sync,
  graph-capturable) from the ENCODE scale the caller passes.
- Invalid memory is never loaded: codes and scales of a slot are read only for an attended token
  (masked loads give code 0 and scale 0), so NaN scales and garbage codes in unattended slots never
  reach an operation; masked scores are -inf before the running max.
- Numerics of the e4m3 plan of ``paged_decode``: float64 ``l`` and ``exp(s - m)`` (``_exp_float64_short``),
  one fp16 ``2^15 p`` for ``p @ v`` (11 bits above 2^-29, the stock op's bf16 p keeps 8), the rescale
  skipped while a row's max stays (the same bits), float64 merge.
- On the GPU tiles never cross a page (``block_n <= S``): a tile's page is one scalar load.  The
  interpreter's plan crosses pages (one table entry per slot): it pays per tile, not per element.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.attention.paged_decode import (BENCH_SHAPE, PAGED_SHAPES, _add_p_times_v, _dot_operand,
                                        _exp_float64_short, _live_positions, decode_entry,
                                        merge_splits, selection_metadata, split_partials)
from ops.catalog import BenchCase, Cell, OneOf, Span
from ops.triton_backend import interpreting
from ops.triton_masks import block_and
from references.attention import paged_decode_nvfp4kv as contract
from references.attention.paged_decode import attended_tokens
from references.formats.nvfp4 import NVFP4_BLOCK



# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    block_n: int       # token slots per K/V tile
    split_tokens: int  # token positions per program: a multiple of block_n, never a function of B
    num_warps: int
    num_stages: int
    min_dot_rows: int = 1      # the group's rows padded to a power of two and to at least this many
    cross_pages: bool = False  # tiles of block_n slots across pages; else capped at the page size
    # q . k in fp32 on the CUDA cores (round-to-nearest FMAs over the decoded fp32 K, one query row at a time),
    # else three tensor-core dots of K's exact bf16 parts: a Hopper tensor core's fp32 accumulation truncates
    # toward zero, and put lse 2.31 ULP off on an H100 against a 1-ULP band (issue 27,
    # docs/ops/paged_decode_nvfp4kv.md)
    scores_on_cuda_cores: bool = True
    # with the CUDA-core scores: q's rows read again from L1 every tile, not kept in registers (Triton hoists
    # them out of the loop: 205 registers at D=128, a group of 4, where the reloads take 115 and ~4 more
    # instructions an element, and 0.85x the time on an H100; docs/ops/paged_decode_nvfp4kv.md)
    q_rows_reloaded: bool = True

    def tile(self, page_size: int) -> int:
        return self.block_n if self.cross_pages else min(self.block_n, page_size)

    def warps(self, block_n: int, head_dim: int) -> int:
        """``num_warps``, capped where a half tile would give a thread fewer than 8 elements: the scales'
        ``tl.gather`` then has no warp-local layout, and Triton 3.6 aborts compiling it for sm_90a
        (``OptimizeThreadLocality.cpp: isWarpLocal``: D = 64 in pages of 16 at 4 warps, D = 128 in pages
        of 16 at 8)."""
        return max(1, min(self.num_warps, block_n * (head_dim // 2) // (8 * 32)))


def launch_plan(head_dim: int) -> LaunchPlan:
    if interpreting():
        # The interpreter pays per op, not per element: wide tiles, and splits of 128 positions so the
        # CPU strategy's rows (<= 256 positions) span two splits, through the rescale and the merge.
        # Tiles cross pages: pages of 16 would otherwise take four times the tiles.
        return LaunchPlan(block_n=64, split_tokens=128, num_warps=4, num_stages=1, cross_pages=True)
    # The e4m3 plan of paged_decode (splits of 2048, 3 stages, the group's own rows), with 32-token tiles:
    # a tile's K is decoded to fp32 in registers, the scores in fp32 on the CUDA cores, q's rows read again
    # each tile.  ptxas sm_90a, Triton 3.6, compiled on the CPU: D=128, G=4, 4 warps: 115 registers, no
    # spills (q's rows kept in registers: 205; docs/receipts/ hold Triton 3.9's counts).  The sweep of
    # bench_variants: docs/ops/paged_decode_nvfp4kv.md.
    return LaunchPlan(block_n=32, split_tokens=2048, num_warps=8 if head_dim == 256 else 4, num_stages=3)

# -- kernels --------------------------------------------------------------------------------------
@triton.jit
def _e2m1_fp16(codes):
    """E2M1 codes (int16, 0..15) as fp16 ``e2m1(code) * 2^-14``, exactly: the code's bits placed in an fp16."""
    return (((codes & 0x8) << 12) | ((codes & 0x7) << 9)).to(tl.float16, bitcast=True)


@triton.jit
def _nvfp4_halves(packed_rows, packed_stride, scale_rows, scale_stride, valid, BLOCK_N: tl.constexpr,
                  D: tl.constexpr):
    """Two ``[BLOCK_N, D/2]`` tiles of ``e2m1(code) * scale * 2^-14`` in fp16, exactly: the even elements (the
    low nibbles) and the odd ones (the high nibbles); 0 where not ``valid``.

    ``packed_rows``: ``[BLOCK_N, 1]`` addresses of each slot's packed bytes, ``packed_stride`` apart;
    ``scale_rows``, ``scale_stride``: of its scales.  The bytes are read once, whole rows (vector loads);
    the two halves are never joined back into one tile: ``tl.join(...).reshape`` fed the score dots
    elements in the wrong order on sm_90 (Triton 3.6; correct under the interpreter), 158 to 743 ULP off,
    and reading each element's own byte instead made the L1 loads the bound (docs/ops/
    paged_decode_nvfp4kv.md).  Elements 2j and 2j + 1 share block j // 8's scale: each slot's D/16 scales
    are read once and gathered in registers (``tl.gather``), not read again per element.  Masked slots load
    code 0 and scale 0: nothing of theirs is read."""
    offs = tl.arange(0, D // 2)
    packed = tl.load(packed_rows + offs[None, :] * packed_stride, mask=valid[:, None], other=0).to(tl.int16)
    blocks = tl.load(scale_rows + tl.arange(0, D // 16)[None, :] * scale_stride, mask=valid[:, None],
                     other=0.0).to(tl.float16)
    scales = tl.gather(blocks, tl.broadcast_to((offs // 8)[None, :], (BLOCK_N, D // 2)), axis=1)
    return _e2m1_fp16(packed & 0xF) * scales, _e2m1_fp16(packed >> 4) * scales


@triton.jit
def _split_in_bf16(k, k_unit):
    """The three bf16 parts of ``k * k_unit`` (fp32, 24 significant bits), exactly, largest first."""
    k = k * k_unit
    k_hi = k.to(tl.bfloat16, fp_downcast_rounding="rtne")
    rest = k - k_hi.to(tl.float32)
    k_mid = rest.to(tl.bfloat16, fp_downcast_rounding="rtne")
    return k_hi, k_mid, (rest - k_mid.to(tl.float32)).to(tl.bfloat16, fp_downcast_rounding="rtne")


# Sizes and metadata strides are not specialized, nor the metadata's alignment (scalar loads and
# gathers): one compiled kernel per head dim, page size, group's power of two and dense/sparse, whatever
# the batch, table and pool sizes.  q's and the caches' pointers and strides stay specialized.
@triton.jit(do_not_specialize=["num_pages", "kv_heads", "group", "pages_per_row", "table_stride_b",
                               "table_stride_m", "seq_lens_stride", "entries", "splits"],
            do_not_specialize_on_alignment=["table_ptr", "seq_lens_ptr", "selected_pages_ptr",
                                            "selected_live_slots_ptr"])
def _decode_splits_nvfp4(
    q_ptr, q_stride_b, q_stride_h, q_stride_d,                                    # [B, Hq, D]
    kc_ptr, kc_stride_p, kc_stride_s, kc_stride_h, kc_stride_d,                   # K codes [P, S, Hkv, D/2]
    ks_ptr, ks_stride_p, ks_stride_s, ks_stride_h, ks_stride_d,                   # K scales [P, S, Hkv, D/16]
    vc_ptr, vc_stride_p, vc_stride_s, vc_stride_h, vc_stride_d,
    vs_ptr, vs_stride_p, vs_stride_s, vs_stride_h, vs_stride_d,
    global_scale_ptr, num_pages, kv_heads, group,
    table_ptr, table_stride_b, table_stride_m, pages_per_row,
    seq_lens_ptr, seq_lens_stride,
    selected_pages_ptr, selected_live_slots_ptr, entries,
    sm_scale_hi, sm_scale_lo, sm_scale_ptr,
    part_m_ptr, part_l_ptr, part_acc_ptr, splits,
    D: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_TOKENS: tl.constexpr,
    PAGE_SIZE: tl.constexpr, SPARSE: tl.constexpr, OPERAND: tl.constexpr, REAL_ROWS: tl.constexpr,
    CROSS_PAGES: tl.constexpr, SCALE_IN_TENSOR: tl.constexpr, SCORES_ON_CUDA_CORES: tl.constexpr,
    Q_ROWS_RELOADED: tl.constexpr,
):
    E2M1_UNIT: tl.constexpr = 16384.0   # e2m1(code) per unit of the code's bits placed in an fp16 (2^-14)
    pid = tl.program_id(0)
    split = pid % splits
    kv_head = (pid // splits) % kv_heads
    row = pid // (splits * kv_heads)
    offs_g = tl.arange(0, GROUP_PAD)
    offs_h = tl.arange(0, D // 2)   # the head's even elements are 2 * offs_h, its odd ones 2 * offs_h + 1
    offs_n = tl.arange(0, BLOCK_N)
    in_group = offs_g < group
    computed = offs_g < REAL_ROWS   # padding rows past the group's power of two: p = 0, no exp

    limit = _live_positions(seq_lens_ptr, seq_lens_stride, row, pages_per_row, PAGE_SIZE, entries, SPARSE)
    start = split * SPLIT_TOKENS
    end = tl.minimum(start + SPLIT_TOKENS, limit)

    q_group = q_ptr + row.to(tl.int64) * q_stride_b + kv_head * group * q_stride_h
    q_rows = q_group + offs_g * q_stride_h
    q_even = tl.load(q_rows[:, None] + (2 * offs_h)[None, :] * q_stride_d, mask=in_group[:, None], other=0.0)
    q_odd = tl.load(q_rows[:, None] + (2 * offs_h + 1)[None, :] * q_stride_d, mask=in_group[:, None], other=0.0)
    q_even, q_odd = q_even.to(OPERAND), q_odd.to(OPERAND)
    decode_scale = tl.math.div_rn(1.0, tl.load(global_scale_ptr))
    # K's parts are taken from K * 2^e, e the power of two that brings decode_scale to [1, 2): exact (K is
    # rounded before), and it keeps the lowest part out of bf16's subnormals whatever the global scale
    scale_exponent = (decode_scale.to(tl.int32, bitcast=True) >> 23) & 0xFF   # biased; 0 when subnormal
    unit_exponent = tl.maximum(127 - scale_exponent, -126)
    k_unit = ((unit_exponent + 127) << 23).to(tl.float32, bitcast=True)
    inverse_unit = ((1023 - unit_exponent).to(tl.int64) << 52).to(tl.float64, bitcast=True)
    if SCALE_IN_TENSOR:   # a one-element tensor on this device, read here: no host sync, graph-capturable
        sm_scale = tl.load(sm_scale_ptr).to(tl.float64)
    else:
        sm_scale = tl.cast(sm_scale_hi, tl.float64) + tl.cast(sm_scale_lo, tl.float64)   # the float64 given, to 2^-48
    score_scale = sm_scale * inverse_unit   # exact: a power of two
    table_row = table_ptr + row.to(tl.int64) * table_stride_b
    selected_row = row.to(tl.int64) * entries
    kc_tile = kc_ptr + kv_head * kc_stride_h
    ks_tile = ks_ptr + kv_head * ks_stride_h
    vc_tile = vc_ptr + kv_head * vc_stride_h
    vs_tile = vs_ptr + kv_head * vs_stride_h

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float64)
    acc_even = tl.zeros([GROUP_PAD, D // 2], tl.float32)
    acc_odd = tl.zeros([GROUP_PAD, D // 2], tl.float32)
    for position in range(start, end, BLOCK_N):
        within = position + offs_n < end
        if CROSS_PAGES:   # each slot its own page entry
            entry, slot, entry_read = (position + offs_n) // PAGE_SIZE, (position + offs_n) % PAGE_SIZE, within
        else:             # the tile lies in one page: its entry is one scalar load (``position < end``)
            entry, slot, entry_read = position // PAGE_SIZE, position % PAGE_SIZE + offs_n, position < end
        if SPARSE:   # entries resolved by _resolve_selection: -1 unless counted and in the pool
            physical = tl.load(selected_pages_ptr + selected_row + entry, mask=entry_read, other=-1)
            live_slots = tl.load(selected_live_slots_ptr + selected_row + entry, mask=entry_read, other=0)
            valid = block_and(within & (slot < live_slots), physical >= 0)
        else:        # dense positions are tokens, and end <= seq_len
            physical = tl.load(table_row + entry * table_stride_m, mask=entry_read, other=-1)
            valid = block_and(within, (physical >= 0) & (physical < num_pages))
        physical = physical.to(tl.int64)

        k_even, k_odd = _nvfp4_halves(kc_tile + (physical * kc_stride_p + slot * kc_stride_s)[:, None], kc_stride_d,
                                      ks_tile + (physical * ks_stride_p + slot * ks_stride_s)[:, None], ks_stride_d,
                                      valid, BLOCK_N, D)
        # K exactly as the Dequant line decodes it (e2m1 * scale exact, then times 1 / kv_global_scale
        # rounded once in fp32: folding that scale into the scores instead put lse 1.2 ULP off on the
        # H200 where every legitimate fp32 order was within 0.16); the dots scaled in float64, the score
        # rounded once.
        if SCORES_ON_CUDA_CORES:
            # fp32 round-to-nearest sums of q times K * k_unit (exact: a power of two on K already rounded),
            # one query row of the group at a time, its q loaded here (a row of a register tensor cannot be
            # indexed; Triton hoists these loads out of the loop unless Q_ROWS_RELOADED); the padding rows
            # past REAL_ROWS keep score 0, as q's zero rows give on the dots
            k_even = ((k_even.to(tl.float32) * E2M1_UNIT) * decode_scale) * k_unit
            k_odd = ((k_odd.to(tl.float32) * E2M1_UNIT) * decode_scale) * k_unit
            unit_scores = tl.zeros([GROUP_PAD, BLOCK_N], tl.float32)
            # a mask true on every tile that the compiler cannot hoist keeps the rows' loads in the loop
            q_read = (position < end) if Q_ROWS_RELOADED else True
            for r in tl.static_range(REAL_ROWS):
                q_row = q_group + r * q_stride_h
                q_row_even = tl.load(q_row + (2 * offs_h) * q_stride_d, mask=(r < group) & q_read,
                                     other=0.0).to(tl.float32)
                q_row_odd = tl.load(q_row + (2 * offs_h + 1) * q_stride_d, mask=(r < group) & q_read,
                                    other=0.0).to(tl.float32)
                row_scores = (tl.sum(q_row_even[None, :] * k_even, axis=1)
                              + tl.sum(q_row_odd[None, :] * k_odd, axis=1))
                unit_scores = tl.where(offs_g[:, None] == r, row_scores[None, :], unit_scores)
        else:
            # split exactly into three bf16 parts (24 significant bits), each dot with q on the tensor cores
            # exact in its products and accumulated in fp32 (truncated on sm_90: issue 27), smallest parts first
            even_hi, even_mid, even_lo = _split_in_bf16((k_even.to(tl.float32) * E2M1_UNIT) * decode_scale, k_unit)
            odd_hi, odd_mid, odd_lo = _split_in_bf16((k_odd.to(tl.float32) * E2M1_UNIT) * decode_scale, k_unit)
            unit_scores = tl.dot(q_even, tl.trans(even_lo.to(OPERAND)))
            unit_scores = tl.dot(q_odd, tl.trans(odd_lo.to(OPERAND)), unit_scores)
            unit_scores = tl.dot(q_even, tl.trans(even_mid.to(OPERAND)), unit_scores)
            unit_scores = tl.dot(q_odd, tl.trans(odd_mid.to(OPERAND)), unit_scores)
            unit_scores = tl.dot(q_even, tl.trans(even_hi.to(OPERAND)), unit_scores)
            unit_scores = tl.dot(q_odd, tl.trans(odd_hi.to(OPERAND)), unit_scores)
        finite_scores = (unit_scores.to(tl.float64) * score_scale).to(tl.float32)
        scores = tl.where(valid[None, :], finite_scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        m_base = tl.where(m_new == float("-inf"), 0.0, m_new)   # a group with nothing valid yet
        # m_new == m in every row gives alpha = 1 (or 0 on an l and acc still 0): skipping the rescale
        # keeps the bits, and after a row's first tiles its max rarely moves
        if tl.sum((m_new != m).to(tl.int32), axis=0) != 0:
            alpha = tl.exp((m - m_base).to(tl.float64))
            l = l * alpha
            acc_even = acc_even * alpha.to(tl.float32)[:, None]
            acc_odd = acc_odd * alpha.to(tl.float32)[:, None]
        p_exact = _exp_float64_short(finite_scores, m_base[:, None])
        p_exact = tl.where(valid[None, :] & computed[:, None], p_exact, 0.0)
        l = l + tl.sum(p_exact, axis=1)
        v_even, v_odd = _nvfp4_halves(vc_tile + (physical * vc_stride_p + slot * vc_stride_s)[:, None], vc_stride_d,
                                      vs_tile + (physical * vs_stride_p + slot * vs_stride_s)[:, None], vs_stride_d,
                                      valid, BLOCK_N, D)
        p = p_exact.to(tl.float32)
        v_even = (v_even.to(tl.float32) * E2M1_UNIT).to(tl.bfloat16)   # e2m1 * scale: exact
        v_odd = (v_odd.to(tl.float32) * E2M1_UNIT).to(tl.bfloat16)
        acc_even = _add_p_times_v(acc_even, p, v_even.to(OPERAND), tl.bfloat16, OPERAND, True)
        acc_odd = _add_p_times_v(acc_odd, p, v_odd.to(OPERAND), tl.bfloat16, OPERAND, True)
        m = m_new

    part = ((row.to(tl.int64) * kv_heads + kv_head) * splits + split) * group + offs_g
    written = block_and(in_group, start < limit)
    tl.store(part_m_ptr + part, m, mask=written)
    tl.store(part_l_ptr + part, l, mask=written)
    # acc holds the sum of p * e2m1 * scale: one fp32 multiply gives p times the decoded V
    acc_rows = part_acc_ptr + part[:, None] * D
    tl.store(acc_rows + (2 * offs_h)[None, :], acc_even * decode_scale, mask=written[:, None])
    tl.store(acc_rows + (2 * offs_h + 1)[None, :], acc_odd * decode_scale, mask=written[:, None])


# -- host wrapper ---------------------------------------------------------------------------------
def run_plan(plan: LaunchPlan, q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens,
             sm_scale, page_select=None):
    """Launch ``plan`` on already-validated arguments (``tools/bench`` sweeps plans through this)."""
    batch, query_heads, head_dim = q.shape
    num_pages, page_size, kv_heads, _ = k_packed.shape
    pages_per_row = page_table.shape[1]
    if batch * query_heads == 0 or page_size == 0:   # no token lives in pages of no slots: every row empty
        return (torch.zeros(batch, query_heads, head_dim, dtype=torch.bfloat16, device=q.device),
                torch.full((batch, query_heads), float("-inf"), dtype=torch.float32, device=q.device))
    o = torch.empty(batch, query_heads, head_dim, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(batch, query_heads, dtype=torch.float32, device=q.device)
    group = query_heads // kv_heads
    sparse = page_select is not None
    entries, positions, selected_pages, selected_live_slots = selection_metadata(page_table, seq_lens, page_select,
                                                                                 page_size, num_pages)
    block_n, split_tokens = plan.tile(page_size), plan.split_tokens
    splits = max(1, triton.cdiv(positions, split_tokens))
    part_m, part_l, part_acc = split_partials(batch * kv_heads * splits * group, head_dim, q.device)
    group_pad = max(plan.min_dot_rows, triton.next_power_of_2(group))
    _decode_splits_nvfp4[(batch * kv_heads * splits,)](
        q, *q.stride(),
        k_packed, *k_packed.stride(), k_scales, *k_scales.stride(),
        v_packed, *v_packed.stride(), v_scales, *v_scales.stride(),
        kv_global_scale, num_pages, kv_heads, group,
        page_table, *page_table.stride(), pages_per_row,
        seq_lens, seq_lens.stride(0),
        selected_pages, selected_live_slots, entries,
        *_scale_arguments(sm_scale, q.device),
        part_m, part_l, part_acc, splits,
        D=head_dim, GROUP_PAD=group_pad, BLOCK_N=block_n, SPLIT_TOKENS=split_tokens, PAGE_SIZE=page_size,
        SPARSE=sparse, OPERAND=_dot_operand(tl.bfloat16), REAL_ROWS=triton.next_power_of_2(group),
        CROSS_PAGES=plan.cross_pages and block_n > page_size,
        SCALE_IN_TENSOR=isinstance(sm_scale, torch.Tensor) and sm_scale.device == q.device,
        SCORES_ON_CUDA_CORES=plan.scores_on_cuda_cores, Q_ROWS_RELOADED=plan.q_rows_reloaded,
        num_warps=plan.warps(block_n, head_dim), num_stages=plan.num_stages,
    )
    # the decode scale is already in the partials: o is merged with a factor of 1
    merge_splits((part_m, part_l, part_acc), splits, kv_heads, group, seq_lens, pages_per_row, page_size, entries, 1.0,
                 o, lse, group_pad, split_tokens, sparse)
    return o, lse


def _scale_arguments(sm_scale, device: torch.device) -> tuple:
    """``(hi, lo, pointer)`` of ``sm_scale``: a tensor on ``device`` goes as its pointer, read by the kernel; a
    number, or a tensor elsewhere (on the host: read without a device sync), as ``hi + lo``, both fp32
    (Triton's float arguments): 48 bits of it reach the kernel."""
    if isinstance(sm_scale, torch.Tensor) and sm_scale.device == device:
        return 0.0, 0.0, sm_scale.reshape(1)
    value = float(sm_scale)
    hi = float(torch.tensor(value, dtype=torch.float32))
    return hi, float(torch.tensor(value - hi, dtype=torch.float32)), None


def paged_decode_nvfp4kv(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens,
                         sm_scale, page_select=None):
    contract.validate(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
                      page_select)
    return run_plan(launch_plan(q.shape[2]), q, k_packed, k_scales, v_packed, v_scales, kv_global_scale,
                    page_table, seq_lens, sm_scale, page_select)


def bytes_moved(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
                page_select=None) -> int:
    """The attended K and V codes and scales (what the op must read) + q + o + lse."""
    _, page_size, kv_heads, packed_bytes = k_packed.shape
    tokens = int(attended_tokens(page_table, seq_lens, page_size, page_select).sum())
    per_token_head = packed_bytes + k_scales.shape[3] * k_scales.element_size()
    return 2 * tokens * kv_heads * per_token_head + 2 * q.numel() * q.element_size() + 4 * q.shape[0] * q.shape[1]


def bench_variants(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
                   page_select=None) -> dict:
    """Plans around the default, for ``tools/bench --variants`` to time on the device (none swept yet)."""
    default = launch_plan(q.shape[2])
    replace = dataclasses.replace
    plans = {"default": default,
             "split 1024": replace(default, split_tokens=1024),
             "split 4096": replace(default, split_tokens=4096),
             "2 stages": replace(default, num_stages=2),
             "block 64": replace(default, block_n=64),
             "block 16": replace(default, block_n=16),
             "rows 16": replace(default, min_dot_rows=16),
             "8 warps": replace(default, num_warps=8),
             "scores on tensor cores (bf16 parts)": replace(default, scores_on_cuda_cores=False),
             "q rows in registers": replace(default, q_rows_reloaded=False)}
    distinct = {}
    for label, plan in plans.items():
        if plan not in distinct.values():
            distinct[label] = plan
    return {label: (lambda plan=plan, **kwargs: run_plan(plan, **kwargs)) for label, plan in distinct.items()}


def _bench_call(selected_pages_fraction: float | None = None):
    """``paged_decode``'s bench shape (B=64 rows of L=8192 tokens, Hq=32, Hkv=8, D=128, pages of 64 slots),
    so one ``tools/bench`` run reads the NVFP4 / bf16 ratio; codes uniform over all 16, block scales
    e4m3 values of N(0, 1) magnitudes, the encode scale 2688 / 6 (decoded |K|, |V| up to ~6)."""
    batch, length, query_heads, kv_heads, head_dim, page_size = 64, 8192, 32, 8, 128, 64

    def make(device):
        generator = torch.Generator(device=device).manual_seed(0)
        pages_per_row = length // page_size
        num_pages = batch * pages_per_row
        slots = (num_pages, page_size, kv_heads)

        def codes():
            return torch.randint(0, 256, (*slots, head_dim // 2), generator=generator, device=device,
                                 dtype=torch.uint8)

        def scales():
            return torch.randn(*slots, head_dim // NVFP4_BLOCK, generator=generator, device=device).abs().to(
                torch.float8_e4m3fn)

        page_select = None
        if selected_pages_fraction is not None:
            chosen = int(pages_per_row * selected_pages_fraction)
            order = torch.rand(batch, pages_per_row, generator=generator, device=device).argsort(dim=1)
            page_select = order[:, :chosen].to(torch.int32)
        return {
            "q": torch.randn(batch, query_heads, head_dim, generator=generator, device=device).to(torch.bfloat16),
            "k_packed": codes(), "k_scales": scales(), "v_packed": codes(), "v_scales": scales(),
            "kv_global_scale": torch.tensor([448.0], device=device),
            "page_table": torch.randperm(num_pages, generator=generator, device=device).to(torch.int32)
                               .view(batch, pages_per_row),
            "seq_lens": torch.full((batch,), length, dtype=torch.int32, device=device),
            "sm_scale": head_dim ** -0.5,
            "page_select": page_select,
        }

    return make


# -- catalog entry --------------------------------------------------------------------------------
def params_of(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
              page_select=None):
    return {"B": q.shape[0], "context": page_table.shape[1] * k_packed.shape[1], "S": k_packed.shape[1],
            "group": q.shape[1] // max(1, k_packed.shape[2]), "Hkv": k_packed.shape[2], "D": q.shape[2],
            "T": None if page_select is None else page_select.shape[1]}


CELLS = (
    Cell("dense_nvfp4_kv", "NVFP4 KV cache (E2M1 codes, e4m3 scale per 16, fp32 global scale: 0.28x the bytes of "
         "bf16) decode, GQA groups 1..16 over tables of up to 128K tokens, holes, empty rows beside long ones",
         {**PAGED_SHAPES, "T": OneOf((None,))}),
    Cell("sparse_nvfp4_kv", "the seeds' GB300 target: page-sparse GQA decode over an NVFP4 KV cache, up to 2048 "
         "selected logical pages per row with -1 padding, duplicates and out-of-range entries",
         {**PAGED_SHAPES, "T": Span(0, 2048)}),
)

ENTRY = decode_entry(
    contract,
    kernel=paged_decode_nvfp4kv,
    params_of=params_of,
    cells=CELLS,
    bench=(
        BenchCase(f"NVFP4 KV, {BENCH_SHAPE}", _bench_call(), bytes_moved,
                  "<= 0.4x paged_decode's bf16 KV time at this shape (it reads 0.28x the bytes)"),
        BenchCase(f"NVFP4 KV, 1/4 of the pages selected, {BENCH_SHAPE}", _bench_call(0.25), bytes_moved,
                  "<= 0.35x the dense NVFP4 KV time"),
    ),
)
