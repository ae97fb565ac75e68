"""E4M3 (``torch.float8_e4m3fn``): satfinite round-to-nearest-even conversion from float32.

The NVFP4 block scale is ``cvt.rn.satfinite.e4m3x2.f32`` of a float32 value: round to nearest, ties
to even, subnormals kept (down to 2**-9), magnitudes beyond 448 saturate to ±448 (inf included), NaN
stays NaN. Torch's own float32 -> float8_e4m3fn cast is round-to-nearest-even, but what it does past
448 depends on the torch build: older releases' c10 ``Float8_e4m3fn.h`` turned every ``|x| >= 464``
into NaN, while torch 2.13 (measured on this project's CPU wheel) saturates. Clamping to ±448 first
makes the result the same under either, and on the GPU image's torch, whatever it is.
``suites/quant`` checks the rest of the cast exhaustively (every code, every midpoint, one float32 ulp
either side) rather than assuming it.
"""
from __future__ import annotations

import torch

from references.validation import require_dtype, require_tensor

E4M3_MAX = 448.0


def e4m3_satfinite_rne(values: torch.Tensor) -> torch.Tensor:
    """Round float32 values to ``torch.float8_e4m3fn``, saturating at ±448.

    :param values: float32 tensor of any shape.

    The third value is 1.5 * 2**-9, a tie between the subnormals 2**-9 (code 1) and 2**-8 (code 2):

    >>> e4m3_satfinite_rne(torch.tensor([464.0, float("inf"), 0.0029296875])).float().tolist()
    [448.0, 448.0, 0.00390625]
    """
    require_tensor("values", values)
    # A float64 or bf16 input would be a different rounding problem (double rounding through fp32).
    require_dtype("values", values, (torch.float32,))
    # clamp keeps -0.0 and propagates NaN; then the in-range cast is plain RNE.
    return values.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
