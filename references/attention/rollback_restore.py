"""Contract ``attention/rollback_restore`` (bitwise, stateful, in place on ``plane``; sibling of
``rollback_save``).

``rollback_restore(plane[P, S, *E], page_table int32[B, M], positions int32[B, T], saved[B, T, *E],
rejected bool[B, T]) -> None``: after verification, write ``saved[b, j]`` back to the slot of every live
entry with ``rejected[b, j]``.  Nothing else in ``plane`` changes — not the kept entries, not other
pages, not other slots.  Slots, liveness, preconditions and the restoration property are in
``references/attention/paged_slots.py``.
"""
from __future__ import annotations

import torch

from references.attention.paged_slots import REJECTED, SAVED, bits, live_slots, plane_step_refusals, \
    refusal_plane, refusal_positions, refusal_table, validate_plane_step, validate_saved
from references.validation import Refusal, require_dtype, require_shape, require_tensor


def validate(plane, page_table, positions, saved, rejected) -> None:
    validate_plane_step(plane, page_table, positions)
    validate_saved(plane, positions, saved)
    require_tensor("rejected", rejected)
    require_dtype("rejected", rejected, (torch.bool,))
    require_shape("rejected", rejected, tuple(positions.shape), "[B, T]")


def rollback_restore(plane, page_table, positions, saved, rejected) -> None:
    validate(plane, page_table, positions, saved, rejected)
    live, page, slot = live_slots(page_table, positions, plane.shape[1])
    restored = live & rejected
    bits(plane)[page[restored], slot[restored]] = bits(saved)[restored]


def stock(plane, page_table, positions, saved, rejected) -> None:
    """What a serving engine runs today: the rejected live entries' indices (a device sync), then a
    scatter through advanced indexing."""
    slots_per_page, pages_per_row = plane.shape[1], page_table.shape[1]
    if pages_per_row == 0 or slots_per_page == 0:   # no table, or pages without slots: nothing is live
        return
    logical = positions // slots_per_page
    page = page_table.gather(1, logical.clamp(0, pages_per_row - 1).long())
    restored = (positions >= 0) & (logical < pages_per_row) & (page >= 0) & rejected
    rows, steps = restored.nonzero(as_tuple=True)
    plane[page[rows, steps].long(), (positions[rows, steps] % slots_per_page).long()] = saved[rows, steps]


def _saved(device, shape=(2, 4, 8), dtype=torch.bfloat16):
    return torch.zeros(shape, dtype=dtype, device=device)


def _call(device, **override):
    kwargs = {"plane": refusal_plane(device), "page_table": refusal_table(device),
              "positions": refusal_positions(device), "saved": _saved(device),
              "rejected": torch.zeros(2, 4, dtype=torch.bool, device=device)}
    return {**kwargs, **override}


REFUSALS = plane_step_refusals(_call) + (
    Refusal("saved of another shape", lambda device: _call(device, saved=_saved(device, (2, 4, 9))),
            ("saved", "plane"), clause=SAVED),
    Refusal("saved without its step axis", lambda device: _call(device, saved=_saved(device, (2, 8))),
            ("saved", "positions"), clause=SAVED),
    Refusal("saved of another dtype", lambda device: _call(device, saved=_saved(device, dtype=torch.float32)),
            ("saved", "plane"), TypeError, clause=SAVED),
    Refusal("uint8 rejected", lambda device: _call(device, rejected=torch.zeros(2, 4, dtype=torch.uint8,
                                                                                device=device)),
            "rejected", TypeError, clause=REJECTED),
    Refusal("rejected of another shape", lambda device: _call(device, rejected=torch.zeros(2, 5, dtype=torch.bool,
                                                                                           device=device)),
            ("rejected", "positions"), clause=REJECTED),
    Refusal("rejected not a tensor", lambda device: _call(device, rejected=None), "rejected", TypeError,
            clause="non-tensor"),
)
