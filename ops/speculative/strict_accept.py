"""speculative/strict_accept — greedy verification of a speculative decoding step, in one launch.

Contract (CONTRACTS.md): ``strict_accept(draft_tokens int64[B, K], target_tokens int64[B, K+1],
num_drafts int32[B]) -> (out_tokens int64[B, K+1], num_accepted int32[B])``; row b accepts the longest
prefix of its ``n_b = clamp(num_drafts[b], 0, K)`` drafts that the target agrees with (``a_b``), keeps
the target's tokens up to and including column ``a_b`` and ``-1`` after; ``num_accepted = a_b + 1``;
drafts at ``i >= n_b`` are ignored whatever they hold; ``K <= 16``; bitwise; batch-invariant.

Bytes: read ``B * (8K + 8(K+1) + 4)``, write ``B * (8(K+1) + 4)``: at B=4096, K=16 that is 1.7 MB,
under half a microsecond at the H200's 4.3 TB/s.  The op is launch-bound, so the point is a single
launch where the stock composition runs ``STOCK_LAUNCHES`` (12) kernels, each a pass over [B, K].

One program holds a tile of ROWS rows by COLUMNS (the next power of two >= K+1) columns of both token
tensors.  A column *stops* its row when it is past the row's draft count or its draft disagrees with
the target; ``a_b`` is the first stopping column (column ``n_b`` always stops, so ``a_b <= n_b``).
Integer answers are exact, so the plan may depend on B without breaking batch invariance.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, BenchCase, Cell, Entry, OneOf, Parity, Span
from ops.triton_backend import sm_count
from references.speculative import strict_accept as contract

MAX_ROWS = 32  # 32 rows x 32 columns x 2 int64 tiles: 16 KB of registers per program


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    rows: int        # rows per program
    columns: int     # lanes per row: K+1 rounded up to a power of two
    num_warps: int
    programs: int


def launch_plan(batch: int, drafts: int, sms: int, programs_per_sm: int = 2, max_rows: int = MAX_ROWS) -> LaunchPlan:
    columns = triton.next_power_of_2(drafts + 1)
    # One wave of about two programs per SM: more rows per program only lengthens the one wave, fewer
    # leave SMs idle.  B=4096 on 132 SMs: 16 rows, 256 programs.
    rows = max(1, min(max_rows, triton.next_power_of_2(triton.cdiv(max(batch, 1), programs_per_sm * sms))))
    # a warp per 128 int64 elements of a tile (4 per thread), at most 4
    num_warps = max(1, min(4, rows * columns // 128))
    return LaunchPlan(rows=rows, columns=columns, num_warps=num_warps, programs=triton.cdiv(batch, rows))


# -- kernel ---------------------------------------------------------------------------------------
# B, the draft count, the row strides and the inputs' alignment change from call to call: specializing on
# them would only add compiles (bounds and index tensors: one compile per plan; a row is at most 33 tokens).
@triton.jit(do_not_specialize=["draft_row_stride", "target_row_stride", "num_drafts_stride", "batch", "drafts"],
            do_not_specialize_on_alignment=["draft_ptr", "target_ptr", "num_drafts_ptr"])
def _strict_accept(
    # inputs (any strides)
    draft_ptr, draft_row_stride, draft_column_stride,
    target_ptr, target_row_stride, target_column_stride,
    num_drafts_ptr, num_drafts_stride,
    # outputs (contiguous)
    out_tokens_ptr, num_accepted_ptr,
    batch, drafts,
    # meta
    ROWS: tl.constexpr, COLUMNS: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    columns = tl.arange(0, COLUMNS)
    in_batch = rows < batch
    row = rows.to(tl.int64)[:, None]
    column = columns.to(tl.int64)[None, :]
    proposed = tl.load(num_drafts_ptr + rows.to(tl.int64) * num_drafts_stride, mask=in_batch, other=0)
    proposed = tl.minimum(tl.maximum(proposed, 0), drafts)                                # n_b
    is_draft = in_batch[:, None] & (column < drafts)
    is_target = in_batch[:, None] & (column <= drafts)
    draft = tl.load(draft_ptr + row * draft_row_stride + column * draft_column_stride, mask=is_draft, other=0)
    target = tl.load(target_ptr + row * target_row_stride + column * target_column_stride, mask=is_target,
                     other=0)
    stops = (columns[None, :] >= proposed[:, None]) | (draft != target)
    accepted = tl.min(tl.where(stops, columns[None, :], COLUMNS), axis=1)                 # a_b
    out = tl.where(columns[None, :] <= accepted[:, None], target, -1)
    tl.store(out_tokens_ptr + row * (drafts + 1) + column, out, mask=is_target)
    tl.store(num_accepted_ptr + rows, (accepted + 1).to(tl.int32), mask=in_batch)


# -- host wrapper ---------------------------------------------------------------------------------
def run_plan(draft_tokens: torch.Tensor, target_tokens: torch.Tensor, num_drafts: torch.Tensor, plan: LaunchPlan):
    """Launch ``plan`` on already-validated arguments (``tools/bench --variants`` sweeps plans through this)."""
    batch, drafts = draft_tokens.shape
    out_tokens = torch.empty(batch, drafts + 1, dtype=torch.int64, device=draft_tokens.device)
    num_accepted = torch.empty(batch, dtype=torch.int32, device=draft_tokens.device)
    if batch == 0:
        return out_tokens, num_accepted
    _strict_accept[(plan.programs,)](
        draft_tokens, draft_tokens.stride(0), draft_tokens.stride(1),
        target_tokens, target_tokens.stride(0), target_tokens.stride(1),
        num_drafts, num_drafts.stride(0),
        out_tokens, num_accepted, batch, drafts,
        ROWS=plan.rows, COLUMNS=plan.columns, num_warps=plan.num_warps,
    )
    return out_tokens, num_accepted


def strict_accept(draft_tokens: torch.Tensor, target_tokens: torch.Tensor, num_drafts: torch.Tensor):
    contract.validate(draft_tokens, target_tokens, num_drafts)
    batch, drafts = draft_tokens.shape
    return run_plan(draft_tokens, target_tokens, num_drafts, launch_plan(batch, drafts, sm_count(draft_tokens.device)))


def bench_variants(draft_tokens, target_tokens, num_drafts) -> dict:
    """Launch plans around the default, for ``tools/bench --variants`` to time on the device."""
    batch, drafts = draft_tokens.shape
    variants = {}
    for programs_per_sm in (1, 2, 4, 8):
        for max_rows in (8, 16, 32, 64):
            plan = launch_plan(batch, drafts, sm_count(draft_tokens.device), programs_per_sm, max_rows)
            label = f"{programs_per_sm}/SM <= {max_rows} rows ({plan.rows} rows, {plan.programs} programs)"
            variants[label] = lambda draft_tokens, target_tokens, num_drafts, plan=plan: run_plan(
                draft_tokens, target_tokens, num_drafts, plan)
    return variants


def bytes_moved(draft_tokens, target_tokens, num_drafts) -> int:
    batch, drafts = draft_tokens.shape
    return batch * (8 * drafts + 2 * 8 * (drafts + 1) + 2 * 4)


def _bench_step(batch: int, drafts: int):
    """Realistic acceptance: every row drafts K tokens and the target agrees with each at 70%."""
    def make(device):
        generator = torch.Generator(device=device).manual_seed(0)
        target = torch.randint(0, 128256, (batch, drafts + 1), generator=generator, device=device)
        agree = torch.rand(batch, drafts, generator=generator, device=device) < 0.7
        draft = torch.where(agree, target[:, :drafts], target[:, :drafts] + 1)
        return {"draft_tokens": draft, "target_tokens": target,
                "num_drafts": torch.full((batch,), drafts, dtype=torch.int32, device=device)}
    return make


# -- catalog entry --------------------------------------------------------------------------------
def params_of(draft_tokens, target_tokens, num_drafts):
    return {"B": draft_tokens.shape[0], "K": draft_tokens.shape[1]}


_DRAFTS = Span(0, contract.MAX_DRAFTS)
CELLS = (
    Cell("empty_batch", "a step with no running sequences (B = 0) must launch nothing and return empty outputs",
         {"B": Span(0, 0), "K": _DRAFTS}),
    Cell("small_batch", "latency-bound speculative decoding, B 1..64 (EAGLE/MTP drafts, K 0..16, zero-draft rows "
                        "beside full ones): a program per row on an H200",
         {"B": Span(1, 64), "K": _DRAFTS}),
    Cell("large_batch", "throughput serving, B 65..4096, K 0..16: up to 32 rows per program",
         {"B": Span(65, 4096), "K": _DRAFTS}),
)

ENTRY = Entry.of_contract(
    contract,
    kernel=strict_accept,
    parity=Parity.BITWISE,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    batch_invariant=True,
    batch_args=("draft_tokens", "target_tokens", "num_drafts"),
    bench=(
        BenchCase(f"B=4096 K=16 (launches: kernel 1, stock {contract.STOCK_LAUNCHES})", _bench_step(4096, 16),
                  bytes_moved, f"one launch; faster than the stock's {contract.STOCK_LAUNCHES}"),
    ),
)
