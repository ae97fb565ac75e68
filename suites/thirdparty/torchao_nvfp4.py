"""torchao's NVFP4 quantization (``torchao.prototype.mx_formats.nvfp4_tensor.nvfp4_quantize``) as
``quant/nvfp4_quantize``.

torchao takes the per-tensor DECODE scale (``amax / (448 * 6)``) where the contract's ``global_scale``
is the ENCODE scale: the adapter passes ``1 / global_scale`` (one fp32 division, the adapter's).  Its
output order is ``(block_scales, packed)``; the contract's is ``(packed, block_scales)``.  Known
differences by design (pinned on the CPU in ``suites/quant/test_crosscheck_torchao.py``): torchao clamps
block scales to the smallest normal e4m3 (2**-6), and scales elements by ``(1 / decode) / sf``.
"""
from __future__ import annotations

import torch
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize as torchao_quantize

from suites.thirdparty import staging

PACKAGE = "torchao"
JUDGED = {"nvfp4_quantize": "nvfp4_quantize"}
ADAPTER_CODE = {"nvfp4_quantize": "global_scale turned into torchao's decode scale (1 / global_scale)"}


def _prepare(x: torch.Tensor, global_scale: torch.Tensor):
    return {"x": x, "per_tensor_scale": 1.0 / global_scale.reshape(())}


def _call(prepared):
    return torchao_quantize(prepared["x"], 16, per_tensor_scale=prepared["per_tensor_scale"])


def _finish(prepared, quantized):
    block_scales, packed = quantized
    return packed, block_scales


def nvfp4_quantize(x: torch.Tensor, global_scale: torch.Tensor):
    prepared = _prepare(x, global_scale)
    return _finish(prepared, _call(prepared))


nvfp4_quantize.stages = staging.stages(_prepare, _call, _finish)
