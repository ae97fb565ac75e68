"""Contract ``attention/rollback_save`` (bitwise, stateful; sibling of ``rollback_restore``).

``rollback_save(plane[P, S, *E], page_table int32[B, M], positions int32[B, T]) -> saved[B, T, *E]``:
before a speculative step, ``saved[b, j]`` is the plane's slot of position ``positions[b, j]`` for
live entries and zero (all bits clear) for the others.  Slots, liveness and the restoration property
are in ``references/attention/paged_slots.py``.
"""
from __future__ import annotations

import torch

from references.attention.paged_slots import bits, entry_mask, live_slots, plane_step_refusals, refusal_plane, \
    refusal_positions, refusal_table, validate_plane_step


def validate(plane, page_table, positions) -> None:
    validate_plane_step(plane, page_table, positions)


def rollback_save(plane, page_table, positions):
    validate(plane, page_table, positions)
    live, page, slot = live_slots(page_table, positions, plane.shape[1])
    gathered = bits(plane)[page, slot]                                   # [B, T, *E]; slot 0 where not live
    saved = torch.where(entry_mask(live, plane.dim() - 2), gathered, torch.zeros_like(gathered))
    return saved.view(plane.dtype)


def stock(plane, page_table, positions):
    """What a serving engine runs today: flat slot ids into the cache seen as [P*S, *E], then a gather."""
    slots_per_page, pages_per_row = plane.shape[1], page_table.shape[1]
    if pages_per_row == 0 or slots_per_page == 0:   # no table, or pages without slots: nothing is live
        return torch.zeros((*positions.shape, *plane.shape[2:]), dtype=plane.dtype, device=plane.device)
    logical = positions // slots_per_page
    page = page_table.gather(1, logical.clamp(0, pages_per_row - 1).long())
    live = (positions >= 0) & (logical < pages_per_row) & (page >= 0)
    flat_slot = torch.where(live, page * slots_per_page + positions % slots_per_page, 0).long()
    saved = plane.flatten(0, 1)[flat_slot]
    return torch.where(live.reshape(*live.shape, *(1,) * (plane.dim() - 2)), saved, torch.zeros_like(saved))


def _call(device, **override):
    return {"plane": refusal_plane(device), "page_table": refusal_table(device), "positions": refusal_positions(device),
            **override}


REFUSALS = plane_step_refusals(_call)
