"""attention/rollback_restore — write the rejected tokens' saved slots back into the paged plane.

Contract (CONTRACTS.md, ``references/attention/paged_slots.py``): ``rollback_restore(plane[P, S, *E],
page_table int32[B, M], positions int32[B, T], saved[B, T, *E], rejected bool[B, T]) -> None``, in place
on ``plane``: every live entry with ``rejected[b, j]`` gets ``saved[b, j]`` back; nothing else in the
plane changes (not the kept entries, other pages, other slots); any dtype (bits are copied); bitwise.
The kernel is ``rollback_save``'s, run in the RESTORE direction (launch plan and reasons there).

Bytes: read a position per entry (4 B) and a page id and a rejected flag per live entry (5 B), then
``R * E * itemsize`` of saved, and write as much into the plane, for R rejected live entries: only
those slots move.  [512, 16] entries on a [P, 64, 8, 128] bf16 plane, half rejected: 8 MB each way.
"""
from __future__ import annotations

import math

import torch

from ops.attention.rollback_save import CELLS, copy_live_slots, kernel_limits, launch_plan, params_of
from ops.catalog import ALL_ARCHS, BenchCase, Entry, Parity
from references.attention import paged_slots
from references.attention import rollback_restore as contract
from references.validation import require_within_limits


def rollback_restore(plane: torch.Tensor, page_table: torch.Tensor, positions: torch.Tensor, saved: torch.Tensor,
                     rejected: torch.Tensor) -> None:
    contract.validate(plane, page_table, positions, saved, rejected)
    require_within_limits(kernel_limits(plane, page_table, positions, saved, rejected))
    copy_live_slots(plane, page_table, positions, saved, rejected)


def bench_variants(plane, page_table, positions, saved, rejected) -> dict:
    """Launch plans around the default, for ``tools/bench --variants`` to time on the device."""
    variants = {}
    for tile_bytes in (2048, 4096, 8192, 16384, 32768):
        for num_warps in (2, 4, 8):
            plan = launch_plan(positions.numel(), math.prod(plane.shape[2:]), plane.element_size(), tile_bytes,
                               num_warps)
            label = f"{tile_bytes // 1024} KB tiles {num_warps}w ({plan.programs} programs)"
            variants[label] = lambda plane, page_table, positions, saved, rejected, plan=plan: copy_live_slots(
                plane, page_table, positions, saved, rejected, plan)
    return variants


def bytes_moved(plane, page_table, positions, saved, rejected) -> int:
    """The bytes the restore must move on these inputs: metadata, then each restored slot twice."""
    live, _, _ = paged_slots.live_slots(page_table, positions, plane.shape[1])
    restored = int((live & rejected).sum())
    metadata = positions.numel() * positions.element_size() + \
        int(live.sum()) * (page_table.element_size() + rejected.element_size())
    return metadata + 2 * restored * math.prod(plane.shape[2:]) * plane.element_size()


def _bench_step(batch: int, steps: int, slots_per_page: int, heads: int, head_dim: int):
    """A decode step of a GQA KV cache: each row drafted ``steps`` tokens at the tail of its context
    (page boundaries crossed), and the target rejected a suffix of them (uniform 0..steps accepted)."""
    def make(device):
        generator = torch.Generator(device=device).manual_seed(0)
        pages_per_row = 64                                    # up to 4096 tokens of context at S = 64
        touched_per_row = -(-steps // slots_per_page) + 1     # the logical pages a step can touch
        pages = batch * touched_per_row
        plane = torch.randn(pages, slots_per_page, heads, head_dim, generator=generator, device=device)
        plane = plane.to(torch.bfloat16)
        context = torch.randint(0, pages_per_row * slots_per_page - steps + 1, (batch,), generator=generator,
                                device=device)
        positions = (context[:, None] + torch.arange(steps, device=device)).to(torch.int32)
        page_table = torch.randint(0, pages, (batch, pages_per_row), generator=generator, device=device)
        touched = positions.long() // slots_per_page
        distinct = torch.randperm(pages, generator=generator, device=device).view(batch, touched_per_row)
        page_table.scatter_(1, touched, distinct.gather(1, touched - touched[:, :1]))
        accepted = torch.randint(0, steps + 1, (batch, 1), generator=generator, device=device)
        saved = torch.randn(batch, steps, heads, head_dim, generator=generator, device=device).to(torch.bfloat16)
        return {"plane": plane, "page_table": page_table.to(torch.int32), "positions": positions,
                "saved": saved, "rejected": torch.arange(steps, device=device) >= accepted}
    return make


ENTRY = Entry.of_contract(
    contract,
    kernel=rollback_restore,
    parity=Parity.BITWISE,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    in_place=("plane",),
    siblings=("rollback_save",),
    properties=(paged_slots.rollback_restoration,),
    limits=kernel_limits,
    bench=(
        BenchCase("B=512 T=16 [P, 64, 8, 128] bf16", _bench_step(512, 16, 64, 8, 128), bytes_moved,
                  "GB/s of the bytes moved (rejected slots only) near copy bandwidth; >= 5x stock indexing"),
    ),
)
