"""What Triton kernels share: the device facts their launch plans are made from.

On a machine without CUDA, ``ops/__init__`` has set ``TRITON_INTERPRET=1`` before Triton was imported,
so ``triton.jit`` kernels run under the interpreter on CPU tensors (the ``cpu-interp`` arch).
Interpreter caveats (bf16 arithmetic, NaN inside reductions): kernels upcast to fp32 after loading and
keep NaN out of ``tl.max``/``tl.min``. The interpreter's bf16 -> fp32 cast itself is wrong for subnormals
(-2.755e-40 came back as -5.877e-39, -3.673e-40 as -0.0; Triton 3.6): a kernel that must keep them
loads the bits and converts with ``bf16_bits_to_float32``. Its fp32 -> bf16 cast truncates instead of
rounding to nearest even (2041 of 4096 Gaussian values differ from torch's cast; the GPU's
``cvt.rn.bf16.f32`` rounds): kernels round with ``float32_to_bf16_rne``.
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
    """bf16 values, or their bit patterns loaded as int16, as float32, exactly, subnormals included: the
    bits become the high half of a float32. On a GPU this shift is what the bf16 cast compiles to anyway."""
    return (bits.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)


if interpreting():
    @triton.jit
    def float32_to_bf16_rne(values):
        """float32 -> bf16, round to nearest even, on every device (the interpreter's cast truncates).

        Adding 0x7FFF plus the lowest kept bit to the bits rounds the dropped half to nearest, ties to even,
        a carry into the exponent included (up to inf, as the GPU cast does); NaN becomes 0x7FC0.
        """
        bits = values.to(tl.int32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return tl.where(values == values, rounded, 0x7FC0).to(tl.int16).to(tl.bfloat16, bitcast=True)
else:
    @triton.jit
    def float32_to_bf16_rne(values):
        """The same bits on a GPU: its ``cvt.rn.bf16x2.f32`` rounds to nearest even (carries included), two
        values an instruction where the integer rounding above takes five an element; only its NaN
        (0x7FFF) is replaced, by the interpreter's 0x7FC0, so that both paths give one bit pattern."""
        rounded = values.to(tl.bfloat16, fp_downcast_rounding="rtne").to(tl.int16, bitcast=True)
        return tl.where(values == values, rounded, 0x7FC0).to(tl.int16).to(tl.bfloat16, bitcast=True)


# tl.exp on fp32 compiles to ex2.approx of x * log2(e) on NVIDIA GPUs (error grows with |x|); libdevice's
# expf is within 2 ulp, and is what torch's exp runs on CUDA.  The interpreter has no libdevice, and
# numpy's float32 exp (a SIMD path) was measured 1.17 ulp off where torch's was 0.17: there the exp is
# taken in float64 and rounded once to fp32.
if interpreting():
    @triton.jit
    def exp_fp32(x):
        return tl.exp(x.to(tl.float64)).to(tl.float32)
else:
    @triton.jit
    def exp_fp32(x):
        return libdevice.exp(x)
