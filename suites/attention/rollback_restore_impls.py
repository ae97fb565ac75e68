"""Other implementations of the rollback pair for the battery to judge: a correct pair, wrong restores.

``rollback_save`` and ``rollback_restore`` here are a correct alternative pair (a loop over the step
axis, slots found without the reference's helpers): ``tools/certify-cells --op rollback_restore --impl
suites.attention.rollback_restore_impls`` judges both, the restore as the op and the save as its
sibling.  Each wrong restore breaks the contract the way a real kernel does; ``test_rollback_restore.py``
checks that the battery rejects every one, and that the stateful oracle alone does too.
"""
from __future__ import annotations

import torch

from references.attention.rollback_restore import validate as validate_restore
from references.attention.rollback_save import validate as validate_save
from suites.strided_reads import in_strides_of

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(tensor):
    return tensor.view(_BITS[tensor.element_size()])


def _slot(plane, page_table, positions, column, *, check_position=True, check_table=True, check_page=True):
    """Column ``column``'s (live, page, slot), each [B]; dropping a check makes a wrong implementation,
    whose negative indices then wrap the Python way (-1: the last page table entry, the last page)."""
    batch, pages_per_row = page_table.shape
    slots_per_page = plane.shape[1]
    position = positions[:, column].long()
    logical = torch.div(position, slots_per_page, rounding_mode="floor")
    live = torch.ones(batch, dtype=torch.bool, device=positions.device)
    if check_position:
        live &= position >= 0
    if check_table:
        live &= logical < pages_per_row
    if pages_per_row == 0:
        return live & False, position, position
    lookup = logical.clamp(-pages_per_row, pages_per_row - 1)   # past the table: its last page
    page = page_table[torch.arange(batch, device=positions.device), lookup].long()
    if check_page:
        live &= page >= 0
    return live, page.clamp(min=-plane.shape[0]), position % slots_per_page


def rollback_save(plane, page_table, positions):
    """Correct: column by column, a live entry's slot gathered, a dead entry's left zero."""
    validate_save(plane, page_table, positions)
    saved = torch.zeros((*positions.shape, *plane.shape[2:]), dtype=plane.dtype, device=plane.device)
    for column in range(positions.shape[1]):
        live, page, slot = _slot(plane, page_table, positions, column)
        _bits(saved)[live, column] = _bits(plane)[page[live], slot[live]]
    return saved


def _restore(plane, page_table, positions, saved, rejected, **checks):
    for column in range(positions.shape[1]):
        live, page, slot = _slot(plane, page_table, positions, column, **checks)
        chosen = live & rejected[:, column]
        _bits(plane)[page[chosen], slot[chosen]] = _bits(saved)[chosen, column]


def rollback_restore(plane, page_table, positions, saved, rejected):
    """Correct: column by column, the rejected live entries written back."""
    validate_restore(plane, page_table, positions, saved, rejected)
    _restore(plane, page_table, positions, saved, rejected)


def restores_all_rows(plane, page_table, positions, saved, rejected):
    """Ignores the mask: the kept tokens are rolled back too."""
    validate_restore(plane, page_table, positions, saved, rejected)
    _restore(plane, page_table, positions, saved, torch.ones_like(rejected))


def restores_kept_rows(plane, page_table, positions, saved, rejected):
    """The mask read upside down: the kept tokens are rolled back, the rejected ones stay."""
    validate_restore(plane, page_table, positions, saved, rejected)
    _restore(plane, page_table, positions, saved, ~rejected)


def writes_through_minus_one_position(plane, page_table, positions, saved, rejected):
    """Forgets ``t >= 0``: position -1 is logical page -1 (the row's last) at slot S - 1."""
    validate_restore(plane, page_table, positions, saved, rejected)
    _restore(plane, page_table, positions, saved, rejected, check_position=False)


def ignores_minus_one_page(plane, page_table, positions, saved, rejected):
    """Forgets ``page >= 0``: an unallocated page -1 is the plane's last page."""
    validate_restore(plane, page_table, positions, saved, rejected)
    _restore(plane, page_table, positions, saved, rejected, check_page=False)


def past_table_lands_in_last_page(plane, page_table, positions, saved, rejected):
    """Forgets ``t // S < M``: a position past the table is written into the row's last logical page."""
    validate_restore(plane, page_table, positions, saved, rejected)
    _restore(plane, page_table, positions, saved, rejected, check_table=False)


def mask_read_with_positions_strides(plane, page_table, positions, saved, rejected):
    """Reads the mask with the positions' strides: right while the two share a row layout."""
    validate_restore(plane, page_table, positions, saved, rejected)
    _restore(plane, page_table, positions, saved, in_strides_of(rejected, positions))


def writes_slot_padding(plane, page_table, positions, saved, rejected):
    """Right on every element, but each restored slot's last-dim rows are stored whole, up to their
    stride (a vector store past a padded row): the padding between rows of a strided plane is zeroed.
    Elementwise parity cannot see it; the in-place oracle checks the whole storage."""
    validate_restore(plane, page_table, positions, saved, rejected)
    _restore(plane, page_table, positions, saved, rejected)
    if plane.dim() < 3 or plane.stride(-1) != 1 or plane.stride(-2) <= plane.shape[-1]:
        return  # no padding past a row (a last-dim stride of 2 has no tail to store into)
    padded = plane.as_strided((*plane.shape[:-1], plane.stride(-2)), plane.stride())
    for column in range(positions.shape[1]):
        live, page, slot = _slot(plane, page_table, positions, column)
        chosen = live & rejected[:, column]
        tail = _bits(padded)[page[chosen], slot[chosen]]
        tail[..., plane.shape[-1]:] = 0
        _bits(padded)[page[chosen], slot[chosen]] = tail
