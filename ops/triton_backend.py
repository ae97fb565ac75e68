"""What Triton kernels share: the device facts their launch plans are made from.

On a machine without CUDA, ``ops/__init__`` has set ``TRITON_INTERPRET=1`` before Triton was imported,
so ``triton.jit`` kernels run under the interpreter on CPU tensors (the ``cpu-interp`` arch).
Interpreter caveats (bf16 arithmetic, NaN inside reductions): kernels upcast to fp32 after loading and
keep NaN out of ``tl.max``/``tl.min``; where bf16 subnormals or the rounding of a bf16 store matter,
they convert with :func:`bf16_to_fp32` / :func:`fp32_to_bf16` below (the interpreter's own casts are wrong).
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


# -- exact conversions and functions kernels share -------------------------------------------------
# The interpreter converts bf16 <-> fp32 by hand and gets it wrong: bf16 subnormals upcast to 0 or to
# the wrong value, and fp32 -> bf16 truncates (or, asked for RTNE, rounds half up without carrying into
# the exponent).  These do it on the bits, which is exact under the interpreter and on the GPU alike.
@triton.jit
def bf16_to_fp32(x):
    """bf16 -> fp32, exactly (every bf16 is an fp32: shift the 16 bits up)."""
    return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def fp32_to_bf16(x):
    """fp32 -> bf16, round to nearest even: torch's cast for every non-NaN value; NaN becomes 0x7FC0."""
    bits = x.to(tl.uint32, bitcast=True)
    upper = bits >> 16
    # ties to even: the lower half plus 0x7FFF plus upper's last bit carries exactly when rounding up
    # (never past 2**32: no wrap-around for the interpreter's overflow check to trip on)
    carry = ((bits & 0xFFFF) + 0x7FFF + (upper & 1)) >> 16
    rounded = tl.where(x != x, 0x7FC0, upper + carry)
    return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)


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
