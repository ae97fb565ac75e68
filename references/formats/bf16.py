"""bfloat16: round float64 values to bf16 with ONE rounding (round to nearest, ties to even).

Torch's float64 -> bfloat16 cast goes through float32 (c10 ``BFloat16(float)``), so it rounds twice: a
float64 just above a bf16 midpoint first lands exactly on the midpoint in float32, then ties to even
and goes the wrong way.  A float64 truth that must be "rounded to bf16" (a recurrent state kept in a
bf16 pool) uses :func:`round_float64_to_bf16` instead.

Bf16 has 8 significant bits and float32's exponent range: normal binades from 2**-126, subnormals
spaced 2**-133, largest finite (2 - 2**-7) * 2**127; a value at or past the midpoint above it is inf.
"""
from __future__ import annotations

import torch

from references.validation import require_dtype, require_tensor

BF16_SIGNIFICAND_BITS = 8
BF16_MIN_EXPONENT = -125          # torch.frexp's exponent of the smallest normal, 2**-126 = 0.5 * 2**-125
BF16_MAX = torch.finfo(torch.bfloat16).max


def round_float64_to_bf16(values: torch.Tensor) -> torch.Tensor:
    """The bf16 nearest each float64 value (ties to even), returned as float64.

    :param values: float64 tensor of any shape; NaN stays NaN, ±inf stays ±inf, -0.0 stays -0.0.

    The first value is just above the midpoint of 1 and 1 + 2**-7 (torch's cast gives 1.0); the second
    is that midpoint (ties to the even 1.0); the third is past the midpoint above the largest bf16:

    >>> round_float64_to_bf16(torch.tensor([1 + 2**-8 + 2**-40, 1 + 2**-8, 3.3962e38], dtype=torch.float64)).tolist()
    [1.0078125, 1.0, inf]
    """
    require_tensor("values", values)
    require_dtype("values", values, (torch.float64,))
    _, exponent = torch.frexp(values)
    # Below the normal range the grid is the smallest binade's: subnormal spacing 2**-133.
    exponent = exponent.clamp(min=BF16_MIN_EXPONENT)
    spacing = torch.ldexp(torch.ones_like(values), exponent - BF16_SIGNIFICAND_BITS)
    # Division and multiplication by a power of two are exact; torch.round ties to even.
    rounded = torch.round(values / spacing) * spacing
    return torch.where(rounded.abs() > BF16_MAX, rounded.sign() * torch.inf, rounded)
