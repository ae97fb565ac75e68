"""Inputs for ``gdn_verify``: T drafted tokens per row over a slot pool (see ``references/ssm/gdn_inputs.py``).

Besides the decode fields a recipe has ``T`` and ``tokens``: every row drafting ``full`` T tokens,
``mixed`` counts in 1..T, or ``ones``; tokens past a row's count hold NaN.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.ssm.gdn_decode_strategy import corner_recipes
from references.ssm.gdn_inputs import (PRODUCTION_DEPTHS, PRODUCTION_DIMS, Builder, draw_kinds, draw_shape, fits,
                                      metadata_column, program_tokens_cap, with_rows)
from references.strategies.shapes import production_corners, sizes

TOKEN_COUNTS = ("full", "mixed", "ones")


def cpu_cap(cell) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it)."""
    return program_tokens_cap(cell, "T")


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        tokens = draw(sizes(cell.bounds["T"]))
        return {**draw(draw_shape(cell, device, tokens)), **draw(draw_kinds(cell)), "T": tokens,
                "tokens": draw(st.sampled_from(TOKEN_COUNTS))}

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """gdn_decode's corners, drafting the most tokens the budget lets them, mixed, full, and T = 1; then the
    production sizes the cell holds (``production_corners``: speculative depths as T, head dims, groups)
    that they miss, on the first of them that the budget takes with it."""
    device = torch.device(device)
    span = cell.bounds["T"]
    found = []
    for i, recipe in enumerate(corner_recipes(cell)):
        for tokens in (span.hi, 4, 2, span.lo):
            if span.lo <= tokens <= span.hi and fits(recipe, device, tokens):
                found.append({**recipe, "T": tokens, "tokens": TOKEN_COUNTS[i % len(TOKEN_COUNTS)],
                              "seed": cell.seed("corner", i)})
                break
    return found + production_corners(with_rows(found), cell, {**PRODUCTION_DEPTHS, **PRODUCTION_DIMS},
                                      lambda recipe: recipe if fits(recipe, device, recipe["T"]) else None)


def build(recipe: dict, device) -> dict:
    builder = Builder(recipe, device)
    batch, tokens = builder.batch, recipe["T"]
    slots = builder.slots()
    state = builder.with_live_states(builder.pool(), slots)
    if recipe["tokens"] == "full":
        num_tokens = torch.full((batch,), tokens, device=builder.device)
    elif recipe["tokens"] == "ones":
        num_tokens = torch.ones(batch, device=builder.device)
    else:
        num_tokens = torch.randint(1, tokens + 1, (batch,), generator=builder.generator, device=builder.device)
    num_tokens = num_tokens.to(torch.int32)
    num_tokens = metadata_column(num_tokens, num_tokens % tokens + 1, builder.serving_layout)
    past_count = torch.arange(tokens, device=builder.device)[None, :] >= num_tokens[:, None]
    drafted = builder.tokens((batch, tokens), garbage=(slots < 0)[:, None] | past_count)
    return {**drafted, "state": state, "slots": slots, "num_tokens": num_tokens, "scale": builder.scale,
            "qk_l2norm": recipe["qk_l2norm"]}
