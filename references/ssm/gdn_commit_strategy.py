"""Inputs for ``gdn_commit``: a pool, checkpoints as gdn_verify returns them, and accepted counts.

A recipe: ``B``, ``T``, ``HV``, ``Dk``, ``Dv``, ``state_dtype``, ``free_slots``, ``padding``, ``slots``
(as ``references/ssm/gdn_inputs.py``), ``accepted`` (``mixed`` counts in 0..T, ``none``, ``all``),
``layout`` (contiguous, a strided pool, or checkpoints sliced from a longer draft) and ``values``:
``typical``, or ``bit_patterns`` — checkpoints holding NaN payloads, ±inf, -0.0 and subnormals, which
a copy must carry bit for bit.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.ssm.gdn_inputs import (PADDING, PRODUCTION_DEPTHS, PRODUCTION_DIMS, SLOTS, Builder, batch_cap, dtype_name,
                                      metadata_column, with_rows)
from references.strategies.shapes import product_cap, production_corners, seeds, sizes

ACCEPTED = ("mixed", "none", "all")
LAYOUTS = ("contiguous", "strided_pool", "sliced_checkpoints")
VALUES = ("typical", "bit_patterns")
# A commit is one program per row under the interpreter, sweeping the row's slot in one block; the
# budget bounds the tensors the battery copies and compares there.
CPU_COMMIT_ROWS_X_HEADS = 32


def cpu_cap(cell) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it)."""
    return product_cap(cell, ("B", "HV"), CPU_COMMIT_ROWS_X_HEADS)


def _cap(device, heads_v, dk, dv, tokens) -> int:
    if device.type == "cpu":
        return CPU_COMMIT_ROWS_X_HEADS // heads_v
    return batch_cap(device, heads_v, dk, dv, tokens)


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)
    bounds = cell.bounds

    @st.composite
    def draw_recipe(draw):
        tokens = draw(sizes(bounds["T"]))
        heads_v = draw(sizes(bounds["HV"], cap=CPU_COMMIT_ROWS_X_HEADS if device.type == "cpu" else None))
        dk, dv = draw(st.sampled_from(bounds["Dk"].choices)), draw(st.sampled_from(bounds["Dv"].choices))
        return {"B": draw(sizes(bounds["B"], cap=_cap(device, heads_v, dk, dv, tokens))), "T": tokens,
                "HV": heads_v, "Dk": dk, "Dv": dv,
                "state_dtype": draw(st.sampled_from([dtype_name(d) for d in bounds["state_dtype"].choices])),
                "free_slots": draw(st.integers(1, 3)), "padding": draw(st.sampled_from(PADDING)),
                "slots": draw(st.sampled_from(SLOTS)), "accepted": draw(st.sampled_from(ACCEPTED)),
                "layout": draw(st.sampled_from(LAYOUTS)), "values": draw(st.sampled_from(VALUES)),
                "seed": draw(seeds())}

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """Bounds and serving shapes, each with other kinds, where the device's budget takes them; then the
    production sizes the cell holds that they miss (``production_corners``: speculative depths as T, head
    dims), on the first of them that the budget takes with it."""
    device = torch.device(device)
    dtype = dtype_name(cell.bounds["state_dtype"].choices[0])
    base = {"state_dtype": dtype, "free_slots": 1, "padding": "none", "slots": "shuffled", "accepted": "mixed",
            "layout": "contiguous", "values": "typical", "Dk": 64, "Dv": 64}
    found = [
        {**base, "B": 0, "T": 1, "HV": 1},
        {**base, "B": 1, "T": 1, "HV": 1, "accepted": "all", "slots": "last_slot_live", "values": "bit_patterns"},
        {**base, "B": 4, "T": 8, "HV": 2, "Dk": 128, "padding": "all", "slots": "last_slot_free"},
        {**base, "B": 5, "T": 3, "HV": 4, "Dv": 128, "padding": "ends", "slots": "last_slot_free",
         "layout": "sliced_checkpoints", "values": "bit_patterns"},
        {**base, "B": 6, "T": 8, "HV": 8, "Dk": 128, "Dv": 128, "accepted": "none", "layout": "strided_pool"},
        {**base, "B": 256, "T": 2, "HV": 1, "padding": "some"},
        {**base, "B": 64, "T": 4, "HV": 32, "Dk": 128, "Dv": 128, "accepted": "all"},
        # the cell's most value heads, where the budget takes them (a GPU): draws of many heads are rare, so the
        # HV a run reached, the region it certifies and dispatch routes, fell short of the top (docs/draws.md)
        {**base, "B": 1, "T": 2, "HV": cell.bounds["HV"].hi},
    ]

    def fit(recipe: dict) -> dict | None:
        return recipe if recipe["B"] <= _cap(device, recipe["HV"], recipe["Dk"], recipe["Dv"], recipe["T"]) else None

    found = [fitted for fitted in (fit({**recipe, "seed": cell.seed("corner", i)}) for i, recipe in enumerate(found))
             if fitted is not None]
    head_dims = {name: PRODUCTION_DIMS[name] for name in ("Dk", "Dv")}   # a commit has no q/k heads: no group
    return found + production_corners(with_rows(found), cell, {**PRODUCTION_DEPTHS, **head_dims}, fit)


def build(recipe: dict, device) -> dict:
    builder = Builder({**recipe, "H": recipe["HV"], "group": 1, "values": "typical",
                       "layout": "strided_pool" if recipe["layout"] == "strided_pool" else "contiguous"}, device)
    batch, tokens = builder.batch, recipe["T"]
    in_metadata = recipe["layout"] != "contiguous"   # an engine's layouts: its slots and counts in its metadata
    slots = builder.slots(in_metadata)
    state = builder.pool()
    slot_shape = state.shape[1:]
    drafted = tokens + 2 if recipe["layout"] == "sliced_checkpoints" else tokens
    values = builder.randn(batch, drafted, *slot_shape).to(state.dtype)
    if recipe["values"] == "bit_patterns":
        bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16}[state.dtype]
        width = 8 * state.element_size()
        raw = torch.randint(-2 ** (width - 1), 2 ** (width - 1), values.shape, generator=builder.generator,
                            device=builder.device).to(bits).view(state.dtype)
        values = torch.where(builder.coin(*values.shape, p=0.1), raw, values)
    checkpoints = values[:, 1:tokens + 1] if recipe["layout"] == "sliced_checkpoints" else values
    if recipe["accepted"] == "none":
        accepted = torch.zeros(batch, device=builder.device)
    elif recipe["accepted"] == "all":
        accepted = torch.full((batch,), tokens, device=builder.device)
    else:
        accepted = torch.randint(0, tokens + 1, (batch,), generator=builder.generator, device=builder.device)
    accepted = accepted.to(torch.int32)
    return {"state": state, "slots": slots, "checkpoints": checkpoints,
            "num_accepted": metadata_column(accepted, (accepted + 1) % (tokens + 1), in_metadata)}
