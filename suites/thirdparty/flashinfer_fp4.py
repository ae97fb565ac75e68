"""FlashInfer's NVFP4 quantization (``flashinfer.fp4_quantize``, flashinfer-python 0.7.4: TensorRT-LLM's CUDA
kernel, built by FlashInfer's JIT) as ``quant/nvfp4_quantize``.  SM100 and newer only: on the H200 (sm90)
``fp4_quantize`` raises ``RuntimeError("fp4_quantize requires SM100 or newer; got SM90")`` before building
anything, and the sm90 build of its kernel would write zero codes (its e2m1 conversion,
``cvt.rn.satfinite.e2m1x2.f32``, is compiled only for ``__CUDA_ARCH__ >= 1000`` and returns 0 below:
``csrc/nv_internal/tensorrt_llm/kernels/quantization_utils.cuh``).  ``docs/thirdparty/flashinfer.md``.

FlashInfer's convention is the contract's: ``global_scale`` is the ENCODE scale (``448 * 6 / amax``), the
block scale ``e4m3(global_scale * bmax / 6)``, the elements scaled by ``1 / (float(sf) / global_scale)``,
element 2j in the low nibble.  Asked for the linear scale layout (``is_sf_swizzled_layout=False``: its
default is the 128x4 swizzle its GEMMs read) it returns the scales ``[M, K / 16]`` as uint8.
Adapter code: the uint8 scales viewed as e4m3 (no arithmetic).
"""
from __future__ import annotations

import flashinfer
import torch

from suites.thirdparty import staging

PACKAGE = "flashinfer-python"
JUDGED = {"nvfp4_quantize": "nvfp4_quantize"}
ADAPTER_CODE = {"nvfp4_quantize": "the uint8 block scales viewed as e4m3"}


def _prepare(x: torch.Tensor, global_scale: torch.Tensor):
    return {"x": x, "global_scale": global_scale}


def _call(prepared):
    return flashinfer.fp4_quantize(prepared["x"], prepared["global_scale"], sf_vec_size=16, sf_use_ue8m0=False,
                                   is_sf_swizzled_layout=False)


def _finish(prepared, quantized):
    packed, block_scales = quantized
    return packed, block_scales.view(torch.float8_e4m3fn)


def nvfp4_quantize(x: torch.Tensor, global_scale: torch.Tensor):
    prepared = _prepare(x, global_scale)
    return _finish(prepared, _call(prepared))


nvfp4_quantize.stages = staging.stages(_prepare, _call, _finish)
