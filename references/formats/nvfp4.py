"""Contract ``quant/nvfp4_quantize`` (bitwise), in executable form, and NVFP4 dequantization.

``nvfp4_quantize(x, global_scale) -> (packed uint8[M, K/2], block_scales e4m3[M, K/16])``: per
16-element block of a row, in float32, every operation IEEE round-to-nearest-even:

    bmax      = max |x|                                        (exact: bf16 values in fp32)
    sf        = e4m3_satfinite_rne(global_scale * (bmax / 6))  (a division, a multiply, a cast)
    out_scale = 0 if sf == 0 else 1 / (float(sf) * (1 / global_scale))
                                                               (a reciprocal, a multiply, a reciprocal)
    code      = e2m1_encode(x * out_scale)                     (a multiply, then E2M1 RNE)

then element 2j in the low nibble of byte j, scales row-major. ``global_scale`` is the ENCODE scale
(``448 * 6 / amax(x)``, 1.0 when ``amax == 0``); the DECODE scale is its float32 reciprocal.

Decisions where the contract leaves room, taken as NVIDIA's formats and the serving engines do:

- The block scale is NOT clamped to the smallest normal E4M3 (torchao clamps to 2**-6): subnormal
  scales (2**-9 .. 7 * 2**-9) are produced, and a block whose scale rounds to 0 (all zeros, or tiny
  next to ``amax``) gets ``out_scale = 0`` and codes ±0 by the sign of each element. This is what
  ``cvt.rn.satfinite.e4m3x2.f32`` does in TensorRT-LLM's and FlashInfer's quantize kernels, and it
  decodes (scale 0 -> 0) without a special case.
- Every step is the IEEE operation written. TensorRT-LLM's quantize kernels compute the same chain
  with approximate reciprocals (``SFScaleVal * (vecMax * rcp.approx(6))``, then
  ``rcp.approx(sf * rcp.approx(SFScaleVal))``), and some of its variants test ``vecMax != 0`` where
  the contract tests ``sf != 0`` (a block whose scale underflows then gets ``out_scale = inf``);
  torchao divides by a decode scale and uses ``(1 / decode_scale) / sf``. Each differs from the
  contract by an ulp on some inputs, which moves a code sitting on an E2M1 midpoint or a block scale
  on an E4M3 tie (``suites/quant/test_crosscheck_torchao.py`` pins torchao's differences). The
  contract takes the IEEE form because every device can reproduce it bit for bit.
- Values of ``global_scale`` are not checked (that would need a device sync): 0, inf, negative or
  NaN scales are out of the contract and the formula is applied literally (e.g. ``global_scale =
  inf`` saturates every nonzero element and encodes the zeros of such blocks as NaN -> code 7, see
  ``e2m1``). The same holds for non-finite ``x``: max |x| propagates NaN.
- ``M == 0`` and ``K == 0`` are accepted and give empty outputs (0 is a multiple of 16).
- Any strides are accepted: the reference reads ``x`` through PyTorch indexing.
"""
from __future__ import annotations

import torch

from references.formats.e2m1 import E2M1_MAX, e2m1_decode, e2m1_encode, pack_nibbles, unpack_nibbles
from references.formats.e4m3 import e4m3_satfinite_rne
from references.validation import (
    refuse,
    require_dtype,
    require_ndim,
    require_same_device,
    require_shape,
    require_tensor,
)

NVFP4_BLOCK = 16
# The encode scale maps the tensor's amax to the largest product of an E4M3 scale and an E2M1 value.
GLOBAL_SCALE_NUMERATOR = 448.0 * 6.0


def nvfp4_global_scale(x: torch.Tensor) -> torch.Tensor:
    """The contract's encode scale for ``x``: float32 ``[1]``, ``448 * 6 / amax|x|``, 1.0 when amax is 0.

    One IEEE division of two float32 tensors. Beware ``2688 / amax`` in PyTorch: a number divided by
    a tensor is ``amax.reciprocal() * 2688``, two roundings, a different scale for e.g. ``amax = 80``.
    An amax below ``2688 / float32_max`` (about 7.9e-36) gives inf, out of the contract's domain.

    >>> nvfp4_global_scale(torch.tensor([[80.0, -2.0]], dtype=torch.bfloat16)).item()
    33.599998474121094
    """
    require_tensor("x", x)
    require_dtype("x", x, (torch.bfloat16, torch.float16, torch.float32))
    amax = x.float().abs().amax() if x.numel() else torch.zeros((), device=x.device)
    numerator = torch.tensor(GLOBAL_SCALE_NUMERATOR, device=x.device)
    return torch.where(amax == 0, 1.0, numerator / amax).reshape(1)


def validate_global_scale(global_scale) -> None:
    require_tensor("global_scale", global_scale)
    require_dtype("global_scale", global_scale, (torch.float32,))
    if global_scale.numel() != 1:
        raise refuse("global_scale", f"has {global_scale.numel()} elements (shape {tuple(global_scale.shape)})",
                     "pass one float32 element, e.g. torch.tensor([448 * 6 / amax])")


def validate_quantize(x, global_scale) -> None:
    """Refuse what ``nvfp4_quantize`` cannot take, from metadata only, before any work."""
    require_tensor("x", x)
    require_ndim("x", x, 2, "[M, K]")
    require_dtype("x", x, (torch.bfloat16,))
    if x.shape[1] % NVFP4_BLOCK != 0:
        raise refuse("x", f"K = {x.shape[1]} is not a multiple of {NVFP4_BLOCK} (shape {tuple(x.shape)})",
                     f"pad K to a multiple of {NVFP4_BLOCK} with zeros, one scale per {NVFP4_BLOCK} elements")
    validate_global_scale(global_scale)
    require_same_device({"x": x, "global_scale": global_scale})


def nvfp4_quantize(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a bf16 ``[M, K]`` tensor to NVFP4 exactly as the contract says (module docstring).

    :param x: bf16 ``[M, K]``, ``K % 16 == 0``, finite.
    :param global_scale: float32 tensor of one element, the encode scale ``448 * 6 / amax(x)``.
    :returns: ``(packed uint8 [M, K/2], block_scales float8_e4m3fn [M, K/16])``.

    bmax = 3, sf = 3 / 6 = 0.5, out_scale = 2: 3 -> 6 (code 0x7), -0.5 -> -1 (code 0xA), byte 0xA7.

    >>> x = torch.tensor([[3.0, -0.5] + [0.0] * 14], dtype=torch.bfloat16)
    >>> packed, scales = nvfp4_quantize(x, torch.tensor([1.0]))
    >>> packed[0, :2].tolist(), scales.float().tolist()
    ([167, 0], [[0.5]])
    """
    validate_quantize(x, global_scale)
    rows, cols = x.shape
    blocks = x.float().reshape(rows, cols // NVFP4_BLOCK, NVFP4_BLOCK)  # bf16 -> fp32 is exact
    encode_scale = global_scale.reshape(())
    block_amax = blocks.abs().amax(dim=-1)
    block_scales = e4m3_satfinite_rne(encode_scale * (block_amax / E2M1_MAX))
    scale_product = block_scales.float() * torch.reciprocal(encode_scale)
    # sf == 0 would make the reciprocal inf (and 0 * inf NaN): the contract pins out_scale = 0 there.
    out_scale = torch.where(block_scales.float() == 0, 0.0, torch.reciprocal(scale_product))
    codes = e2m1_encode(blocks * out_scale[..., None]).reshape(rows, cols)
    return pack_nibbles(codes), block_scales


def validate_dequantize(packed, block_scales, global_scale) -> None:
    require_tensor("packed", packed)
    require_ndim("packed", packed, 2, "[M, K/2]")
    require_dtype("packed", packed, (torch.uint8,))
    half_cols = packed.shape[1]
    if half_cols % (NVFP4_BLOCK // 2) != 0:
        raise refuse("packed", f"K/2 = {half_cols} bytes per row is not a multiple of {NVFP4_BLOCK // 2}",
                     f"pass the packed output of nvfp4_quantize (K a multiple of {NVFP4_BLOCK})")
    require_tensor("block_scales", block_scales)
    require_dtype("block_scales", block_scales, (torch.float8_e4m3fn,))
    require_shape("block_scales", block_scales, (packed.shape[0], 2 * half_cols // NVFP4_BLOCK), "[M, K/16]")
    validate_global_scale(global_scale)
    require_same_device({"packed": packed, "block_scales": block_scales, "global_scale": global_scale})


def nvfp4_dequantize(packed: torch.Tensor, block_scales: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """float32 ``[M, K]``: ``w[r, c] = e2m1(code[r, c]) * float(sf[r, c // 16]) * (1 / global_scale)``.

    Evaluated left to right in float32 (the first product is exact: at most 2 + 4 significant bits).

    :param packed: uint8 ``[M, K/2]`` as returned by ``nvfp4_quantize``.
    :param block_scales: float8_e4m3fn ``[M, K/16]``, row-major (linear) layout.
    :param global_scale: the float32 one-element ENCODE scale given to ``nvfp4_quantize``.
    """
    validate_dequantize(packed, block_scales, global_scale)
    rows, cols = packed.shape[0], 2 * packed.shape[1]
    values = e2m1_decode(unpack_nibbles(packed)).reshape(rows, cols // NVFP4_BLOCK, NVFP4_BLOCK)
    decode_scale = torch.reciprocal(global_scale.reshape(()))
    return ((values * block_scales.float()[..., None]) * decode_scale).reshape(rows, cols)
