"""Issue 27: the two-decoded-values-a-block decode of K, checked bit for bit against the Dequant line's per-element
decode under the Triton interpreter (docs/ops/paged_decode_nvfp4kv.md, "Two decoded values a block").

An E2M1 magnitude is ``2^e * m``, m in {1, 1.5}, so where every value stays a normal fp32, ``RN32(e2m1 * s * g) =
+-2^e * RN32(m * s * g)`` and the three bf16 parts of ``K * k_unit`` are ``+-2^e`` times those of ``RN32(m * s * g)
* k_unit``: a block needs ``A = RN32(s g)``, ``B = RN32(1.5 s g)`` and their parts, each element selects one and
multiplies by ``+-2^e`` (exact), its mid and lo parts plus +0 (the per-element split's ``x - x = +0``).  This is the
decode of ``docs/lab/nvfp4kv_block_values_variant.patch`` (the kernel it was measured in), on a grid of every e4m3
scale byte (a row, one block) times every code (a column), for each decode scale ``g`` given; it prints, per g,
whether the fast path's parts equal the kernel's per-element parts (NaN as NaN) and how many elements differ.

    TRITON_INTERPRET=1 python3 docs/lab/nvfp4kv_block_values.py
"""
from __future__ import annotations

import os
import pathlib
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ops.attention.paged_decode_nvfp4kv import _e2m1_fp16, _split_in_bf16  # noqa: E402

# decode scales 1 / kv_global_scale: inside [2^-116, 2^116) the fast path is exact for every e4m3 scale (0.5 * 2^-9 g
# stays normal, 6 * 448 g finite); outside it, where a decoded value is an fp32 subnormal or overflows, it is not
INSIDE = [1.0, 1 / 448, 4 / 3, 3.0, -1 / 3, 2.0 ** -116, 2.0 ** 116 * (1 - 2.0 ** -24), 2.0 ** 100 / 3]
OUTSIDE = [2.0 ** -120 / 3, 2.0 ** -130 / 3, 2.0 ** 118, 0.0, float("inf"), float("nan")]


@triton.jit
def _parts_of_codes(codes, a_hi, a_mid, a_lo, b_hi, b_mid, b_lo):
    """Each element's three bf16 parts from its block's (A or B, times 2^14) parts and its code's ``+-2^e``."""
    bits = _e2m1_fp16(codes).to(tl.float32).to(tl.int32, bitcast=True)   # e2m1 * 2^-14, exact
    power = (bits & -8388608).to(tl.float32, bitcast=True)   # +-2^e * 2^-14: the mantissa bit dropped; 0 stays 0
    three_halves = (bits & 0x400000) != 0
    hi = tl.where(three_halves, b_hi, a_hi) * power
    mid = tl.where(three_halves, b_mid, a_mid) * power + 0.0
    lo = tl.where(three_halves, b_lo, a_lo) * power + 0.0
    return hi.to(tl.bfloat16), mid.to(tl.bfloat16), lo.to(tl.bfloat16)


@triton.jit
def _both_decodes(codes_ptr, scales_ptr, decode_scale_ptr, out_ptr, ROWS: tl.constexpr):
    """``out[0..2]``: the kernel's per-element parts; ``out[3..5]``: the two-values parts ([ROWS, 16] each)."""
    rows, cols = tl.arange(0, ROWS), tl.arange(0, 16)
    codes = tl.load(codes_ptr + rows[:, None] * 16 + cols[None, :]).to(tl.int16)
    scale = tl.load(scales_ptr + rows)[:, None]
    decode_scale = tl.load(decode_scale_ptr)
    scale_exponent = (decode_scale.to(tl.int32, bitcast=True) >> 23) & 0xFF   # as the kernel takes k_unit
    k_unit = ((tl.maximum(127 - scale_exponent, -126) + 127) << 23).to(tl.float32, bitcast=True)
    per_element = _e2m1_fp16(codes) * scale.to(tl.float16)
    old = _split_in_bf16((per_element.to(tl.float32) * 16384.0) * decode_scale, k_unit)
    block_scale = scale.to(tl.float32)
    a_hi, a_mid, a_lo = _split_in_bf16(block_scale * decode_scale, k_unit)
    b_hi, b_mid, b_lo = _split_in_bf16((block_scale * 1.5) * decode_scale, k_unit)
    new = _parts_of_codes(codes, a_hi.to(tl.float32) * 16384.0, a_mid.to(tl.float32) * 16384.0,
                          a_lo.to(tl.float32) * 16384.0, b_hi.to(tl.float32) * 16384.0,
                          b_mid.to(tl.float32) * 16384.0, b_lo.to(tl.float32) * 16384.0)
    tile = rows[:, None] * 16 + cols[None, :]
    for i in tl.static_range(3):
        tl.store(out_ptr + i * ROWS * 16 + tile, old[i].to(tl.float32))
        tl.store(out_ptr + (3 + i) * ROWS * 16 + tile, new[i].to(tl.float32))


def mismatches(decode_scale: float) -> int:
    """Elements (of 256 scale bytes x 16 codes) whose fast-path parts are not the per-element parts' bits."""
    codes = torch.arange(16, dtype=torch.uint8).repeat(256, 1)
    scales = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    out = torch.empty(6, 256, 16)
    _both_decodes[(1,)](codes, scales, torch.tensor([decode_scale]), out, ROWS=256)
    old, new = out[:3].view(torch.int32), out[3:].view(torch.int32)
    same = (old == new) | (out[:3].isnan() & out[3:].isnan())
    return int((~same.all(dim=0)).sum())


def main() -> int:
    failed = False
    for label, scales in (("inside", INSIDE), ("outside", OUTSIDE)):
        for decode_scale in scales:
            wrong = mismatches(decode_scale)
            failed |= label == "inside" and wrong > 0
            print(f"{label:8} g = {decode_scale!r:24} elements whose parts differ: {wrong} of 4096")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
