"""An independent, deliberately different way to round to a small float grid: the tests' oracle.

The references round by counting midpoints (E2M1) or by torch's cast (E4M3). This module instead
searches the sorted grid of representable magnitudes in float64 and compares the distances to the two
neighbours, breaking exact ties toward the even code, the way the IEEE rule is stated. For the grids
here (at most 4 significant bits) and float32 inputs those float64 distances are exact wherever the
choice is close, so the oracle is exact.
"""
from __future__ import annotations

from fractions import Fraction

import torch


def nearest_even_index(values: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Index into ``grid`` of each value's magnitude rounded to nearest, ties to the even index.

    ``grid``: float64, ascending, ``grid[0] == 0``, index parity = code parity (true for E2M1 and the
    non-negative E4M3 codes). Magnitudes beyond ``grid[-1]`` saturate to the last index. NaN is the
    caller's business.
    """
    magnitude = values.double().abs().clamp(max=grid[-1].item())
    upper = torch.searchsorted(grid, magnitude).clamp(max=len(grid) - 1)  # first grid value >= magnitude
    lower = (upper - 1).clamp(min=0)
    above = grid[upper] - magnitude
    below = magnitude - grid[lower]
    take_upper = (above < below) | ((above == below) & (upper % 2 == 0))
    return torch.where(take_upper, upper, lower)


def float32_neighbours(values: list[float]) -> torch.Tensor:
    """Each value (exact in float32) with the float32 just below and just above it."""
    centre = torch.tensor(values, dtype=torch.float32)
    below = torch.nextafter(centre, torch.full_like(centre, -torch.inf))
    above = torch.nextafter(centre, torch.full_like(centre, torch.inf))
    return torch.cat([below, centre, above])


def random_float32(count: int, seed: int) -> torch.Tensor:
    """``count`` float32 values from uniformly random bit patterns: every binade, subnormals, NaN, inf."""
    generator = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31, (count,), generator=generator, dtype=torch.int64)
    return bits.to(torch.int32).view(torch.float32)


def float32_nearest(value: Fraction) -> Fraction:
    """The float32 nearest to an exact rational, ties to the even significand, subnormals included (no
    overflow: the caller's values are far below float32's largest)."""
    if value == 0:
        return Fraction(0)
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1                                   # now 2**exponent <= magnitude < 2**(exponent + 1)
    ulp = Fraction(2) ** (max(exponent, -126) - 23)
    steps, rest = divmod(magnitude / ulp, 1)
    steps += rest > Fraction(1, 2) or (rest == Fraction(1, 2) and steps % 2 == 1)
    return steps * ulp * (1 if value > 0 else -1)
