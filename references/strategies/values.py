"""Values generated on the target device from a drawn seed: the cases kernels get wrong.

Hypothesis draws a *mode* and a seed; the tensor is made on the device from a ``torch.Generator``
seeded with it, so a 256 MB input costs one small draw and reproduces exactly from its recipe.

Modes (rows are the last-but-one axis of a 2-D ``[rows, cols]`` tensor):
- ``normal``: Gaussian, scale 4.
- ``ties``: a few integer levels, so each row's maximum repeats at many places.
- ``specials``: Gaussian with, in about half the rows, NaN, +-inf, -0.0/+0.0, subnormals and values
  beyond fp16's range planted at random columns (first and last columns included).
- ``neg_inf``: rows of all -inf, rows of -inf with one NaN, mixed with Gaussian rows.
- ``signed_zeros``: non-positive rows whose maximum is zero, written as both -0.0 and +0.0.
- ``tail_max``: the row maximum planted in the last column, and again at a random earlier column
  in every other row (a tie that the earliest index must win).

Finite modes (``finite_rows``), for inputs a contract requires finite (activations of a matmul):
- ``normal``: Gaussian, scale 1.
- ``row_scales``: each row Gaussian times its own power of two in 2**-30..2**30.
- ``zero_rows``: about a third of the rows all zeros (+0.0 and -0.0), the rest Gaussian.
- ``outliers``: Gaussian with a few columns 1000x larger in every row (LLM activation outliers).
"""
from __future__ import annotations

import torch

MODES = ("normal", "ties", "specials", "neg_inf", "signed_zeros", "tail_max")


def _uniform(shape, generator, device) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=device)


def _random_columns(rows: int, cols: int, generator, device) -> torch.Tensor:
    return torch.randint(0, cols, (rows,), generator=generator, device=device)


def special_values(dtype: torch.dtype) -> list[float]:
    tiny = torch.finfo(dtype).tiny
    return [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, tiny / 4, -tiny / 4, 1e5, -1e5, 3e38]


def row_values(rows: int, cols: int, dtype: torch.dtype, mode: str, generator: torch.Generator,
               device: torch.device) -> torch.Tensor:
    """A ``[rows, cols]`` tensor of ``dtype`` in value ``mode`` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {MODES}")
    shape = (rows, cols)
    x = torch.randn(shape, generator=generator, device=device) * 4
    if rows == 0 or cols == 0:
        return x.to(dtype)
    row = torch.arange(rows, device=device)
    if mode == "ties":
        x = torch.randint(-3, 3, shape, generator=generator, device=device).float()
    elif mode == "specials":
        chosen_rows = _uniform(rows, generator, device) < 0.5
        for value in special_values(dtype):
            planted = (_uniform(shape, generator, device) < 0.002) & chosen_rows[:, None]
            x = torch.where(planted, torch.tensor(value, device=device), x)
        edge = torch.tensor(special_values(dtype), device=device)
        pick = torch.randint(0, edge.numel(), (rows, 2), generator=generator, device=device)
        x[:, 0] = torch.where(chosen_rows, edge[pick[:, 0]], x[:, 0])
        x[:, -1] = torch.where(chosen_rows, edge[pick[:, 1]], x[:, -1])
    elif mode == "neg_inf":
        kind = torch.randint(0, 3, (rows,), generator=generator, device=device)
        x = torch.where((kind > 0)[:, None], torch.tensor(-torch.inf, device=device), x)
        nan_at = _random_columns(rows, cols, generator, device)
        x[row[kind == 2], nan_at[kind == 2]] = torch.nan
    elif mode == "signed_zeros":
        x = -x.abs() - 1
        zeros = _uniform(shape, generator, device) < 0.05
        sign = _uniform(shape, generator, device) < 0.5
        x = torch.where(zeros, torch.where(sign, torch.tensor(-0.0, device=device),
                                           torch.tensor(0.0, device=device)), x)
        x[:, 0] = -0.0  # the first zero is a negative one: -0.0 must tie with a later +0.0
        x[row, _random_columns(rows, cols, generator, device)] = 0.0
    elif mode == "tail_max":
        top = x.abs().amax() + 1
        x[:, -1] = top
        earlier = _random_columns(rows, cols, generator, device)
        every_other = row[row % 2 == 0]
        x[every_other, earlier[every_other]] = top
    return x.to(dtype)


FINITE_MODES = ("normal", "row_scales", "zero_rows", "outliers")


def finite_rows(rows: int, cols: int, dtype: torch.dtype, mode: str, generator: torch.Generator,
                device: torch.device) -> torch.Tensor:
    """A finite ``[rows, cols]`` tensor of ``dtype`` in finite value ``mode`` (module docstring)."""
    if mode not in FINITE_MODES:
        raise ValueError(f"mode: {mode!r} is not one of {FINITE_MODES}")
    x = torch.randn((rows, cols), generator=generator, device=device)
    if mode == "row_scales":
        x = x * torch.exp2(torch.randint(-30, 31, (rows, 1), generator=generator, device=device).float())
    elif mode == "zero_rows":
        zero = _uniform((rows, 1), generator, device) < 1 / 3
        sign = _uniform((rows, cols), generator, device) < 0.5
        x = torch.where(zero, torch.where(sign, -0.0, 0.0), x)
    elif mode == "outliers":
        x = torch.where(_uniform((1, cols), generator, device) < 0.01, x * 1000, x)
    return x.to(dtype)


_SAME_WIDTH_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def random_bits(shape, dtype: torch.dtype, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Every bit pattern equally likely: NaN with payloads, +-inf, -0.0, subnormals, all 256 e4m3 codes.

    For ops that move elements without computing on them (copies, gathers, scatters), whose parity is
    in bits: a kernel that passes values through a float register or a cast changes some of these.
    """
    integer = _SAME_WIDTH_INTS[torch.empty((), dtype=dtype).element_size()]
    info = torch.iinfo(integer)
    high = info.max if integer is torch.int64 else info.max + 1   # exclusive; int64 cannot hold 2**63
    return torch.randint(info.min, high, shape, generator=generator, device=device, dtype=integer).view(dtype)
