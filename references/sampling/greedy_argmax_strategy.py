"""Inputs for ``greedy_argmax``: recipes inside a cell's bounds, and the tensors they build.

A recipe: ``{"R", "V", "dtype", "layout", "values", "seed"}`` — sizes from the cell (edges favoured),
one of the legal row layouts with NaN garbage between rows, and a value mode that plants NaN, +-inf,
signed zeros, subnormals, ties and tail maxima (``references/strategies/values.py``).
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.strategies.layouts import ROW_LAYOUTS, row_view
from references.strategies.shapes import product_cap, production_corners, seeds, sizes
from references.strategies.values import MODES, row_values

# The interpreter costs milliseconds per program and per tile op: on the CPU keep R * V under 2**18
# elements (R = 1024 rows of up to 256 columns, or one row of 262144), so one example (about ten calls
# across the battery) stays within seconds.  GPUs take the whole cell.
CPU_ELEMENT_BUDGET = 2**18


def _vocab_cap(rows: int, device: torch.device) -> int | None:
    return CPU_ELEMENT_BUDGET // max(rows, 1) if device.type == "cpu" else None


def cpu_cap(cell) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it)."""
    return product_cap(cell, ("R", "V"), CPU_ELEMENT_BUDGET)


def _dtype_names(cell) -> list[str]:
    return [str(dtype).removeprefix("torch.") for dtype in cell.bounds["dtype"].choices]


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        rows = draw(sizes(cell.bounds["R"]))
        return {
            "R": rows,
            "V": draw(sizes(cell.bounds["V"], cap=_vocab_cap(rows, device))),
            "dtype": draw(st.sampled_from(_dtype_names(cell))),
            "layout": draw(st.sampled_from(ROW_LAYOUTS)),   # the contract refuses stride(1) != 1
            "values": draw(st.sampled_from(MODES)),
            "seed": draw(seeds()),
        }

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """Both bounds of R against both bounds of V, and a block edge, each in another dtype/layout/mode; then
    every real vocabulary the cell holds (``production_corners``) at the fewest rows, and on a GPU at the
    most rows too (on the CPU a vocabulary above the budget narrows onto the widest corner: left out)."""
    device = torch.device(device)
    rows_span, vocab_span = cell.bounds["R"], cell.bounds["V"]
    shapes = []
    for rows in (rows_span.lo, rows_span.hi):
        cap = _vocab_cap(rows, device)
        widest = vocab_span.hi if cap is None else max(vocab_span.lo, min(vocab_span.hi, cap))
        shapes += [(rows, vocab_span.lo), (rows, widest), (rows, min(4097, widest))]  # 4097: a block + 1
    dtypes, modes = _dtype_names(cell), ("specials", "ties", "tail_max", "neg_inf", "signed_zeros")
    fixed = [
        {"R": rows, "V": vocab, "dtype": dtypes[i % len(dtypes)], "layout": ROW_LAYOUTS[i % len(ROW_LAYOUTS)],
         "values": modes[i % len(modes)], "seed": cell.seed("corner", i)}
        for i, (rows, vocab) in enumerate(dict.fromkeys(shapes))
    ]

    def fit(recipe: dict) -> dict | None:
        cap = _vocab_cap(recipe["R"], device)
        return recipe if cap is None or recipe["V"] <= cap else None  # narrowed: the widest corner has it

    # templates at the fewest rows; on a GPU at the most rows as well (the CPU budget would narrow them away)
    templates = [c for c in fixed if c["R"] == rows_span.lo or device.type != "cpu"]
    return fixed + production_corners(templates, cell, {"V": ("vocabulary",)}, fit)


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    dtype = getattr(torch, recipe["dtype"])
    generator = torch.Generator(device=device).manual_seed(recipe["seed"])
    logits = row_view(recipe["R"], recipe["V"], dtype, recipe["layout"], device)
    logits.copy_(row_values(recipe["R"], recipe["V"], dtype, recipe["values"], generator, device))
    return {"logits": logits}


def explain(inputs: dict, position: int, index: tuple, got, expected) -> str:
    """A differing answer's deciding values (``oracles/findings.py``): the logits at the returned and the
    expected index, the row's max and its NaN count."""
    row = inputs["logits"][index[0]].to(torch.float64)

    def at(column) -> str:
        return f"logits[{index[0]}, {column}] = {row[column].item()!r}" if 0 <= column < row.numel() else \
            f"index {column} is outside the row (V = {row.numel()})"

    finite = row[~row.isnan()]
    top = finite.max().item() if finite.numel() else float("nan")
    return (f"returned: {at(got)}; expected: {at(expected)}; row max {top!r}, "
            f"{int(row.isnan().sum())} NaN of {row.numel()}")
