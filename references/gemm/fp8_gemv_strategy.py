"""Inputs for ``fp8_gemv``: recipes inside a cell's bounds, and the tensors they build.

A recipe: ``{"M", "N", "K", "x_values", "x_layout", "weights", "w_layout", "w_scale", "seed"}``. Weight modes:

- ``all_codes``: every finite E4M3 code equally likely: both zeros, all subnormals, ±448.
- ``gaussian``: a Gaussian weight quantized as checkpoints are (amax to 448, satfinite RNE).
- ``log_uniform``: magnitudes spread over every binade, 2**-11..2**10 before the cast (under- and
  overflowing the E4M3 range at both ends).

``w_layout`` is one of the row layouts ``x`` takes (``references/strategies/layouts.py``): the contract's ``w``
is any ``[N, K]`` tensor, and a kernel that reads it as dense rows must meet a padded or offset one (a recipe
written before the field builds a contiguous ``w``).

``w_scale`` is a power of two (the stock op's bf16 dequantization is then exact: the band is the
stock matmul's rounding alone) or any float32 in 2**-20..2**4 (the stock op also rounds the weight).
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.formats import E4M3_MAX, e4m3_satfinite_rne
from references.gemm.gemv_inputs import (  # noqa: F401 - cpu_cap: the verdict line reads it
    X_MODES, activations, corner_shapes, cpu_cap, draw_shape, with_production_corners)
from references.strategies.layouts import LAYOUTS, rows_in_layout
from references.strategies.shapes import seeds


WEIGHT_MODES = ("all_codes", "gaussian", "log_uniform")
SCALE_MODES = ("pow2", "random")
E4M3_NAN = 0x7F


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        return {**draw_shape(draw, cell, device, 1), "weights": draw(st.sampled_from(WEIGHT_MODES)),
                "w_layout": draw(st.sampled_from(LAYOUTS)), "w_scale": draw(st.sampled_from(SCALE_MODES)),
                "seed": draw(seeds())}

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """Each corner shape in turn with every weight mode, activation mode and layout (x's a step on from the
    shapes', so that its column-strided layout meets a K above 1; w's a step behind x's)."""
    return with_production_corners([
        {"M": rows, "N": cols, "K": depth, "x_values": X_MODES[i % len(X_MODES)],
         "x_layout": LAYOUTS[(i + 1) % len(LAYOUTS)], "weights": WEIGHT_MODES[i % len(WEIGHT_MODES)],
         "w_layout": LAYOUTS[(i + 2) % len(LAYOUTS)],
         "w_scale": SCALE_MODES[i % len(SCALE_MODES)], "seed": cell.seed("corner", i)}
        for i, (rows, cols, depth) in enumerate(corner_shapes(cell, device, 1))
    ], cell, device)


def _weight(cols: int, depth: int, mode: str, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    shape = (cols, depth)
    if mode == "all_codes":
        codes = torch.randint(0, 254, shape, generator=generator, device=device)
        codes = codes + (codes >= E4M3_NAN).int()  # skip 0x7F; 0xFF is past the range: no NaN code
        return codes.to(torch.uint8).view(torch.float8_e4m3fn)
    normal = torch.randn(shape, generator=generator, device=device)
    if mode == "gaussian":
        return e4m3_satfinite_rne(normal * (E4M3_MAX / normal.abs().amax().clamp_min(1e-30)))
    binade = torch.rand(shape, generator=generator, device=device) * 21 - 11
    return e4m3_satfinite_rne(normal.sign() * torch.exp2(binade))


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(recipe["seed"])
    w = rows_in_layout(_weight(recipe["N"], recipe["K"], recipe["weights"], generator, device),
                       recipe.get("w_layout", "contiguous"))
    if recipe["w_scale"] == "pow2":
        w_scale = torch.exp2(torch.randint(-20, 5, (1,), generator=generator, device=device).float())
    else:
        w_scale = torch.exp2(torch.rand(1, generator=generator, device=device) * 24 - 20)
    return {"x": activations(recipe, generator, device), "w": w, "w_scale": w_scale}
