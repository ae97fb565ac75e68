"""What Triton kernels share: the device facts their launch plans are made from.

On a machine without CUDA, ``ops/__init__`` has set ``TRITON_INTERPRET=1`` before Triton was imported,
so ``triton.jit`` kernels run under the interpreter on CPU tensors (the ``cpu-interp`` arch), patched to
compute bf16, fp8 and libdevice calls as the GPU does (``oracles/triton_interpreter.py``): kernels use
``.to()`` casts and libdevice on both. What the interpreter still does its own way: NaN inside
``tl.max``/``tl.min`` (kernels keep NaN out), fp32 division (IEEE, where the GPU's ``/`` approximates),
``tl.dot`` in numpy (exact, and slow on float32), and no inline PTX (kernels run a twin there).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

# The interpreter costs milliseconds per program whatever its size, so it plans for a small GPU of 4 SMs:
# small batches still take the split path, without the hundreds of programs an H200's plan launches.
INTERPRETER_SM_COUNT = 4


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_SM_COUNT


@triton.jit
def bf16_bits_to_float32(bits):
    """bf16 bit patterns loaded as int16 (the GEMVs' activations cross as int16 words) as float32, exactly,
    subnormals included: the bits become the high half of a float32, what the bf16 cast compiles to."""
    return (bits.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def float32_to_bf16_rne(values):
    """float32 -> bf16, round to nearest even (the GPU's ``cvt.rn.bf16x2.f32``, two values an instruction),
    carries included; only its NaN (0x7FFF) is replaced, by torch's 0x7FC0, so that kernel and reference
    NaNs are one bit pattern."""
    rounded = values.to(tl.bfloat16, fp_downcast_rounding="rtne").to(tl.int16, bitcast=True)
    return tl.where(values == values, rounded, 0x7FC0).to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def exp_fp32(x):
    """tl.exp on fp32 compiles to ex2.approx of x * log2(e) on NVIDIA GPUs (error grows with |x|); libdevice's
    expf is within 2 ulp, and is what torch's exp runs on CUDA (the interpreter takes it in float64)."""
    return libdevice.exp(x)
