"""Values for the inputs of an elementwise op, generated on the device from a drawn seed.

Each input of a recipe gets its own values in the recipe's mode (a ``[rows, cols]`` fp32 tensor, rounded
to the input's dtype by the caller):
- ``normal``: N(0, 2).
- ``row_scales``: every row at its own power of two, 2**-60..2**60 (products of two inputs stay finite in
  fp32): a kernel that mixes rows up, or flushes small rows, is off by orders of magnitude.
- ``specials``: N(0, 2) with, in about half the rows, NaN, +-inf, -0.0/+0.0, subnormals and the
  saturating arguments of exp-based functions (+-20, +-100, +-1e5) planted at random columns, the first
  and last columns included.  No value is huge (none beyond 1e5): no product overflows fp32 where the
  float64 truth is finite, which would put every legitimate implementation far from the truth.
- ``subnormal``: half the rows hold subnormals only (kept exactly by an exact upcast).
"""
from __future__ import annotations

import torch

MODES = ("normal", "row_scales", "specials", "subnormal")
PLANTED = (float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 20.0, -20.0, 100.0, -100.0, 1e5, -1e5)


def values(rows: int, cols: int, dtype: torch.dtype, mode: str, generator: torch.Generator, device) -> torch.Tensor:
    """fp32 ``[rows, cols]`` values of ``mode`` for an input of ``dtype`` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {MODES}")
    x = 2 * torch.randn((rows, cols), generator=generator, device=device)
    if rows == 0 or cols == 0:
        return x
    uniform = lambda *shape: torch.rand(shape, generator=generator, device=device)  # noqa: E731
    if mode == "row_scales":
        x = x * torch.exp2(torch.randint(-60, 61, (rows, 1), generator=generator, device=device).float())
    elif mode == "specials":
        tiny = torch.finfo(dtype).tiny
        planted = torch.tensor((*PLANTED, tiny / 4, -tiny / 4), device=device)
        chosen = (uniform(rows, 1) < 0.5) & (uniform(rows, cols) < 0.05)
        edges = torch.zeros((rows, cols), dtype=torch.bool, device=device)
        edges[:, 0] = edges[:, -1] = True
        chosen = chosen | (edges & (uniform(rows, 1) < 0.5))
        pick = torch.randint(0, planted.numel(), (rows, cols), generator=generator, device=device)
        x = torch.where(chosen, planted[pick], x)
    elif mode == "subnormal":
        x = torch.where(uniform(rows, 1) < 0.5, x * torch.finfo(dtype).tiny / 8, x)
    return x


# Past g = -88.7 fp32's exp(-g) overflows where float64's does not (until -745): every fp32 sigmoid or silu,
# the stock op's too, is 0 there where the truth is not (x = inf gives NaN against an infinite truth; a row of
# such gates is 100% off); exp(g) overflows past +88.7 the same way.  No band judges inputs where every
# legitimate implementation is that far from the truth (CONTRACTS.md): such arguments are drawn at the edge of
# fp32's range instead; +-1e5 and +-inf (the same in both precisions) stay.
EXP_EDGE = 80.0
OVERFLOWS = {"sigmoid": -1, "silu": -1, "exp": 1}
"""function -> the sign of the arguments whose fp32 exp overflows where float64's does not."""


def within_fp32_exp(values: torch.Tensor, function: str | None) -> torch.Tensor:
    """``values`` of an argument of ``function`` (None: of none) with the magnitudes in (80, 1e4) on the side
    where its exp overflows drawn at 80."""
    if function is None:
        return values
    sign = OVERFLOWS[function]
    beyond = (values * sign > EXP_EDGE) & (values * sign < 1e4)
    return torch.where(beyond, sign * EXP_EDGE, values)
