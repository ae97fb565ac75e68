"""Number formats of the quantized contracts, exactly: E2M1 (FP4), E4M3 (FP8), NVFP4 blocks.

One concern per module:

- ``e2m1``: the 4-bit element code, encode (round to nearest, ties to the even code, saturating)
  and decode, and the nibble packing of two codes per byte.
- ``e4m3``: satfinite round-to-nearest-even fp32 -> ``torch.float8_e4m3fn``.
- ``nvfp4``: the ``quant/nvfp4_quantize`` contract and its dequantization.
- ``scale_layout``: the 128x4 swizzled block-scale layout of the vendor block-scaled GEMMs.

Everything here is plain PyTorch on float32 tensors: every float32 operation of the CPU backend is
IEEE-754 round-to-nearest-even, which ``suites/quant`` checks rather than assumes.
"""
from references.formats.e2m1 import (
    E2M1_MAX,
    E2M1_MIDPOINTS,
    E2M1_VALUES,
    e2m1_decode,
    e2m1_encode,
    pack_nibbles,
    unpack_nibbles,
)
from references.formats.e4m3 import E4M3_MAX, e4m3_satfinite_rne
from references.formats.nvfp4 import NVFP4_BLOCK, nvfp4_dequantize, nvfp4_global_scale, nvfp4_quantize
from references.formats.scale_layout import from_swizzled_128x4, to_swizzled_128x4

__all__ = [
    "E2M1_MAX",
    "E2M1_MIDPOINTS",
    "E2M1_VALUES",
    "E4M3_MAX",
    "NVFP4_BLOCK",
    "e2m1_decode",
    "e2m1_encode",
    "e4m3_satfinite_rne",
    "from_swizzled_128x4",
    "nvfp4_dequantize",
    "nvfp4_global_scale",
    "nvfp4_quantize",
    "pack_nibbles",
    "to_swizzled_128x4",
    "unpack_nibbles",
]
