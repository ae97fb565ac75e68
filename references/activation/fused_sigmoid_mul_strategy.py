"""Inputs for ``fused_sigmoid_mul``: recipes inside a cell's bounds, and the tensors they build.

A recipe: ``{"T", "H", "x_layout", "gate_layout", "values", "amax", "seed"}``: sizes from the cell (edges
favoured; the cell's production sizes among the corners), each input in any legal row layout with NaN garbage
between rows (``references/strategies/layouts.py``), and a value mode of
``references/strategies/elementwise.py`` (NaN, +-inf, signed zeros, subnormals, saturating arguments, rows at
scales 2**-60..2**60), and ``amax`` absent or at a value before the call (``references/amax.py``).
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.amax import AMAX_MODES, amax_of_mode
from references.bounds import Span
from references.strategies import elementwise
from references.strategies.layouts import LAYOUTS, row_view
from references.strategies.shapes import seeds, sizes

# The interpreter costs milliseconds per program: on the CPU keep T * H within 2**14 elements so
# one example (about a dozen calls across the battery) takes a fraction of a second.  GPUs take the whole cell.
CPU_ELEMENT_BUDGET = 2**14
PRODUCTION = {"decode": {"H": (2048, 4096, 8192)}, "prefill": {"H": (4096,)}}
"""cell id -> dim -> the production sizes its corners pin (CONTRACTS.md: production shapes are corners)."""
EXP_ARGUMENTS = {"gate": "sigmoid"}
"""input -> the exp-based function of the formula it is an argument of (``elementwise.within_fp32_exp``)."""


def _caps(cell, device) -> tuple[Span, Span]:
    """The cell's spans of T and H, the H span capped on the CPU."""
    rows, cols = cell.bounds["T"], cell.bounds["H"]
    if device.type == "cpu":
        cols = Span(cols.lo, max(cols.lo, min(cols.hi, CPU_ELEMENT_BUDGET // max(rows.lo, 1))))
    return rows, cols


def _row_cap(cols: int, device) -> int | None:
    return max(1, CPU_ELEMENT_BUDGET // cols) if device.type == "cpu" else None


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        rows, cols = _caps(cell, device)
        width = draw(sizes(cols))
        return {"T": draw(sizes(rows, cap=_row_cap(width, device))), "H": width,
                "x_layout": draw(st.sampled_from(LAYOUTS)),
                "gate_layout": draw(st.sampled_from(LAYOUTS)),
                "values": draw(st.sampled_from(elementwise.MODES)), "amax": draw(st.sampled_from(AMAX_MODES)),
                "seed": draw(seeds())}

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """The fewest T at the narrowest and at the widest row, the most T (capped on the CPU) at both,
    a width off every block (1001) and the cell's production sizes, each in another layout, value mode
    and amax."""
    device = torch.device(device)
    rows, cols = _caps(cell, device)
    widths = [cols.lo, cols.hi, *(w for w in (1001, *PRODUCTION.get(cell.id, {}).get("H", ())) if w in cols)]
    shapes = []
    for width in dict.fromkeys(widths):
        cap = _row_cap(width, device)
        most = rows.hi if cap is None else max(rows.lo, min(rows.hi, cap))
        shapes += [(rows.lo, width), (most, width)]
    shapes += [(t, cols.lo) for t in PRODUCTION.get(cell.id, {}).get("T", ()) if t in rows]
    return [{"T": t, "H": width,
             "x_layout": LAYOUTS[(i + 0) % len(LAYOUTS)],
             "gate_layout": LAYOUTS[(i + 1) % len(LAYOUTS)],
             "values": elementwise.MODES[i % len(elementwise.MODES)], "amax": AMAX_MODES[i % len(AMAX_MODES)],
             "seed": cell.seed("corner", i)}
            for i, (t, width) in enumerate(dict.fromkeys(shapes))]


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(recipe["seed"])
    rows, cols = recipe["T"], recipe["H"]
    inputs = {}
    for name, dtype in (("x", torch.bfloat16), ("gate", torch.bfloat16)):
        tensor = row_view(rows, cols, dtype, recipe[f"{name}_layout"], device)
        values = elementwise.values(rows, cols, dtype, recipe["values"], generator, device)
        tensor.copy_(elementwise.within_fp32_exp(values, EXP_ARGUMENTS.get(name)).to(dtype))
        inputs[name] = tensor
    return {**inputs, "amax": amax_of_mode(recipe["amax"], device)}
