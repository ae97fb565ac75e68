"""Inputs for ``nvfp4_quantize``: recipes inside a cell's bounds, and the tensors they build.

A recipe: ``{"M", "K", "layout", "global_scale", "blocks", "seed"}``: sizes from the cell (K a multiple
of 16, edges favoured, often not a multiple of 64), one of the legal row layouts with NaN garbage
between rows, how the global scale is chosen (``hard_cases.GLOBAL_SCALE_MODES``) and which block kinds
the rows are made of (``BLOCK_MIXES``). The corners visit every global-scale mode, so each cell sees
exact midpoints, one float32 ulp either side, E4M3 ties only the IEEE division reaches, zero, tiny,
underflowing and saturating blocks, and out_scale overflowing next to float32 subnormal products.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.formats import NVFP4_BLOCK
from references.quant.hard_cases import GLOBAL_SCALE_MODES, HARD_BLOCK_KINDS, hard_input
from references.strategies.layouts import LAYOUTS, row_view
from references.strategies.shapes import multiples, product_cap, production_corners, seeds, sizes

BLOCK_MIXES = {
    "hard": HARD_BLOCK_KINDS,
    "on_midpoints": ("ties", "midpoint_landing", "scale_ties"),
    "random": ("random",),
}
# The interpreter does about 2 M elements per second here; an example calls the kernel 8 times (parity,
# determinism, batch invariance 4, write guards 2): 2**17 elements keeps it under a second.
CPU_ELEMENT_BUDGET = 2**17


def cpu_cap(cell) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it)."""
    return product_cap(cell, ("M", "K"), CPU_ELEMENT_BUDGET)


def _cap(rows: int, device: torch.device) -> int | None:
    return CPU_ELEMENT_BUDGET // max(rows, 1) if device.type == "cpu" else None


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        rows = draw(sizes(cell.bounds["M"]))
        return {
            "M": rows,
            "K": draw(multiples(cell.bounds["K"], NVFP4_BLOCK, cap=_cap(rows, device))),
            "layout": draw(st.sampled_from(LAYOUTS)),
            "global_scale": draw(st.sampled_from(GLOBAL_SCALE_MODES)),
            "blocks": draw(st.sampled_from(tuple(BLOCK_MIXES))),
            "seed": draw(seeds()),
        }

    return draw_recipe()


def _widest(rows: int, span, device) -> int:
    cap = _cap(rows, device)
    widest = span.hi if cap is None else min(span.hi, cap)
    return max(span.lo, widest // NVFP4_BLOCK * NVFP4_BLOCK)


def corners(cell, device) -> list[dict]:
    """Every global-scale mode once on a wide shape (the bounds of M against a 64-misaligned K = 80 and
    the widest K), each in another layout, on hard blocks; the smallest shape of the cell; and every real
    hidden size the cell holds as K (``production_corners``), where the device's budget takes it."""
    device = torch.device(device)
    rows_span, cols_span = cell.bounds["M"], cell.bounds["K"]
    top_rows = rows_span.hi if device.type != "cpu" else min(rows_span.hi, CPU_ELEMENT_BUDGET // 80)
    wide = [(rows_span.lo, _widest(rows_span.lo, cols_span, device)), (top_rows, 80),
            (top_rows, _widest(top_rows, cols_span, device)), (rows_span.lo + 2, 3 * 64 - 16)]
    cases = [(wide[i % len(wide)], mode) for i, mode in enumerate(GLOBAL_SCALE_MODES)]
    cases.append(((rows_span.lo, cols_span.lo), "from_amax"))
    fixed = [
        {"M": rows, "K": cols, "layout": LAYOUTS[i % len(LAYOUTS)], "global_scale": mode, "blocks": "hard",
         "seed": cell.seed("corner", i)}
        for i, ((rows, cols), mode) in enumerate(cases)
    ]

    def fit(recipe: dict) -> dict | None:
        cap = _cap(recipe["M"], device)
        return recipe if cap is None or recipe["K"] <= cap else None

    fewest = [corner for corner in fixed if corner["M"] == rows_span.lo]
    return fixed + production_corners(fewest, cell, {"K": ("hidden",)}, fit)


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    x, global_scale = hard_input(recipe["M"], recipe["K"], recipe["global_scale"], BLOCK_MIXES[recipe["blocks"]],
                                 recipe["seed"], device)
    view = row_view(recipe["M"], recipe["K"], torch.bfloat16, recipe["layout"], device)
    view.copy_(x)
    return {"x": view, "global_scale": global_scale}
