"""E2M1, the 4-bit element of NVFP4 (and MXFP4): exact encode, decode, and two codes per byte.

A code is 4 bits: bit 3 is the sign, bits 2..0 index the magnitudes ``E2M1_VALUES``
``{0, 0.5, 1, 1.5, 2, 3, 4, 6}`` (1 exponent bit pair, 1 mantissa bit; no inf, no NaN).

Encoding is the PTX ``cvt.rn.satfinite.e2m1x2.f32`` semantics the contract asks for:

- round to nearest; a value exactly on a midpoint goes to the neighbour with the EVEN index
  (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4);
- magnitudes above 6 (and infinities) saturate to 6;
- the sign bit is the sign bit of the input, so ``-0.0`` and negatives that round to zero give
  code 8 (``-0``), as the hardware conversion does.

A NaN ``x * out_scale`` arises on legal inputs (``out_scale`` overflows to inf when
``float(sf) * (1 / global_scale)`` is subnormal, and a zero element gives ``0 * inf``); the contract
pins it as code 7 (+6, sign bit clear), and the reference encodes any NaN so.  Implementations
disagree elsewhere (XLA's emulation writes -0, code 8), which the contract's pin rejects.
"""
from __future__ import annotations

import torch

from references.validation import refuse, require_dtype, require_tensor

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0
# E2M1_MIDPOINTS[i] lies halfway between E2M1_VALUES[i] and E2M1_VALUES[i + 1]; all are exact in fp32.
E2M1_MIDPOINTS = tuple((low + high) / 2 for low, high in zip(E2M1_VALUES, E2M1_VALUES[1:]))
E2M1_SIGN_BIT = 0x8
E2M1_NAN_CODE = 0x7


def e2m1_encode(values: torch.Tensor) -> torch.Tensor:
    """Encode float32 values as E2M1 codes (uint8 in 0..15, same shape), exactly.

    :param values: float32 tensor of any shape (the already scaled ``x * out_scale``).

    >>> e2m1_encode(torch.tensor([0.75, -0.0, 5.0, 7.0, -1e-30])).tolist()
    [2, 8, 6, 7, 8]
    """
    require_tensor("values", values)
    # Only float32 is the contract's working precision; a float64 input would be rounded once more on
    # its way to fp32 by whoever called this, which is exactly the double rounding to keep visible.
    require_dtype("values", values, (torch.float32,))
    magnitude = values.abs()
    index = torch.zeros(values.shape, dtype=torch.uint8, device=values.device)
    for i, midpoint in enumerate(E2M1_MIDPOINTS):
        # Strictly above midpoint i: at least index i + 1. On it: the neighbour with the even index,
        # i.e. up only when i + 1 is even. Past the last midpoint every test is true: index 7 = 6.0,
        # which is the saturation.
        index += magnitude >= midpoint if i % 2 == 1 else magnitude > midpoint
    is_nan = values.isnan()
    index = torch.where(is_nan, torch.full_like(index, E2M1_NAN_CODE), index)
    sign = values.signbit() & ~is_nan
    return torch.where(sign, index | E2M1_SIGN_BIT, index)


def _decode_table(device: torch.device) -> torch.Tensor:
    magnitudes = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    # Codes 16..255 are not E2M1 codes: they decode to NaN so stray high bits show in the result
    # instead of being masked away (and no device-side index assert is needed to notice them).
    not_codes = torch.full((256 - 16,), torch.nan, dtype=torch.float32, device=device)
    return torch.cat([magnitudes, -magnitudes, not_codes])  # -0.0 for code 8


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """The float32 value of each E2M1 code (uint8 tensor of any shape); code 8 decodes to -0.0.

    >>> e2m1_decode(torch.tensor([2, 8, 15], dtype=torch.uint8)).tolist()
    [1.0, -0.0, -6.0]
    """
    require_tensor("codes", codes)
    require_dtype("codes", codes, (torch.uint8,))
    return _decode_table(codes.device)[codes.long()]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Pack pairs of 4-bit codes along the last axis: ``[..., K]`` -> ``[..., K / 2]`` uint8.

    Element 2j goes to the low nibble of byte j and element 2j+1 to the high nibble (the order of
    ``cvt.rn.satfinite.e2m1x2.f32``'s second operand and of every NVFP4 checkpoint). Only the low 4 bits
    of each code are kept.

    >>> pack_nibbles(torch.tensor([[0x1, 0xA]], dtype=torch.uint8)).tolist()
    [[161]]
    """
    require_tensor("codes", codes)
    require_dtype("codes", codes, (torch.uint8,))
    if codes.dim() == 0 or codes.shape[-1] % 2 != 0:
        raise refuse("codes", f"last axis has {codes.shape[-1] if codes.dim() else 'no'} elements "
                     f"(shape {tuple(codes.shape)})", "pass an even number of codes per row")
    low, high = codes[..., 0::2], codes[..., 1::2]
    return (low & 0xF) | (high << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack_nibbles``: ``[..., K / 2]`` uint8 -> ``[..., K]`` uint8 codes in 0..15.

    >>> unpack_nibbles(torch.tensor([[161]], dtype=torch.uint8)).tolist()
    [[1, 10]]
    """
    require_tensor("packed", packed)
    require_dtype("packed", packed, (torch.uint8,))
    if packed.dim() == 0:
        raise refuse("packed", "got a 0-d tensor", "pass bytes along a last axis, [..., K / 2]")
    pairs = torch.stack([packed & 0xF, packed >> 4], dim=-1)
    return pairs.reshape(*packed.shape[:-1], 2 * packed.shape[-1])
