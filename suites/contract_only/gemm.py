"""gemm/nvfp4_gemv and gemm/fp8_gemv from the contract: fp32 accumulation, rounded once to bf16."""
from __future__ import annotations

import torch

from suites.contract_only.checks import one_fp32, tensor

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _validate_x(x, name_of_k_mismatch: str, weight_k: int):
    tensor("x", x, (torch.bfloat16,), ndim=2)
    if not 1 <= x.shape[0] <= 16:
        raise ValueError(f"argument 'x' has M = {x.shape[0]} rows, outside 1..16")
    if x.shape[1] != weight_k:
        raise ValueError(f"argument '{name_of_k_mismatch}': K = {weight_k} disagrees with x's {x.shape[1]}")


def _nvfp4_weight(packed, block_scales, global_scale):
    """W [N, K] in fp32: e2m1(code) * float(sf) * (1 / global_scale)."""
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], -1).long()
    magnitude = torch.tensor(E2M1, device=packed.device)[codes & 7]
    value = torch.where(codes >= 8, -magnitude, magnitude)
    scales = block_scales.float().repeat_interleave(16, dim=1)
    return value * scales * (1 / global_scale.float().reshape(()))


def _validate_nvfp4(x, packed, block_scales, global_scale, name_of_k_mismatch):
    tensor("packed", packed, (torch.uint8,), ndim=2)
    tensor("block_scales", block_scales, (torch.float8_e4m3fn,), ndim=2)
    one_fp32("global_scale", global_scale)
    if 2 * packed.shape[1] != 16 * block_scales.shape[1] or packed.shape[0] != block_scales.shape[0]:
        raise ValueError(f"arguments 'packed' {tuple(packed.shape)} and 'block_scales' "
                         f"{tuple(block_scales.shape)} describe different weights")
    _validate_x(x, name_of_k_mismatch, 2 * packed.shape[1])


def nvfp4_gemv(x, packed, block_scales, global_scale):
    _validate_nvfp4(x, packed, block_scales, global_scale, "x")
    return (x.float() @ _nvfp4_weight(packed, block_scales, global_scale).T).bfloat16()


def nvfp4_gemv_by_blocks(x, packed, block_scales, global_scale):
    """The alternative: K summed block by block from the last, fp32 partial sums; names the weight."""
    _validate_nvfp4(x, packed, block_scales, global_scale, "packed")
    w = _nvfp4_weight(packed, block_scales, global_scale)
    total = torch.zeros(x.shape[0], w.shape[0], device=x.device)
    for start in reversed(range(0, x.shape[1], 16)):
        total = total + x[:, start:start + 16].float() @ w[:, start:start + 16].T
    return total.bfloat16()


def _validate_fp8(x, w, w_scale, name_of_k_mismatch):
    tensor("w", w, (torch.float8_e4m3fn,), ndim=2)
    one_fp32("w_scale", w_scale)
    _validate_x(x, name_of_k_mismatch, w.shape[1])


def fp8_gemv(x, w, w_scale):
    _validate_fp8(x, w, w_scale, "x")
    return ((x.float() @ w.float().T) * w_scale.float().reshape(())).bfloat16()


def fp8_gemv_naming_the_weight(x, w, w_scale):
    """The alternative: a K mismatch names only the weight; the scale applied to x first."""
    _validate_fp8(x, w, w_scale, "w")
    return ((x.float() * w_scale.float().reshape(())) @ w.float().T).bfloat16()
