"""Inputs for ``nvfp4_gemv``: recipes inside a cell's bounds, and the tensors they build.

A recipe: ``{"M", "N", "K", "x_values", "x_layout", "global_scale", "weights", "packed_layout",
"scales_layout", "seed"}``. The weight
``[N, K]`` is built block by block from ``suites/quant/hard_cases`` (midpoint ties and their float32
neighbours, zero, tiny, underflowing and saturating blocks, E4M3-tie scales; or plain Gaussian rows)
around a global scale chosen by mode, then quantized by the contract's reference ``nvfp4_quantize``:
the GEMV gets exactly what the quantizer hands it. ``huge_amax`` and ``tiny_amax`` are left out:
weights near 1e35 overflow bf16 outputs, and weights near 1e-33 make outputs below bf16's normal range,
where the stock op flushes subnormals (168 ULP of stock error, measured on the CPU) and the band it
sets would be too wide to judge anything else in that example; ``nvfp4_quantize`` covers both ends.

``packed_layout`` and ``scales_layout`` are row layouts of their own (``references/strategies/layouts.py``):
the quantizer's values in a padded, every-other-row or offset view, as a tensor-parallel slice of a packed
weight (``packed[:, k0 // 2:k1 // 2]``, ``block_scales[:, k0 // 16:k1 // 16]``) or a pitched buffer hands them
over (the contract's "as produced by nvfp4_quantize" is read as values: the reference takes any strides).
``column_strided`` (``stride(1) == 2``) is a corner's weight layout: inside the contract, beyond the limits of
every kernel judged so far (refused clearly); drawn as often as the others it made a third of a cell's draws
refusals and left the examples judged under the policy (2026-12-07e on sm90: 163 of 232 drawn), while one
corner each is where a kernel reading the bytes as contiguous is caught.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.formats import NVFP4_BLOCK, nvfp4_quantize
from references.gemm.gemv_inputs import (  # noqa: F401 - cpu_cap: the verdict line reads it
    X_MODES, activations, corner_shapes, cpu_cap, draw_shape, with_production_corners)
from references.quant.hard_cases import GLOBAL_SCALE_MODES, HARD_BLOCK_KINDS, hard_input
from references.strategies.layouts import LAYOUTS, ROW_LAYOUTS, rows_in_layout
from references.strategies.shapes import seeds


WEIGHT_MIXES = {"hard": HARD_BLOCK_KINDS, "random": ("random",)}
SCALE_MODES = tuple(mode for mode in GLOBAL_SCALE_MODES if mode not in ("huge_amax", "tiny_amax"))


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        return {**draw_shape(draw, cell, device, NVFP4_BLOCK),
                "global_scale": draw(st.sampled_from(SCALE_MODES)),
                "weights": draw(st.sampled_from(tuple(WEIGHT_MIXES))),
                "packed_layout": draw(st.sampled_from(ROW_LAYOUTS)),
                "scales_layout": draw(st.sampled_from(ROW_LAYOUTS)),
                "seed": draw(seeds())}

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """Each corner shape, and each global-scale mode, in turn; hard weights, every activation mode and layout
    (x's a step on from the shapes', as fp8_gemv's; the packed weight's a step behind x's, its scales' two)."""
    shapes = corner_shapes(cell, device, NVFP4_BLOCK)
    count = max(len(shapes), len(SCALE_MODES))
    return with_production_corners([
        {"M": rows, "N": cols, "K": depth, "x_values": X_MODES[i % len(X_MODES)],
         "x_layout": LAYOUTS[(i + 1) % len(LAYOUTS)], "global_scale": SCALE_MODES[i % len(SCALE_MODES)],
         "weights": "hard", "packed_layout": LAYOUTS[(i + 2) % len(LAYOUTS)],
         "scales_layout": LAYOUTS[(i + 3) % len(LAYOUTS)], "seed": cell.seed("corner", i)}
        for i, (rows, cols, depth) in enumerate(shapes[i % len(shapes)] for i in range(count))
    ], cell, device)


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    weight, global_scale = hard_input(recipe["N"], recipe["K"], recipe["global_scale"], WEIGHT_MIXES[recipe["weights"]],
                                      recipe["seed"], device)
    packed, block_scales = nvfp4_quantize(weight, global_scale)
    generator = torch.Generator(device=device).manual_seed(recipe["seed"] + 1)
    return {"x": activations(recipe, generator, device),
            "packed": rows_in_layout(packed, recipe.get("packed_layout", "contiguous")),
            "block_scales": rows_in_layout(block_scales, recipe.get("scales_layout", "contiguous")),
            "global_scale": global_scale}
