"""What ``rollback_save`` and ``rollback_restore`` share: the paged plane, its slots, and the property.

A speculative step writes new tokens into a paged *plane* ``[P, S, *E]`` (a KV cache, an MLA latent
cache, an index-score plane): P pages of S slots, E trailing element dims.  Row b's token position t
lives at ``plane[page_table[b, t // S], t % S]``; entry ``(b, j)`` of ``positions[B, T]`` is *live* when
``t >= 0``, ``t // S < M`` and ``page_table[b, t // S] >= 0`` (``-1`` marks an unused entry and an
unallocated page).  Before the step the positions it will write are saved; after verification the
rejected ones are restored.

Refused (the contract's Refuse line, nothing more): page_table/positions not int32 2-D, B of positions
not B of page_table, rejected not bool [B, T], saved not [B, T, *E] of plane's dtype, a plane with
fewer than 2 dims.  Everything else the signature allows is answered: any number of trailing dims,
any dtype (16-byte complex elements included), any strides, and S = 0 (pages without slots: no entry
is live).  The kernels' narrower limits (at most 2 trailing dims, 1- to 8-byte elements, S >= 1) are
theirs: ``ops/attention/rollback_save.kernel_limits``.

Preconditions the contract leaves to the caller (values on the device, never checked by a sync):
allocated page ids are below P, and the live entries of one call name distinct slots (a step writes
each new token once; shared prefix pages are never written by it).

The contract's property (rollback restoration): save -> any writes to the live positions ->
restore(rejected) leaves every rejected position bitwise equal to its value before the step and every
other element of ``plane`` — and every byte of its storage outside it — bitwise equal to its value
just before restore.  ``rollback_restoration`` judges a pair of implementations by it, through the
op-agnostic ``oracles.in_place.check_in_place_step``.
"""
from __future__ import annotations

import torch

from oracles.in_place import check_in_place_step
from oracles.tensors import clone_keeping_layout
from references.validation import (
    Refusal,
    refuse,
    require_dtype,
    require_ndim,
    require_same_device,
    require_shape,
    require_tensor,
)

_SAME_WIDTH_INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# -- validation -----------------------------------------------------------------------------------
def validate_plane_step(plane, page_table, positions) -> None:
    """The checks both rollback ops make on the plane, its page table and the step's positions."""
    for name, value in (("plane", plane), ("page_table", page_table), ("positions", positions)):
        require_tensor(name, value)
    if plane.dim() < 2:
        raise refuse("plane", f"expected [P, S, *E], got shape {tuple(plane.shape)}", "pass P pages of S slots")
    require_ndim("page_table", page_table, 2, "[B, M]")
    require_dtype("page_table", page_table, (torch.int32,))
    require_ndim("positions", positions, 2, "[B, T]")
    require_dtype("positions", positions, (torch.int32,))
    if positions.shape[0] != page_table.shape[0]:
        raise refuse("positions", f"{positions.shape[0]} rows but page_table has {page_table.shape[0]}",
                     "pass one row of positions per row of the page table")
    require_same_device({"plane": plane, "page_table": page_table, "positions": positions})


def validate_saved(plane, positions, saved) -> None:
    require_tensor("saved", saved)
    require_shape("saved", saved, (*positions.shape, *plane.shape[2:]), "[B, T, *E]")
    if saved.dtype != plane.dtype:
        raise TypeError(f"saved: dtype {saved.dtype} is not the plane's {plane.dtype} — pass what rollback_save "
                        f"returned for this plane")
    require_same_device({"plane": plane, "saved": saved})


# -- slots ----------------------------------------------------------------------------------------
def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as same-width integers, in place (a view): the ops copy bits, not values.
    A dtype of another width (16-byte complex) is returned as it is: its indexed copies move bytes."""
    width = _SAME_WIDTH_INTS.get(tensor.element_size())
    return tensor if width is None else tensor.view(width)


def live_slots(page_table: torch.Tensor, positions: torch.Tensor, slots_per_page: int):
    """``(live, page, slot)``, each ``[B, T]``: which entries are live, and their slot (0 where not live)."""
    pages_per_row = page_table.shape[1]
    position = positions.to(torch.int64)
    if slots_per_page == 0:   # pages without slots: no position lives anywhere
        dead = torch.zeros_like(position)
        return dead.bool(), dead, dead
    logical = torch.div(position, slots_per_page, rounding_mode="floor")
    in_table = (position >= 0) & (logical < pages_per_row)
    if pages_per_row == 0:
        page = torch.full_like(position, -1)
    else:
        page = page_table.to(torch.int64).gather(1, logical.clamp(0, pages_per_row - 1))
    live = in_table & (page >= 0)
    return live, torch.where(live, page, 0), torch.where(live, position % slots_per_page, 0)


def entry_mask(mask: torch.Tensor, trailing_dims: int) -> torch.Tensor:
    """A ``[B, T]`` mask broadcastable over ``[B, T, *E]``."""
    return mask.reshape(*mask.shape, *(1,) * trailing_dims)


# -- refused inputs both ops share ----------------------------------------------------------------
def refusal_plane(device, shape=(4, 16, 8), dtype=torch.bfloat16):
    return torch.zeros(shape, dtype=dtype, device=device)


def refusal_table(device, rows=2, pages=3, dtype=torch.int32):
    return torch.zeros(rows, pages, dtype=dtype, device=device)


def refusal_positions(device, rows=2, steps=4, dtype=torch.int32):
    return torch.zeros(rows, steps, dtype=dtype, device=device)


# the Refuse-line items of CONTRACTS.md that the rows below enforce (both ops share them)
INT32_2D = "`page_table`/`positions` not int32 2-D"
SAME_B = "B of `positions` not B of `page_table`"
PLANE_DIMS = "plane with fewer than 2 dims"
REJECTED = "`rejected` not bool `[B, T]`"
SAVED = "`saved` not `[B, T, *E]` of plane's dtype"


def plane_step_refusals(call) -> tuple[Refusal, ...]:
    """Refusals of the plane, page table and positions, for either op (``call(device, **override)``)."""
    def plane(**options):
        return lambda device: call(device, plane=refusal_plane(device, **options))

    def table(**options):
        return lambda device: call(device, page_table=refusal_table(device, **options))

    def positions(**options):
        return lambda device: call(device, positions=refusal_positions(device, **options))

    return (
        Refusal("1-D plane", plane(shape=(64,)), "plane", clause=PLANE_DIMS),
        Refusal("1-D page_table", lambda device: call(device, page_table=refusal_table(device)[0]), "page_table",
                clause=INT32_2D),
        Refusal("int64 page_table", table(dtype=torch.int64), "page_table", TypeError, clause=INT32_2D),
        Refusal("positions of another batch", positions(rows=3), ("positions", "page_table"), clause=SAME_B),
        Refusal("int64 positions", positions(dtype=torch.int64), "positions", TypeError, clause=INT32_2D),
        Refusal("3-D positions", lambda device: call(device, positions=refusal_positions(device).view(2, 2, 2)),
                "positions", clause=INT32_2D),
        Refusal("positions not a tensor", lambda device: call(device, positions=[[0, 1], [2, 3]]), "positions",
                TypeError, clause="non-tensor"),
    )


# -- the contract's property ----------------------------------------------------------------------
def _masks_to_try(kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """The given mask; a save example carries none, so it tries all-rejected, all-kept and alternating."""
    if "rejected" in kwargs:
        return [("the step's mask", kwargs["rejected"])]
    positions = kwargs["positions"]
    steps = torch.arange(positions.shape[1], device=positions.device)
    rows = torch.arange(positions.shape[0], device=positions.device)
    return [("all rejected", torch.ones_like(positions, dtype=torch.bool)),
            ("all kept", torch.zeros_like(positions, dtype=torch.bool)),
            ("alternating", (rows[:, None] + steps[None, :]) % 2 == 0)]


def _speculative_writes(plane: torch.Tensor, live, page, slot) -> None:
    """The step between save and restore: every live position gets new bits (each bit flipped)."""
    plane_bits = bits(plane)
    plane_bits[page[live], slot[live]] = ~plane_bits[page[live], slot[live]]


def rollback_restoration(impl, kwargs) -> None:
    """Property (rollback restoration), for an implementation of both ops (``impl[name]``)."""
    page_table, positions = kwargs["page_table"], kwargs["positions"]
    for what, rejected in _masks_to_try(kwargs):
        plane = clone_keeping_layout(kwargs["plane"])   # a fresh plane per mask, view padding included
        live, page, slot = live_slots(page_table, positions, plane.shape[1])
        before_step = plane.clone()
        saved = impl["rollback_save"](plane, page_table, positions)
        _speculative_writes(plane, live, page, slot)
        named = torch.zeros(plane.shape[:2], dtype=torch.bool, device=plane.device)
        restored = live & rejected
        named[page[restored], slot[restored]] = True
        check_in_place_step(
            plane, lambda: impl["rollback_restore"](plane, page_table, positions, saved, rejected), named,
            before_step, f"save -> writes to the live positions -> restore ({what})")
