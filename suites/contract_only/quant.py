"""quant/nvfp4_quantize from the contract: every step in float32, round-to-nearest-even."""
from __future__ import annotations

import torch

from suites.contract_only.checks import one_fp32, tensor

# |x * out_scale| at which E2M1's index steps up, and whether a value exactly there steps up
# (a tie goes to the even index of {0, .5, 1, 1.5, 2, 3, 4, 6})
STEPS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))
MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _validate(x, global_scale):
    tensor("x", x, (torch.bfloat16,), ndim=2)
    if x.shape[1] % 16:
        raise ValueError(f"argument 'x' has K = {x.shape[1]}, not a multiple of 16")
    one_fp32("global_scale", global_scale)


def _block_scales(x, global_scale):
    """(sf e4m3 [M, K/16], out_scale fp32 [M, K/16, 1]) and x as fp32 blocks [M, K/16, 16]."""
    rows, cols = x.shape
    blocks = x.float().reshape(rows, cols // 16, 16)
    scale = global_scale.float().reshape(())
    bmax = blocks.abs().amax(dim=-1)
    # by a tensor of sixes: on CUDA, torch divides by a Python number as a multiplication by its reciprocal
    # (not the contract's correctly rounded division: a block at a tie then rounds the other way)
    sixes = torch.full_like(bmax, 6.0)
    sf = (scale * (bmax / sixes)).clamp(max=448.0).to(torch.float8_e4m3fn)      # satfinite, RNE
    decode = sf.float() * (1 / scale)
    out_scale = torch.where(sf.float() == 0, torch.zeros_like(decode), 1 / decode)
    return sf, out_scale[..., None], blocks


def _pack(codes):
    codes = codes.reshape(codes.shape[0], -1).to(torch.uint8)
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def _encode_by_steps(scaled, nan_code):
    magnitude = scaled.abs()
    index = sum((magnitude >= edge) if up else (magnitude > edge) for edge, up in STEPS)
    code = index.to(torch.int32) | (scaled.signbit().to(torch.int32) << 3)
    return torch.where(scaled.isnan(), nan_code, code)


def nvfp4_quantize(x, global_scale):
    _validate(x, global_scale)
    sf, out_scale, blocks = _block_scales(x, global_scale)
    return _pack(_encode_by_steps(blocks * out_scale, nan_code=7)), sf


def nvfp4_quantize_nearest(x, global_scale):
    """The alternative: the nearest E2M1 magnitude by distance, ties to the even index, other wording."""
    if not isinstance(x, torch.Tensor) or not isinstance(global_scale, torch.Tensor):
        raise TypeError("x and global_scale must both be tensors")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x: want bf16, got {x.dtype}")
    if global_scale.dtype != torch.float32 or global_scale.numel() != 1:
        error = TypeError if global_scale.dtype != torch.float32 else ValueError
        raise error(f"global_scale: want one float32 element, got {global_scale.dtype} x {global_scale.numel()}")
    if x.dim() != 2 or x.shape[1] % 16:
        raise ValueError(f"x: want [M, K] with K % 16 == 0, got {tuple(x.shape)}")
    sf, out_scale, blocks = _block_scales(x, global_scale)
    scaled = blocks * out_scale
    table = torch.tensor(MAGNITUDES, device=x.device)
    distance = (scaled.abs().clamp(max=6.0)[..., None] - table).abs()
    # argmin takes the first of equal distances; among two nearest, prefer the even index
    nearest = distance.argmin(dim=-1)
    upper = (nearest + 1).clamp(max=7)
    tie = distance.gather(-1, upper[..., None])[..., 0] == distance.gather(-1, nearest[..., None])[..., 0]
    index = torch.where(tie & (nearest % 2 == 1), upper, nearest)
    code = index.to(torch.int32) | (scaled.signbit().to(torch.int32) << 3)
    return _pack(torch.where(scaled.isnan(), 7, code)), sf


def nvfp4_quantize_nan_as_minus_zero(x, global_scale):
    """Negative control: a NaN ``x * out_scale`` encoded as -0 (code 8), as XLA's emulation does."""
    _validate(x, global_scale)
    sf, out_scale, blocks = _block_scales(x, global_scale)
    return _pack(_encode_by_steps(blocks * out_scale, nan_code=8)), sf
