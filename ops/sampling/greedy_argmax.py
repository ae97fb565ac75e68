"""sampling/greedy_argmax — the token a greedy decoder emits, one per row of logits.

Contract (CONTRACTS.md): ``greedy_argmax(logits[R, V]) -> int64[R]``; the first NaN of a row wins,
otherwise the first index of the row maximum, ``-0.0 == +0.0``; rows may be strided (``buf[:, :V]``,
``buf[::2]``); bitwise parity; batch-invariant.

Bytes: read ``R * V * itemsize``, write ``8 * R`` (plus ``12 * R * splits`` of partials when a row
is split).  It is memory-bound: at 4.3 TB/s copy bandwidth, [1024, 262144] bf16 is 125 us of reads.

A row is reduced per lane: each sweep loads an [UNROLL, LANES] tile (UNROLL independent 16-byte loads
per thread, for bytes in flight), reduces it over UNROLL inside each thread, and each lane keeps its
first maximum and first NaN over the columns it visits (strict ``>`` keeps the earliest); the lanes
are merged once at the end.  When there are
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
    lanes: int       # columns one sweep covers per unrolled step: num_warps * 32 threads * one 16-byte load
    unroll: int      # independent 16-byte loads per thread per sweep (bytes in flight)
    splits: int      # programs per row
    chunk: int       # columns per program (a multiple of lanes * unroll)


def launch_plan(rows: int, vocab: int, element_size: int, sms: int,
                programs_per_sm: int = 4, unroll: int = 4, num_warps: int = 8) -> LaunchPlan:
    vector = 16 // element_size  # columns per 16-byte load
    # Fewer rows than `programs_per_sm` per SM cannot keep enough loads in flight: split rows, keeping
    # chunks of at least 1024 columns so the merge stays negligible.
    splits = 1
    if rows < programs_per_sm * sms:
        splits = max(1, min(triton.cdiv(programs_per_sm * sms, max(rows, 1)), triton.cdiv(vocab, 1024)))
    per_program = triton.cdiv(vocab, splits)
    # short rows: shrink the tile rather than sweep thousands of masked columns
    while num_warps > 1 and num_warps * 32 * vector > per_program:
        num_warps //= 2
    lanes = num_warps * 32 * vector
    unroll = max(1, min(unroll, triton.next_power_of_2(triton.cdiv(per_program, lanes))))
    sweep = lanes * unroll
    chunk = triton.cdiv(per_program, sweep) * sweep
    return LaunchPlan(num_warps=num_warps, lanes=lanes, unroll=unroll, splits=triton.cdiv(vocab, chunk), chunk=chunk)


def bench_variants(logits: torch.Tensor) -> dict:
    """Launch plans around the default, for ``tools/bench --variants`` to time on the device."""
    rows, vocab = logits.shape
    variants = {}
    for programs_per_sm in (2, 4, 8):
        for unroll in (1, 2, 4, 8):
            for num_warps in (4, 8):
                plan = launch_plan(rows, vocab, logits.element_size(), sm_count(logits.device),
                                   programs_per_sm, unroll, num_warps)
                label = f"{programs_per_sm}/SM x{unroll} {num_warps}w ({plan.splits} splits)"
                variants[label] = lambda logits, plan=plan: run_plan(logits, plan)
    return variants


# -- kernels --------------------------------------------------------------------------------------
@triton.jit
def _argmax_chunks(
    # input
    logits_ptr, row_stride, vocab, chunk,
    # output: the answer (one split) or per-split partials
    out_ptr, part_value_ptr, part_index_ptr, part_nan_ptr, splits,
    # meta
    LANES: tl.constexpr, UNROLL: tl.constexpr, NO_INDEX: tl.constexpr, ONE_SPLIT: tl.constexpr,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    row_ptr = logits_ptr + row.to(tl.int64) * row_stride
    start = split * chunk
    end = tl.minimum(start + chunk, vocab)
    # [UNROLL, LANES]: each thread holds UNROLL independent 16-byte loads of its lanes, so the
    # reduction over the unrolled axis stays inside the thread
    tile = tl.arange(0, UNROLL)[:, None] * LANES + tl.arange(0, LANES)[None, :]
    lane_value = tl.full([LANES], float("-inf"), tl.float32)
    lane_index = tl.full([LANES], NO_INDEX, tl.int32)
    lane_nan = tl.full([LANES], NO_INDEX, tl.int32)
    # the last split sweeps some fully masked columns past V: they load nothing
    for offset in range(start, start + chunk, UNROLL * LANES):
        cols = offset + tile
        in_chunk = cols < end
        x = tl.load(row_ptr + cols, mask=in_chunk, other=float("-inf")).to(tl.float32)
        is_nan = x != x
        lane_nan = tl.minimum(lane_nan, tl.min(tl.where(is_nan & in_chunk, cols, NO_INDEX), axis=0))
        valid = in_chunk & (x == x)
        x = tl.where(valid, x, float("-inf"))
        step_max = tl.max(x, axis=0)
        # == merges -0.0 with +0.0: equal maxima, the smallest column wins
        step_index = tl.min(tl.where(valid & (x == step_max[None, :]), cols, NO_INDEX), axis=0)
        # strict > keeps a lane's earliest maximum; the first valid column always enters (all -inf rows)
        take = (step_index != NO_INDEX) & ((step_max > lane_value) | (lane_index == NO_INDEX))
        lane_value = tl.where(take, step_max, lane_value)
        lane_index = tl.where(take, step_index, lane_index)
    best = tl.max(lane_value, axis=0)
    best_index = tl.min(tl.where((lane_value == best) & (lane_index != NO_INDEX), lane_index, NO_INDEX), axis=0)
    first_nan = tl.min(lane_nan, axis=0)
    if ONE_SPLIT:
        tl.store(out_ptr + row, tl.where(first_nan != NO_INDEX, first_nan, best_index).to(tl.int64))
    else:
        slot = row * splits + split
        tl.store(part_value_ptr + slot, best)
        tl.store(part_index_ptr + slot, best_index)
        tl.store(part_nan_ptr + slot, first_nan)


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
    one_split = plan.splits == 1
    parts = (1,) if one_split else (rows, plan.splits)
    part_value = torch.empty(parts, dtype=torch.float32, device=logits.device)
    part_index = torch.empty(parts, dtype=torch.int32, device=logits.device)
    part_nan = torch.empty(parts, dtype=torch.int32, device=logits.device)
    _argmax_chunks[(rows, plan.splits)](
        logits, logits.stride(0), vocab, plan.chunk,
        out, part_value, part_index, part_nan, plan.splits,
        LANES=plan.lanes, UNROLL=plan.unroll, NO_INDEX=NO_INDEX, ONE_SPLIT=one_split, num_warps=plan.num_warps,
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

ENTRY = Entry(
    name="greedy_argmax",
    family="sampling",
    kernel=greedy_argmax,
    reference=contract.greedy_argmax,
    validate=contract.validate,
    stock=contract.stock,
    parity=Parity.BITWISE,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    refusals=contract.REFUSALS,
    batch_invariant=True,
    batch_args=("logits",),
    bench=(
        BenchCase("bf16 [1024, 262144]", _bench_logits(1024, 262144), bytes_moved, ">= 85% of copy bandwidth"),
        BenchCase("bf16 [256, 152064]", _bench_logits(256, 152064), bytes_moved, ">= 2x torch.argmax"),
        BenchCase("bf16 [1, 152064]", _bench_logits(1, 152064), bytes_moved, "<= 8 us"),
    ),
)
