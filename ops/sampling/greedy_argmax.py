"""sampling/greedy_argmax — the token a greedy decoder emits, one per row of logits.

Contract (CONTRACTS.md): ``greedy_argmax(logits[R, V]) -> int64[R]``; the first NaN of a row wins,
otherwise the first index of the row maximum, ``-0.0 == +0.0``; rows may be strided (``buf[:, :V]``,
``buf[::2]``); bitwise parity; batch-invariant.

Bytes: read ``R * V * itemsize``, write ``8 * R`` (plus ``12 * R * splits`` of partials when a row
is split).  It is memory-bound: at 4.3 TB/s copy bandwidth, [1024, 262144] bf16 is 125 us of reads.

A row is reduced per lane: each of BLOCK lanes keeps its first maximum over the columns it visits
(strict ``>`` keeps the earliest), and the lanes are merged once at the end; a chunk that holds a NaN
is swept a second time for its first NaN.  Short rows (V <= 1024) are reduced several to a program.  When there are
too few rows to fill the GPU, a row is split into chunks reduced by separate programs and merged by a
second small kernel; chunks are in column order, so the smallest index among equal maxima is still the
first.  Integer answers are exact, so the plan may depend on R without breaking batch invariance.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, BenchCase, Cell, Entry, OneOf, Parity, Span
from ops.triton_backend import sm_count
from references.sampling import greedy_argmax as contract

NO_INDEX = 2**30  # above every valid column (V <= 2**20)


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    num_warps: int
    block: int       # columns per sweep of one program
    splits: int      # programs per row
    chunk: int       # columns per program (a multiple of block)
    rows_per_program: int = 0  # short rows: a [rows_per_program, block] tile per program, no split


SHORT_ROW_COLUMNS = 1024  # rows this short are reduced several per program, in one tile
TILE_ELEMENTS = 4096


def _floor_power_of_2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def launch_plan(rows: int, vocab: int, element_size: int, sms: int,
                programs_per_sm: int = 4, sweep_bytes: int = 2048, num_warps: int = 8) -> LaunchPlan:
    vector = 16 // element_size  # columns per 16-byte load
    columns = max(triton.next_power_of_2(vocab), 16)
    if columns <= SHORT_ROW_COLUMNS:
        # a program per short row would be mostly launch cost: take several rows per tile, while
        # keeping at least one program per SM
        rows_per_program = _floor_power_of_2(min(TILE_ELEMENTS // columns, triton.cdiv(max(rows, 1), sms)))
        warps = _floor_power_of_2(max(1, min(num_warps, rows_per_program * columns // (32 * vector))))
        return LaunchPlan(num_warps=warps, block=columns, splits=1, chunk=columns, rows_per_program=rows_per_program)
    # Fewer rows than `programs_per_sm` per SM leave SMs idle or short of loads in flight: split rows,
    # keeping chunks of at least 1024 columns so the merge stays negligible.  (H200, 2026-11-29, bf16:
    # 4 programs per SM and 2 KB sweeps timed best of 32 plans at both bench shapes, [1024, 262144] in
    # 125.6 us, one program a row, and [256, 152064] in 23.5 us, 3 splits; 16 an SM, the default until
    # 2026-12-05d, 137.2 and 25.3 us; docs/results/bench_greedy_variants.md)
    splits = 1
    if rows < programs_per_sm * sms:
        splits = max(1, min(triton.cdiv(programs_per_sm * sms, max(rows, 1)), triton.cdiv(vocab, 1024)))
    per_program = triton.cdiv(vocab, splits)
    block = max(min(sweep_bytes // element_size, triton.next_power_of_2(per_program)), 32 * vector)
    # short chunks: fewer warps rather than sweeps of mostly masked columns
    warps = _floor_power_of_2(max(1, min(num_warps, block // (32 * vector))))
    chunk = triton.cdiv(per_program, block) * block
    return LaunchPlan(num_warps=warps, block=block, splits=triton.cdiv(vocab, chunk), chunk=chunk)


def bench_variants(logits: torch.Tensor) -> dict:
    """Launch plans around the default, for ``tools/bench --variants`` to time on the device."""
    rows, vocab = logits.shape
    variants = {}
    for programs_per_sm in (4, 8, 16, 32):
        for sweep_bytes in (2048, 4096, 8192, 16384):
            for num_warps in (4, 8):
                plan = launch_plan(rows, vocab, logits.element_size(), sm_count(logits.device),
                                   programs_per_sm, sweep_bytes, num_warps)
                label = f"{programs_per_sm}/SM {sweep_bytes // 1024}KB {num_warps}w ({plan.splits} splits)"
                variants[label] = lambda logits, plan=plan: run_plan(logits, plan)
    return variants


# -- kernels --------------------------------------------------------------------------------------
# splits only places a program's three partials (bounds and index tensors: one compile per plan); the
# logits' alignment, row stride and vocab stay specialized: they set the width of the hot loads.
@triton.jit(do_not_specialize=["splits"])
def _argmax_chunks(
    # input
    logits_ptr, row_stride, vocab, chunk,
    # output: the answer (one split) or per-split partials
    out_ptr, part_value_ptr, part_index_ptr, part_nan_ptr, splits,
    # meta
    BLOCK: tl.constexpr, NO_INDEX: tl.constexpr, ONE_SPLIT: tl.constexpr,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    row_ptr = logits_ptr + row.to(tl.int64) * row_stride
    start = split * chunk
    end = tl.minimum(start + chunk, vocab)
    full_end = start + (end - start) // BLOCK * BLOCK
    lanes = tl.arange(0, BLOCK)
    # The hot loop is four instructions a column (convert, compare, max, select of the sweep's offset):
    # it is issue-bound otherwise (H200: 15 a column ran at 60% of copy bandwidth).  NaN is not looked
    # for here: the NaN-propagating max leaves NaN in a lane that saw one, and only such chunks search
    # again.  Each lane starts at its own first column, so an all -inf chunk answers its first column.
    lane_value = tl.full([BLOCK], float("-inf"), tl.float32)
    lane_offset = tl.zeros([BLOCK], tl.int32) + start
    for offset in range(start, full_end, BLOCK):
        x = tl.load(row_ptr + offset + lanes).to(tl.float32)
        lane_offset = tl.where(x > lane_value, offset, lane_offset)  # strict: the earliest stays
        lane_value = tl.maximum(lane_value, x, propagate_nan=tl.PropagateNan.ALL)
    x = tl.load(row_ptr + full_end + lanes, mask=full_end + lanes < end, other=float("-inf")).to(tl.float32)
    lane_offset = tl.where(x > lane_value, full_end, lane_offset)
    lane_value = tl.maximum(lane_value, x, propagate_nan=tl.PropagateNan.ALL)
    lane_index = lane_offset + lanes

    first_nan = tl.full([], NO_INDEX, tl.int32)
    if tl.max((lane_value != lane_value).to(tl.int32), axis=0) > 0:
        lane_nan = tl.full([BLOCK], NO_INDEX, tl.int32)
        for offset in range(start, end, BLOCK):
            cols = offset + lanes
            x = tl.load(row_ptr + cols, mask=cols < end, other=0.0).to(tl.float32)
            lane_nan = tl.minimum(lane_nan, tl.where(x != x, cols, NO_INDEX))
        first_nan = tl.min(lane_nan, axis=0)
        lane_value = tl.where(lane_value != lane_value, float("-inf"), lane_value)  # keep NaN out of tl.max
    best = tl.max(lane_value, axis=0)
    # == merges -0.0 with +0.0: equal maxima, the smallest column wins
    best_index = tl.min(tl.where(lane_value == best, lane_index, NO_INDEX), axis=0)
    if ONE_SPLIT:
        tl.store(out_ptr + row, tl.where(first_nan != NO_INDEX, first_nan, best_index).to(tl.int64))
    else:
        slot = row * splits + split
        tl.store(part_value_ptr + slot, best)
        tl.store(part_index_ptr + slot, best_index)
        tl.store(part_nan_ptr + slot, first_nan)


# rows only masks whole rows (bounds and index tensors: one compile per plan)
@triton.jit(do_not_specialize=["rows"])
def _argmax_short_rows(
    logits_ptr, row_stride, rows, vocab,
    out_ptr,
    ROWS: tl.constexpr, COLS: tl.constexpr, NO_INDEX: tl.constexpr,
):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)[None, :]
    inside = (row[:, None] < rows) & (cols < vocab)
    x = tl.load(logits_ptr + row[:, None].to(tl.int64) * row_stride + cols, mask=inside,
                other=float("-inf")).to(tl.float32)
    first_nan = tl.min(tl.where(inside & (x != x), cols, NO_INDEX), axis=1)
    valid = inside & (x == x)
    x = tl.where(valid, x, float("-inf"))
    best = tl.max(x, axis=1)
    # == merges -0.0 with +0.0; an all -inf row has every column equal to its max: column 0
    first_max = tl.min(tl.where(valid & (x == best[:, None]), cols, NO_INDEX), axis=1)
    tl.store(out_ptr + row, tl.where(first_nan != NO_INDEX, first_nan, first_max).to(tl.int64), mask=row < rows)


# splits stays specialized: divisible by 16, a row's partials load two to a thread (sm90 PTX)
@triton.jit
def _argmax_merge(
    part_value_ptr, part_index_ptr, part_nan_ptr, splits,
    out_ptr,
    SPLITS: tl.constexpr, NO_INDEX: tl.constexpr,
):
    row = tl.program_id(0)
    lanes = tl.arange(0, SPLITS)
    valid = lanes < splits
    slot = row * splits + lanes
    value = tl.load(part_value_ptr + slot, mask=valid, other=float("-inf"))
    index = tl.load(part_index_ptr + slot, mask=valid, other=NO_INDEX)
    first_nan = tl.min(tl.load(part_nan_ptr + slot, mask=valid, other=NO_INDEX), axis=0)
    has_index = index != NO_INDEX  # a chunk of only NaN has no maximum
    best = tl.max(tl.where(has_index, value, float("-inf")), axis=0)
    best_index = tl.min(tl.where(has_index & (value == best), index, NO_INDEX), axis=0)
    tl.store(out_ptr + row, tl.where(first_nan != NO_INDEX, first_nan, best_index).to(tl.int64))


# -- host wrapper ---------------------------------------------------------------------------------
def run_plan(logits: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    """Launch ``plan`` on already-validated logits (``tools/bench`` sweeps plans through this)."""
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if rows == 0:
        return out
    if plan.rows_per_program:
        _argmax_short_rows[(triton.cdiv(rows, plan.rows_per_program),)](
            logits, logits.stride(0), rows, vocab, out,
            ROWS=plan.rows_per_program, COLS=plan.block, NO_INDEX=NO_INDEX, num_warps=plan.num_warps,
        )
        return out
    one_split = plan.splits == 1
    parts = (1,) if one_split else (rows, plan.splits)
    part_value = torch.empty(parts, dtype=torch.float32, device=logits.device)
    part_index = torch.empty(parts, dtype=torch.int32, device=logits.device)
    part_nan = torch.empty(parts, dtype=torch.int32, device=logits.device)
    _argmax_chunks[(rows, plan.splits)](
        logits, logits.stride(0), vocab, plan.chunk,
        out, part_value, part_index, part_nan, plan.splits,
        BLOCK=plan.block, NO_INDEX=NO_INDEX, ONE_SPLIT=one_split, num_warps=plan.num_warps,
    )
    if not one_split:
        _argmax_merge[(rows,)](
            part_value, part_index, part_nan, plan.splits, out,
            SPLITS=triton.next_power_of_2(plan.splits), NO_INDEX=NO_INDEX, num_warps=4,
        )
    return out


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    contract.validate(logits)
    rows, vocab = logits.shape
    return run_plan(logits, launch_plan(rows, vocab, logits.element_size(), sm_count(logits.device)))


def bytes_moved(logits: torch.Tensor) -> int:
    return logits.shape[0] * logits.shape[1] * logits.element_size() + 8 * logits.shape[0]


def _bench_logits(rows: int, vocab: int):
    return lambda device: {"logits": torch.randn(rows, vocab, device=device).to(torch.bfloat16)}


# -- catalog entry --------------------------------------------------------------------------------
def params_of(logits):
    return {"R": logits.shape[0], "V": logits.shape[1], "dtype": logits.dtype}


_DTYPES = OneOf(contract.DTYPES)
CELLS = (
    Cell("empty_batch", "a step with no running sequences (R = 0) must launch nothing and return []",
         {"R": Span(0, 0), "V": Span(1, 262144), "dtype": _DTYPES}),
    Cell("decode_small_batch", "low-batch and latency-bound decode: R <= 16 rows, each split across programs",
         {"R": Span(1, 16), "V": Span(1, 262144), "dtype": _DTYPES}),
    Cell("decode_mid_batch", "mid-size serving batches: R 17..255, rows split until the GPU is full",
         {"R": Span(17, 255), "V": Span(1, 262144), "dtype": _DTYPES}),
    Cell("decode_large_batch", "throughput serving, R 256..1024 (Llama-3 128256, Qwen2 152064, Gemma 262144 vocabs)",
         {"R": Span(256, 1024), "V": Span(1, 262144), "dtype": _DTYPES}),
)

ENTRY = Entry.of_contract(
    contract,
    kernel=greedy_argmax,
    parity=Parity.BITWISE,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    batch_invariant=True,
    batch_args=("logits",),
    bench=(
        BenchCase("bf16 [1024, 262144]", _bench_logits(1024, 262144), bytes_moved, ">= 85% of copy bandwidth"),
        BenchCase("bf16 [256, 152064]", _bench_logits(256, 152064), bytes_moved, ">= 2x torch.argmax"),
        BenchCase("bf16 [1, 152064]", _bench_logits(1, 152064), bytes_moved, "<= 8 us"),
    ),
)
