"""Inputs for ``gdn_decode``: one token per row over a slot pool (see ``references/ssm/gdn_inputs.py``).

The CPU budget counts the replay property's ``REPLAY_TOKENS`` drafted tokens, the costliest call of an
example.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.ssm.gdn_verify import REPLAY_TOKENS
from references.ssm.gdn_inputs import (COLUMN_STRIDED, PRODUCTION_DIMS, Builder, draw_kinds, draw_shape, fits,
                                      program_tokens_cap, with_rows)
from references.strategies.shapes import production_corners


def cpu_cap(cell) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it)."""
    return program_tokens_cap(cell, REPLAY_TOKENS)


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        return {**draw(draw_shape(cell, device, REPLAY_TOKENS)), **draw(draw_kinds(cell))}

    return draw_recipe()


def corner_recipes(cell) -> list[dict]:
    """Bounds and serving shapes, each with another kind.  Small enough for the interpreter: the empty
    batch, one row of one head, all-padding over a free last slot, padded ends of a fused projection,
    a group of four v heads, two q/k heads of two v heads each (a wrong head mapping shows only there).
    On a GPU besides: the widest batch, Qwen3-Next's heads (16 q/k, 32 v of 128), 32 q/k heads x 4.
    Last, column-strided q, k, v (the refusal rule: beyond the kernel's limits, inside the contract)."""
    dtype = str(cell.bounds["state_dtype"].choices[0]).removeprefix("torch.")
    base = {"state_dtype": dtype, "free_slots": 1, "scale": "inv_sqrt_dk", "layout": "contiguous",
            "values": "typical", "padding": "none", "slots": "shuffled", "qk_l2norm": False}
    return [
        {**base, "B": 0, "H": 1, "group": 1, "Dk": 64, "Dv": 64},
        {**base, "B": 1, "H": 1, "group": 1, "Dk": 64, "Dv": 128, "values": "edges", "slots": "last_slot_live"},
        {**base, "B": 2, "H": 1, "group": 2, "Dk": 128, "Dv": 64, "padding": "all", "slots": "last_slot_free",
         "layout": "strided_pool"},
        {**base, "B": 4, "H": 1, "group": 1, "Dk": 128, "Dv": 128, "padding": "ends", "slots": "last_slot_free",
         "layout": "fused_projection", "qk_l2norm": True, "values": "large", "free_slots": 3},
        {**base, "B": 1, "H": 1, "group": 4, "Dk": 64, "Dv": 64, "values": "edges", "qk_l2norm": True,
         "scale": "one"},
        {**base, "B": 1, "H": 2, "group": 2, "Dk": 64, "Dv": 64, "values": "edges", "layout": "fused_projection"},
        {**base, "B": 256, "H": 1, "group": 1, "Dk": 64, "Dv": 64, "padding": "some", "layout": "fused_projection"},
        {**base, "B": 64, "H": 16, "group": 2, "Dk": 128, "Dv": 128, "padding": "some", "slots": "last_slot_live"},
        {**base, "B": 2, "H": 32, "group": 4, "Dk": 128, "Dv": 128, "values": "edges", "qk_l2norm": True},
        # column-strided q, k, v: the contract answers them, the kernel refuses them (its own limit)
        {**base, "B": 2, "H": 1, "group": 2, "Dk": 64, "Dv": 64, "padding": "some", "layout": COLUMN_STRIDED},
    ]


def corners(cell, device) -> list[dict]:
    """The corner recipes the device's budget takes, then the production sizes the cell holds that they
    miss (``production_corners``), on the first of them that the budget takes with it."""
    device = torch.device(device)
    found = [{**recipe, "seed": cell.seed("corner", i)} for i, recipe in enumerate(corner_recipes(cell))
             if fits(recipe, device, REPLAY_TOKENS)]
    return found + production_corners(with_rows(found), cell, PRODUCTION_DIMS,
                                      lambda recipe: recipe if fits(recipe, device, REPLAY_TOKENS) else None)


def build(recipe: dict, device) -> dict:
    builder = Builder(recipe, device)
    slots = builder.slots()
    state = builder.with_live_states(builder.pool(), slots)
    drafted = builder.tokens((builder.batch,), garbage=slots < 0)
    return {**drafted, "state": state, "slots": slots, "scale": builder.scale, "qk_l2norm": recipe["qk_l2norm"]}
