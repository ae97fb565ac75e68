"""Inputs for ``rms_norm_gated``: recipes inside a cell's bounds, and the tensors they build.

A recipe: ``{"T", "H", "group_size", "gate", "amax", "x_layout", "z_layout", "weight_layout", "values",
"eps", "seed"}``.  ``H`` is a multiple of the group (for per-head cells at least two groups; for
whole-row cells any width, so rows that are not a multiple of 8 channels come up, the CuTe kernel's
unaligned path).  ``x`` and ``z`` take any legal row layout with NaN garbage between rows; ``weight`` is
contiguous, misaligned (``column_offset``) or every other element of a garbage buffer (``strided``).

Value modes (``x`` unless said; ``z`` ~ N(0, 3), ``weight`` ~ 1 + N(0, 0.1) unless said):
- ``normal``: N(0, 2).
- ``group_scales``: every group of a row at its own scale, 2**-60 to 2**40: a kernel that normalizes by
  the wrong group, or by the whole row, is off by orders of magnitude; small groups make eps dominate.
- ``zero_groups``: a third of the groups, and some whole rows, all zero (signed zeros included): rsqrt(eps).
- ``subnormal``: half the rows hold bf16 subnormals only (kept exactly by a correct upcast).
- ``large``: every group of x scaled so that the squares it normalizes by (of ``x * silu(z)`` when the
  gate comes first) sum to 2**120: near fp32's limit (2**128) without passing it in any summation
  order.  A sum past the limit is an input every fp32 implementation gets wrong by the whole row
  (rsqrt(inf) = 0): the band would be vacuous (CONTRACTS.md), not a hard input.
- ``non_finite``: NaN, +inf and -inf in x (about 1% of the elements of half the rows) and in z (a few
  rows), which the contract's arithmetic answers: a group holding one is NaN where x is infinite or
  NaN and zero elsewhere (rsqrt(inf) = 0); silu(-inf) is NaN, silu(+inf) = +inf.
- ``gate_extremes``: z at +-0, +-1e-3, +-20, +-100 and -1e30 (silu 0, -0.0 and the identity); weight
  with zeros and negatives.
``amax`` is ``none`` (no amax) or its value before the call: ``zero``, ``below`` (1e-30),
``above`` (3e38, above every output), ``negative`` (-1.0), ``negative_zero`` (-0.0).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from references.bounds import Span
from references.strategies.layouts import LAYOUTS, row_view
from references.strategies.shapes import product_cap, production_corners, seeds, sizes

GATES = ("none", "norm_then_gate", "gate_then_norm")
WEIGHT_LAYOUTS = ("contiguous", "column_offset", "strided")
MODES = ("normal", "non_finite", "group_scales", "zero_groups", "subnormal", "large", "gate_extremes")
LARGE_SQUARES = 2.0 ** 120   # a group's sum of squares in ``large``: 2**8 below fp32's limit
AMAX = ("none", "zero", "below", "above", "negative", "negative_zero")
AMAX_BEFORE = {"zero": 0.0, "below": 1e-30, "above": 3e38, "negative": -1.0, "negative_zero": -0.0}
EPS = (1e-6, 1e-5, 1e-3)
# The interpreter costs about 3 ms per program and a few more per tile op; programs hold 4096 channels
# (several narrow rows).  On the CPU keep T * H near 2**15 so one example (about a dozen calls across
# the battery) takes a fraction of a second; GPUs take the whole cell.
CPU_ELEMENT_BUDGET = 2**15


def cpu_cap(cell) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it)."""
    return product_cap(cell, ("T", "H"), CPU_ELEMENT_BUDGET)


def _group_sizes(cell) -> list:
    return list(cell.bounds["group"].choices)


def _width_span(cell, group, device) -> Span:
    """Widths H of this cell for ``group`` ("row": any; else multiples with at least two groups)."""
    width = cell.bounds["H"]
    lo = width.lo if group == "row" else max(width.lo, 2 * group)
    hi = width.hi
    if device.type == "cpu":
        hi = max(lo, min(hi, CPU_ELEMENT_BUDGET // max(cell.bounds["T"].lo, 1)))
    return Span(lo, hi)


def _tokens_cap(cell, width: int, device) -> int | None:
    return max(cell.bounds["T"].lo, CPU_ELEMENT_BUDGET // width) if device.type == "cpu" else None


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        group = draw(st.sampled_from(_group_sizes(cell)))
        span = _width_span(cell, group, device)
        if group == "row":
            width = draw(sizes(span))
        else:
            width = group * draw(sizes(Span(-(-span.lo // group), span.hi // group)))
        return {
            "T": draw(sizes(cell.bounds["T"], cap=_tokens_cap(cell, width, device))),
            "H": width,
            "group_size": width if group == "row" else group,
            "gate": draw(st.sampled_from(cell.bounds["gate"].choices)),
            "amax": draw(st.sampled_from(AMAX)),
            "x_layout": draw(st.sampled_from(LAYOUTS)),
            "z_layout": draw(st.sampled_from(LAYOUTS)),
            "weight_layout": draw(st.sampled_from(WEIGHT_LAYOUTS)),
            "values": draw(st.sampled_from(MODES)),
            "eps": draw(st.sampled_from(EPS)),
            "seed": draw(seeds()),
        }

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """Per group choice: the narrowest row at the fewest tokens, the widest at the most (capped on the
    CPU), and a width off every block (1001 channels, or 65 groups: a padded power of two of groups),
    each in another gate, amax, layout and value mode; then every real hidden size the cell holds
    (``production_corners``) at the fewest tokens, where the device's budget takes it."""
    device = torch.device(device)
    tokens = cell.bounds["T"]
    shapes = []
    for group in _group_sizes(cell):
        span = _width_span(cell, group, device)
        step = 1 if group == "row" else group
        narrow, wide = -(-span.lo // step) * step, span.hi // step * step
        odd = 1001 if group == "row" else 65 * group
        for width in dict.fromkeys((narrow, wide, odd if span.lo <= odd <= span.hi else wide)):
            cap = _tokens_cap(cell, width, device)
            most = tokens.hi if cap is None else min(tokens.hi, cap)
            shapes += [(tokens.lo, width, group), (most, width, group)]
    gates = cell.bounds["gate"].choices
    fixed = [
        {"T": rows, "H": width, "group_size": width if group == "row" else group,
         "gate": gates[i % len(gates)], "amax": AMAX[i % len(AMAX)], "x_layout": LAYOUTS[i % len(LAYOUTS)],
         "z_layout": LAYOUTS[(i + 1) % len(LAYOUTS)], "weight_layout": WEIGHT_LAYOUTS[i % len(WEIGHT_LAYOUTS)],
         "values": MODES[i % len(MODES)], "eps": EPS[i % len(EPS)], "seed": cell.seed("corner", i)}
        for i, (rows, width, group) in enumerate(dict.fromkeys(shapes))
    ]

    def fit(recipe: dict) -> dict | None:
        whole_row = recipe["group_size"] not in _group_sizes(cell)  # a "row" corner: its group is its width
        span = _width_span(cell, "row" if whole_row else recipe["group_size"], device)
        if recipe["H"] not in span or (not whole_row and recipe["H"] % recipe["group_size"]):
            return None
        return {**recipe, "group_size": recipe["H"]} if whole_row else recipe

    fewest = [corner for corner in fixed if corner["T"] == tokens.lo]
    return fixed + production_corners(fewest, cell, {"H": ("hidden",)}, fit)


def _weight_view(width: int, layout: str, device) -> torch.Tensor:
    if layout == "strided":
        return row_view(width, 1, torch.bfloat16, "every_other_row", device)[:, 0]
    return row_view(1, width, torch.bfloat16, layout, device)[0]


def _values(recipe: dict, generator, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 ``x``, ``z`` and ``weight`` of the recipe's value mode (rounded to bf16 by the caller)."""
    rows, width, group = recipe["T"], recipe["H"], recipe["group_size"]
    groups = width // group
    normal = lambda *shape: torch.randn(shape, generator=generator, device=device)  # noqa: E731
    uniform = lambda *shape: torch.rand(shape, generator=generator, device=device)  # noqa: E731
    x, z, weight = 2 * normal(rows, width), 3 * normal(rows, width), 1 + 0.1 * normal(width)
    mode = recipe["values"]
    if mode == "group_scales":
        exponent = torch.randint(-60, 41, (rows, groups, 1), generator=generator, device=device).float()
        x = (x.reshape(rows, groups, group) * torch.exp2(exponent)).reshape(rows, width)
    elif mode == "zero_groups":
        zero = (uniform(rows, groups, 1) < 1 / 3) | (uniform(rows, 1, 1) < 0.1)
        sign = torch.where(uniform(rows, groups, group) < 0.5, -1.0, 1.0)
        x = torch.where(zero, sign * 0.0, x.reshape(rows, groups, group)).reshape(rows, width)
    elif mode == "subnormal":
        tiny = torch.finfo(torch.bfloat16).tiny
        x = torch.where(uniform(rows, 1) < 0.5, x * tiny / 8, x)
    elif mode == "large":
        gate = 1.0 if recipe["gate"] != "gate_then_norm" else F.silu(z.to(torch.bfloat16).double())
        squares = (x.double() * gate).square().reshape(rows, groups, group).sum(dim=-1, keepdim=True)
        scale = (LARGE_SQUARES / squares.clamp_min(1e-300)).sqrt()
        x = (x.double().reshape(rows, groups, group) * scale).reshape(rows, width).float()
    elif mode == "gate_extremes":
        levels = torch.tensor([0.0, -0.0, 1e-3, -1e-3, 20.0, -20.0, 100.0, -100.0, -1e30], device=device)
        pick = torch.randint(0, levels.numel() + 3, (rows, width), generator=generator, device=device)
        z = torch.where(pick < levels.numel(), levels[pick.clamp(max=levels.numel() - 1)], z)
        weight = torch.where(uniform(width) < 0.1, 0.0, normal(width))
    elif mode == "non_finite":
        specials = torch.tensor([float("nan"), float("inf"), float("-inf")], device=device)
        planted = (uniform(rows, width) < 0.01) & (uniform(rows, 1) < 0.5)
        x = torch.where(planted, specials[torch.randint(0, 3, (rows, width), generator=generator, device=device)], x)
        gated = (uniform(rows, width) < 0.01) & (uniform(rows, 1) < 0.25)
        z = torch.where(gated, specials[torch.randint(0, 3, (rows, width), generator=generator, device=device)], z)
    return x, z, weight


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(recipe["seed"])
    rows, width = recipe["T"], recipe["H"]
    x_values, z_values, weight_values = _values(recipe, generator, device)
    x = row_view(rows, width, torch.bfloat16, recipe["x_layout"], device)
    x.copy_(x_values.to(torch.bfloat16))
    z = None
    if recipe["gate"] != "none":
        z = row_view(rows, width, torch.bfloat16, recipe["z_layout"], device)
        z.copy_(z_values.to(torch.bfloat16))
    weight = _weight_view(width, recipe["weight_layout"], device)
    weight.copy_(weight_values.to(torch.bfloat16))
    amax = None
    if recipe["amax"] != "none":
        amax = torch.full((1,), AMAX_BEFORE[recipe["amax"]], dtype=torch.float32, device=device)
    return {"x": x, "z": z, "weight": weight, "eps": recipe["eps"], "group_size": recipe["group_size"],
            "norm_before_gate": recipe["gate"] != "gate_then_norm", "amax": amax}
