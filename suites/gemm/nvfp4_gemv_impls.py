"""Other implementations of ``nvfp4_gemv`` for the battery to judge: one correct, many wrong.

Each wrong one is a bug an NVFP4 GEMV ships with: packed rows or scale rows read as dense or as contiguous
bytes, a nibble order, a scale index, a forgotten global scale, E2M1 read as a linear code, a dropped K tail,
bf16 accumulation, float16 activations, a summation order that changes between calls, a missing refusal.
``test_nvfp4_gemv.py`` checks that the battery rejects every one and accepts the correct one.
Judge one yourself: ``tools/certify-cells --op nvfp4_gemv --impl suites.gemm.nvfp4_gemv_impls:NAME``.
"""
from __future__ import annotations

import torch

from references.formats import NVFP4_BLOCK, e2m1_decode, nvfp4_dequantize, unpack_nibbles
from references.gemm.nvfp4_gemv import validate
from suites.gemm import gemv_forms
from suites.strided_reads import last_dim_contiguous, read_as_dense


def _gemv(x, weight, form=gemv_forms.float32_sum):
    return form(x, weight).bfloat16()


def _codes(packed):
    return unpack_nibbles(packed).reshape(packed.shape[0], -1, NVFP4_BLOCK)


def _dequantize_codes(values, block_scales, global_scale):
    weight = values * block_scales.float()[..., None] * torch.reciprocal(global_scale.reshape(()))
    return weight.reshape(values.shape[0], -1)


def correct_via_float32_sums(x, packed, block_scales, global_scale):
    """Correct: the contract's float32 weight, float32 products summed in K order by PyTorch."""
    validate(x, packed, block_scales, global_scale)
    return _gemv(x, nvfp4_dequantize(packed, block_scales, global_scale))


def packed_rows_assumed_dense(x, packed, block_scales, global_scale):
    """The packed weight read as rows K / 2 bytes apart from its start, whatever its strides: right on a
    contiguous ``packed`` only."""
    validate(x, packed, block_scales, global_scale)
    return _gemv(x, nvfp4_dequantize(read_as_dense(packed), block_scales, global_scale))


def scales_rows_assumed_dense(x, packed, block_scales, global_scale):
    """The block scales read as rows K / 16 apart from their start, whatever their strides."""
    validate(x, packed, block_scales, global_scale)
    return _gemv(x, nvfp4_dequantize(packed, read_as_dense(block_scales), global_scale))


def rows_read_as_contiguous_bytes(x, packed, block_scales, global_scale):
    """A row's packed bytes and block scales read one after another, whatever the column stride (this project's
    kernel before it refused such weights): right wherever ``stride(1) == 1``."""
    validate(x, packed, block_scales, global_scale)
    return _gemv(x, nvfp4_dequantize(last_dim_contiguous(packed), last_dim_contiguous(block_scales), global_scale))


def high_nibble_first(x, packed, block_scales, global_scale):
    """Element 2j read from the HIGH nibble of byte j."""
    validate(x, packed, block_scales, global_scale)
    swapped = (packed >> 4) | (packed << 4)
    return _gemv(x, nvfp4_dequantize(swapped, block_scales, global_scale))


def scale_per_32_elements(x, packed, block_scales, global_scale):
    """Reads block scale k // 32 for element k (the MXFP4-style block of 32), not k // 16."""
    validate(x, packed, block_scales, global_scale)
    values = e2m1_decode(_codes(packed))
    shared = block_scales.float()[:, ::2].repeat_interleave(2, dim=1)[:, :block_scales.shape[1]]
    return _gemv(x, _dequantize_codes(values, shared.to(torch.float8_e4m3fn), global_scale))


def global_scale_forgotten(x, packed, block_scales, global_scale):
    """Dequantizes with the block scales only: y is global_scale times too large."""
    validate(x, packed, block_scales, global_scale)
    return _gemv(x, nvfp4_dequantize(packed, block_scales, torch.ones_like(global_scale)))


def e2m1_read_as_linear(x, packed, block_scales, global_scale):
    """Decodes the 3 magnitude bits as a linear 0, 0.5, ..., 3.5 (an INT4-style table), not E2M1's."""
    validate(x, packed, block_scales, global_scale)
    codes = _codes(packed)
    values = (codes & 0x7).float() * 0.5 * torch.where((codes & 0x8) != 0, -1.0, 1.0)
    return _gemv(x, _dequantize_codes(values, block_scales, global_scale))


def tail_dropped(x, packed, block_scales, global_scale):
    """Right on whole 64-column tiles; the last K % 64 columns are never read."""
    validate(x, packed, block_scales, global_scale)
    weight = nvfp4_dequantize(packed, block_scales, global_scale)
    whole = x.shape[1] // 64 * 64
    weight[:, whole:] = 0
    return _gemv(x, weight)


def bf16_accumulation(x, packed, block_scales, global_scale):
    validate(x, packed, block_scales, global_scale)
    return _gemv(x, nvfp4_dequantize(packed, block_scales, global_scale), gemv_forms.bf16_partial_sums)


def float16_activations(x, packed, block_scales, global_scale):
    validate(x, packed, block_scales, global_scale)
    return _gemv(x, nvfp4_dequantize(packed, block_scales, global_scale), gemv_forms.float16_activations)


_arrival_order = gemv_forms.OrderVariesPerCall()


def summation_order_varies(x, packed, block_scales, global_scale):
    validate(x, packed, block_scales, global_scale)
    return _gemv(x, nvfp4_dequantize(packed, block_scales, global_scale), _arrival_order)


def missing_refusal(x, packed, block_scales, global_scale):
    """Checks only the weight: 17 or 0 activation rows, float16 x, a K mismatch all go through."""
    weight = nvfp4_dequantize(packed, block_scales, global_scale)
    x = torch.as_tensor(x).float()
    x = x.reshape(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)
    depth = min(x.shape[1], weight.shape[1])
    return _gemv(x[:, :depth], weight[:, :depth])
