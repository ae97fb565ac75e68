"""Deliberately wrong encoders, the negative controls: each test of a format must reject each of these.

Every one is a bug that has shipped somewhere or that a kernel writer makes easily. They differ from
the references in exactly one respect, named by the function; they exist only to prove that the
checks in ``suites/quant`` can fail.
"""
from __future__ import annotations

import torch

from references.formats import E2M1_MIDPOINTS, e2m1_encode, e4m3_satfinite_rne


def _e2m1_codes(magnitude_index: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    return magnitude_index.to(torch.uint8) | (negative.to(torch.uint8) << 3)


def e2m1_ties_away_from_zero(values: torch.Tensor) -> torch.Tensor:
    """Round half away from zero (C's ``roundf`` habit): 0.25 -> 0.5, 1.25 -> 1.5, 2.5 -> 3, 5 -> 6."""
    magnitude = values.abs()
    index = sum((magnitude >= midpoint).to(torch.int64) for midpoint in E2M1_MIDPOINTS)
    return _e2m1_codes(index, values.signbit())


def e2m1_no_saturation(values: torch.Tensor) -> torch.Tensor:
    """Keep rounding past 6 on the continued grid (8, 12, ...) and let the 3-bit index wrap: 8 -> 0."""
    magnitude = values.abs()
    midpoints = E2M1_MIDPOINTS + (7.0, 10.0)
    index = sum((magnitude > midpoint).to(torch.int64) for midpoint in midpoints) & 0x7
    return _e2m1_codes(index, values.signbit())


def e2m1_sign_from_comparison(values: torch.Tensor) -> torch.Tensor:
    """Take the sign from ``x < 0`` instead of the sign bit: -0.0 gives +0 (code 0 instead of 8)."""
    return (e2m1_encode(values) & 0x7) | ((values < 0).to(torch.uint8) << 3)


def pack_high_nibble_first(codes: torch.Tensor) -> torch.Tensor:
    """Element 2j in the HIGH nibble of byte j (the big-endian habit)."""
    return (codes[..., 1::2] & 0xF) | (codes[..., 0::2] << 4)


def e4m3_nan_on_overflow(values: torch.Tensor) -> torch.Tensor:
    """torch's unclamped cast as older releases' c10 ``Float8_e4m3fn.h`` had it: ``|x| >= 464`` -> NaN.

    (torch 2.13 saturates instead, so calling ``values.to(torch.float8_e4m3fn)`` here would not be a
    negative control on this machine; this reproduces the behaviour that the clamp guards against.)
    """
    overflow = values.abs() >= 464.0
    return torch.where(overflow, torch.nan, e4m3_satfinite_rne(values).float()).to(torch.float8_e4m3fn)


def e4m3_flush_subnormals(values: torch.Tensor) -> torch.Tensor:
    """Flush results below the smallest normal 2**-6 to zero (an FTZ conversion)."""
    rounded = e4m3_satfinite_rne(values).float()
    return torch.where(rounded.abs() < 2.0**-6, 0.0 * rounded, rounded).to(torch.float8_e4m3fn)


def _scatter_by_offset(block_scales: torch.Tensor, offset) -> torch.Tensor:
    rows, cols = block_scales.shape
    padded_rows, padded_cols = -(-rows // 128) * 128, -(-cols // 4) * 4
    m = torch.arange(rows).repeat_interleave(cols)
    k = torch.arange(cols).repeat(rows)
    out = torch.zeros(padded_rows * padded_cols, dtype=torch.uint8)
    out[offset(m, k, padded_cols)] = block_scales.view(torch.uint8).flatten()
    return out.view(block_scales.dtype)


def swizzle_without_lane_interleave(block_scales: torch.Tensor) -> torch.Tensor:
    """128x4 tiles in the right order, but each tile row-major (row m at (m % 128) * 4): no 32x4 interleave."""
    return _scatter_by_offset(block_scales, lambda m, k, padded_cols:
                              ((m // 128) * (padded_cols // 4) + k // 4) * 512 + (m % 128) * 4 + k % 4)


def swizzle_column_tiles_outer(block_scales: torch.Tensor) -> torch.Tensor:
    """Right tiles, but ordered column tile first (K-major tile order), as if the scales were transposed."""
    padded_rows = -(-block_scales.shape[0] // 128) * 128
    return _scatter_by_offset(block_scales, lambda m, k, padded_cols:
                              ((k // 4) * (padded_rows // 128) + m // 128) * 512
                              + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4)
