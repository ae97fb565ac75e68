"""Wrong implementations of ``rollback_save`` for the battery to judge (the correct alternative is
``rollback_restore_impls.rollback_save``, paired with its restore).  ``test_rollback_save.py`` checks
that the battery rejects every one."""
from __future__ import annotations

import torch

from references.attention.paged_slots import bits, entry_mask, live_slots
from references.attention.rollback_save import rollback_save as reference
from references.attention.rollback_save import validate


def garbage_for_dead_entries(plane, page_table, positions):
    """Gathers every entry through a clamped slot: dead entries hold slot 0 of page 0, not zero."""
    validate(plane, page_table, positions)
    _, page, slot = live_slots(page_table, positions, plane.shape[1])
    return plane[page, slot]


def saves_through_minus_one_page(plane, page_table, positions):
    """Forgets ``page >= 0``: an entry on an unallocated page saves the plane's last page."""
    validate(plane, page_table, positions)
    saved = reference(plane, page_table, positions)
    slots_per_page, pages_per_row = plane.shape[1], page_table.shape[1]
    if pages_per_row == 0:
        return saved
    logical = torch.div(positions.long(), slots_per_page, rounding_mode="floor")
    page = page_table.long().gather(1, logical.clamp(0, pages_per_row - 1))
    hole = (positions >= 0) & (logical < pages_per_row) & (page < 0)
    bits(saved)[hole] = bits(plane)[-1, (positions.long() % slots_per_page)[hole]]
    return saved


def saves_the_next_slot(plane, page_table, positions):
    """Off by one slot (t + 1 within the page): save looks right in shape and liveness, restore then
    writes the wrong values back."""
    validate(plane, page_table, positions)
    live, page, slot = live_slots(page_table, positions, plane.shape[1])
    saved = bits(plane)[page, (slot + 1) % plane.shape[1]]
    return torch.where(entry_mask(live, plane.dim() - 2), saved, torch.zeros_like(saved)).view(plane.dtype)


def values_through_float32(plane, page_table, positions):
    """Moves values, not bits: through a float32 register, NaN payloads (and e4m3's sign of NaN) are lost."""
    saved = reference(plane, page_table, positions)
    if not saved.is_floating_point():
        return saved
    return saved.float().to(plane.dtype)


def missing_refusal(plane, page_table, positions):
    """Checks nothing: gathers from whatever it is given (a 1-D plane, int64 positions, a complex128 plane)."""
    live, page, slot = live_slots(page_table, positions, plane.shape[1])
    gathered = plane[page, slot]
    return torch.where(entry_mask(live, plane.dim() - 2), gathered, torch.zeros_like(gathered))
