"""What the GEMV strategies share: (M, N, K) inside a cell, corner shapes, and the activations.

A GEMV recipe holds ``M, N, K`` (K a multiple of ``k_step``: 16 for NVFP4, 1 for E4M3), the activation
value mode (``references/strategies/values.FINITE_MODES``, or ``non_finite``: NaN, +inf and -inf at
about 1% of the elements of half the rows, which the contract answers: NaN rows of y, and +-inf or NaN
where an infinity meets a nonzero or zero weight) and row layout (``references/strategies/layouts``),
plus the weight's own keys, which each op's strategy adds. Sizes favour the edges: M = 1 and 16, N one
either side of a 64-row tile, K not a multiple of 64.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.strategies.layouts import LAYOUTS, row_view
from references.strategies.shapes import multiples, product_cap, production_corners, sizes
from references.strategies.values import FINITE_MODES, finite_rows

# An example calls the kernel 4 times (parity, determinism, write guards twice) and quantizes its weight
# with the reference: 2**15 weights keep it within a second or two on a loaded 2-core machine.
CPU_WEIGHT_BUDGET = 2**15


def cpu_cap(cell) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it)."""
    caps = [product_cap(cell, ("N", "K"), CPU_WEIGHT_BUDGET),
            f"N <= {CPU_WEIGHT_BUDGET // 8}" if cell.bounds["N"].hi > CPU_WEIGHT_BUDGET // 8 else None]
    return ", ".join(cap for cap in caps if cap) or None


def _depth_cap(cols: int, device: torch.device) -> int | None:
    return CPU_WEIGHT_BUDGET // max(cols, 1) if device.type == "cpu" else None


def _cols_cap(device: torch.device) -> int | None:
    # at most 16 interpreter programs of 256 rows: the interpreter pays per program, K = 1 or not
    return CPU_WEIGHT_BUDGET // 8 if device.type == "cpu" else None


X_MODES = (*FINITE_MODES, "non_finite")


def draw_shape(draw, cell, device: torch.device, k_step: int) -> dict:
    cols = draw(sizes(cell.bounds["N"], cap=_cols_cap(device)))
    depth = draw(multiples(cell.bounds["K"], k_step, cap=_depth_cap(cols, device)))
    return {"M": draw(sizes(cell.bounds["M"])), "N": cols, "K": depth,
            "x_values": draw(st.sampled_from(X_MODES)), "x_layout": draw(st.sampled_from(LAYOUTS))}


# Outputs of the long-sum corner: a 16384-term float32 sum reordered moves the bf16 rounding of 10 to 20
# in 2**15 outputs (measured on fp8_gemv's three weight modes, 16 x 2047 x 16384); the corners with K = 80
# or with at most 65 outputs moved none, so without it determinism passed an order that varies per call.
LONG_SUM_OUTPUTS = 2**15


def corner_shapes(cell, device: torch.device, k_step: int) -> list[tuple[int, int, int]]:
    """(M, N, K): both bounds of M; the smallest N and the largest (the CPU budget permitting); one row
    past a 64-row tile; the smallest K, K = 80 (not a multiple of 64) and the widest K; and 2**15
    outputs (or all of the cell's) of the widest K, where a summation order that varies shows."""
    device = torch.device(device)
    rows, cols, depth = cell.bounds["M"], cell.bounds["N"], cell.bounds["K"]
    k_lo = -(-depth.lo // k_step) * k_step
    widest_cols = cols.hi if device.type != "cpu" else max(cols.lo, min(cols.hi, CPU_WEIGHT_BUDGET // 80))

    def widest_depth(n: int) -> int:
        cap = _depth_cap(n, device)
        return max(k_lo, (depth.hi if cap is None else min(depth.hi, cap)) // k_step * k_step)

    past_tile = min(max(cols.lo, 65), cols.hi)
    long_sums = max(cols.lo, min(widest_cols, LONG_SUM_OUTPUTS // rows.hi))
    shapes = [(rows.lo, cols.lo, k_lo), (rows.hi, widest_cols, 80), (rows.hi, cols.lo, widest_depth(cols.lo)),
              (rows.lo, past_tile, widest_depth(past_tile)), (rows.lo + 2, widest_cols, k_lo),
              (rows.hi, long_sums, widest_depth(long_sums))]
    return list(dict.fromkeys(shapes))  # on a CPU the last is the second: its budget allows no longer sums


def with_production_corners(fixed: list[dict], cell, device) -> list[dict]:
    """``fixed`` and, at the fewest rows, every real hidden size the cell holds as K and every real hidden
    size and vocabulary (an LM head) as N (``production_corners``), where the device's budget takes it."""
    device = torch.device(device)

    def fit(recipe: dict) -> dict | None:
        cols_cap, depth_cap = _cols_cap(device), _depth_cap(recipe["N"], device)
        if (cols_cap is not None and recipe["N"] > cols_cap) or (depth_cap is not None and recipe["K"] > depth_cap):
            return None
        return recipe

    fewest = [corner for corner in fixed if corner["M"] == cell.bounds["M"].lo]
    return fixed + production_corners(fewest, cell, {"K": ("hidden",), "N": ("hidden", "vocabulary")}, fit)


def activations(recipe: dict, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """bf16 ``[M, K]`` in the recipe's value mode and row layout (garbage between rows)."""
    rows, cols, mode = recipe["M"], recipe["K"], recipe["x_values"]
    x = row_view(rows, cols, torch.bfloat16, recipe["x_layout"], device)
    values = finite_rows(rows, cols, torch.bfloat16, "normal" if mode == "non_finite" else mode, generator, device)
    if mode == "non_finite":
        specials = torch.tensor([float("nan"), float("inf"), float("-inf")], device=device, dtype=torch.bfloat16)
        planted = (torch.rand((rows, cols), generator=generator, device=device) < 0.01) & \
                  (torch.rand((rows, 1), generator=generator, device=device) < 0.5)
        values = torch.where(planted, specials[torch.randint(0, 3, (rows, cols), generator=generator, device=device)],
                             values)
    x.copy_(values)
    return x
