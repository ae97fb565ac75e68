"""What elementwise Triton kernels share: exact bf16 tiles in and out, the in-place FP8 amax, and the
Triton spelling of ``references/elementwise.py``'s functions (a contract's formula reads the same in the
kernel as in its reference).

amax: a program takes the largest ``|y|`` of its tile as the 15 low bits of the bf16 pattern — ``|y|``
has a clear sign bit, and non-negative bf16 values order as their bit patterns do (+inf below every NaN)
— and folds it, as the high half of an fp32 pattern read as int32, into ``amax`` with one relaxed integer
``atomic_max``.  Integer max is associative and commutative, so whatever order the atomics land in,
``amax`` ends at ``max(old, max |y|)`` exactly; an old value that is negative reads as a negative int32
and loses to any ``|y|``, as it does in float.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ops.triton_backend import bf16_bits_to_float32, exp_fp32, float32_to_bf16_rne


@triton.jit
def load_bf16(ptr, offsets, mask):
    """A bf16 tile as float32, exactly (subnormals kept: the interpreter's cast mangles them)."""
    return bf16_bits_to_float32(tl.load(ptr + offsets, mask=mask, other=0.0))


@triton.jit
def store_bf16(ptr, offsets, values, mask):
    """float32 values rounded once to bf16 (nearest even on every device), stored; returns the bf16 tile."""
    rounded = float32_to_bf16_rne(values)
    tl.store(ptr + offsets, rounded, mask=mask)
    return rounded


@triton.jit
def fold_amax(amax_bits_ptr, y, mask):
    """``amax = max(amax, max |y|)`` over the bf16 tile ``y``'s lanes in ``mask``: one relaxed atomic
    (``amax_bits_ptr``: the fp32 amax viewed as int32)."""
    bits = tl.where(mask, y.to(tl.uint16, bitcast=True).to(tl.int32) & 0x7FFF, 0)
    tl.atomic_max(amax_bits_ptr, tl.max(tl.max(bits, axis=1), axis=0) << 16, sem="relaxed")


@triton.jit
def sigmoid(x):
    """``1 / (1 + exp(-x))``: libdevice's exp on the GPU (float64-rounded under the interpreter), a
    division rounded to nearest; ``x * -1.0`` lets ptxas fold the sign into exp's first multiply-add."""
    return tl.math.div_rn(1.0, 1.0 + exp_fp32(x * -1.0))


@triton.jit
def silu(x):
    return x * sigmoid(x)


@triton.jit
def exp(x):
    return exp_fp32(x)
