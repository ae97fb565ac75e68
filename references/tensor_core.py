"""The arithmetic of a Hopper tensor core's 16-bit dot, for the legitimate orders of band ops whose kernels
run their dots on tensor cores.

An fp32 dot on an H100 or H200 tensor core (``mma.sync`` / ``wgmma``: what ``tl.dot`` emits on sm_90 for
bf16 or fp16 operands with an fp32 accumulator) does not round like fp32 FMAs.  Each k-step of 16 adds its
16 products and the accumulator ``c`` in one *block FMA*:

- the products are exact;
- the 16 products and ``c`` are aligned to the largest exponent among them, keeping 2 bits below fp32's
  23 (3 when the largest product's significand is in [2, 4)), and every bit beyond is dropped
  (truncation toward zero, no sticky bit);
- the exact sum of the aligned terms is rounded once to fp32, toward zero.

A K-long dot chains ``K / 16`` block FMAs over its k-steps in order, the first from ``c = 0``.  Both roundings
are toward zero, so such a dot is biased low: over paged_decode's recipes at D = 256 the lse of its scores
reaches 1.48 fp32 ULP where the fp32 orders stay within 1.07 (``docs/band-limits.md``,
``docs/lab/tensor_core_lse.py``).  A kernel inherits that error from the hardware: a band that left it out
would fail correct kernels.

The model is Khattak and Mikaitis's, fitted bit for bit to H100 and H200 tensor cores over random inputs
("Accurate Models of NVIDIA Tensor Cores", arXiv 2512.07004; their MATLAB ``H100TC`` / ``Generic_BFMA_TC``:
a block of 16, 2 extra alignment bits, truncation, final rounding toward zero, bf16 and fp16 inputs alike).
It is checked against the H200's own ``tl.dot`` by ``suites/test_tensor_core_on_gpu.py``.  Outside what it
models: products below 2^-133 (the model's alignment floor) and results beyond fp32's range.

Everything runs in float64 on the operands' device: a product of two 16-bit significands and a sum of 17
aligned 27-bit integers are exact there.
"""
from __future__ import annotations

import math

import torch

K_STEP = 16           # products one block FMA adds (an MMA k-step on sm_90, bf16 and fp16 alike)
EXTRA_BITS = 2        # alignment bits kept below fp32's 23 fraction bits
FP32_FRACTION_BITS = 23
OPERAND_DTYPES = (torch.bfloat16, torch.float16)


def _emin(dtype: torch.dtype) -> int:
    """The exponent of ``dtype``'s smallest normal number (bf16 -126, fp16 -14, fp32 -126)."""
    return math.frexp(torch.finfo(dtype).smallest_normal)[1] - 1


def _exponent_and_significand(x: torch.Tensor, emin: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(floor(log2 |x|) at least ``emin``, -inf for 0; |x| / 2^exponent), both float64: the model's split of
    an operand (a subnormal keeps exponent emin and a significand below 1)."""
    _, exponent = torch.frexp(x)
    exponent = torch.where(x != 0, torch.clamp(exponent.to(torch.float64) - 1, min=emin), -torch.inf)
    return exponent, torch.where(x != 0, x.abs() / torch.exp2(exponent), 0.0)


def toward_zero_fp32(x: torch.Tensor) -> torch.Tensor:
    """float64 ``x`` rounded to fp32 toward zero (subnormals included), as float32."""
    nearest = x.to(torch.float32)
    overshot = nearest.to(torch.float64).abs() > x.abs()
    return torch.where(overshot, torch.nextafter(nearest, torch.zeros_like(nearest)), nearest)


def block_fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, operand_dtype: torch.dtype) -> torch.Tensor:
    """One block FMA: ``sum_j a_j b_j + c`` over the last axis of ``a`` and ``b`` (at most ``K_STEP``), float64
    tensors holding ``operand_dtype`` values, ``c`` float64 holding fp32 values (the shape of the broadcast
    ``a * b`` less its last axis).  Returns the fp32 result as float64."""
    emin = _emin(operand_dtype)
    return _block_fma(a, b, *_exponent_and_significand(a, emin), *_exponent_and_significand(b, emin), c)


def _block_fma(a, b, a_exponent, a_significand, b_exponent, b_significand, c):
    products = a * b
    raw = a_exponent + b_exponent                                  # -inf where a product is 0
    normalized = raw + (a_significand * b_significand >= 2)       # a significand in [2, 4) moves up one binade
    largest_raw = raw.amax(dim=-1)
    c_exponent, _ = _exponent_and_significand(c, _emin(torch.float32))
    top_product = normalized.amax(dim=-1)
    # one more bit kept when a product of the largest raw exponent has its significand in [2, 4) and c is not
    # above it
    extra = EXTRA_BITS + ((top_product == largest_raw + 1) & (largest_raw >= c_exponent)).to(torch.float64)
    top = torch.maximum(top_product, c_exponent)
    grid = torch.exp2(top - FP32_FRACTION_BITS - extra)
    aligned = torch.trunc(products / grid[..., None]).sum(dim=-1) + torch.trunc(c / grid)
    exact_sum = torch.where(top > -torch.inf, aligned * grid, 0.0)
    return toward_zero_fp32(exact_sum).to(torch.float64)


def require_operands(name: str, x: torch.Tensor, operand_dtype: torch.dtype) -> None:
    """``x`` must hold values of ``operand_dtype`` exactly (a tensor core reads nothing else)."""
    if operand_dtype not in OPERAND_DTYPES:
        raise ValueError(f"operand_dtype: {operand_dtype} is not a 16-bit tensor-core operand "
                         f"({', '.join(map(str, OPERAND_DTYPES))})")
    finite = x.isfinite()
    if not bool(finite.all()) or not bool((x.to(operand_dtype).to(x.dtype) == x).all()):
        raise ValueError(f"{name}: holds values that are not finite {str(operand_dtype).removeprefix('torch.')} "
                         f"numbers; round the operand to the tensor core's input format first")


def tensor_core_dot(a: torch.Tensor, b: torch.Tensor, operand_dtype: torch.dtype = torch.bfloat16,
                    c: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_k a_k b_k + c`` over the last axis (broadcast ``a * b``) as a Hopper tensor core computes it:
    block FMAs of ``K_STEP`` products chained over the axis in order from the accumulator ``c`` (fp32 values,
    broadcast to ``a * b`` less its last axis; None: 0).  ``a`` and ``b`` hold ``operand_dtype`` values in any
    float dtype; the result is float32."""
    require_operands("a", a, operand_dtype)
    require_operands("b", b, operand_dtype)
    a, b = a.to(torch.float64), b.to(torch.float64)
    length = a.shape[-1]
    if b.shape[-1] != length:
        raise ValueError(f"b: last axis of {b.shape[-1]} differs from a's {length}")
    shape = torch.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    emin = _emin(operand_dtype)
    a_parts, b_parts = _exponent_and_significand(a, emin), _exponent_and_significand(b, emin)
    total = (torch.zeros(shape, dtype=torch.float64, device=a.device) if c is None
             else c.to(torch.float64).expand(shape))
    for first in range(0, length, K_STEP):
        step = slice(first, first + K_STEP)
        total = _block_fma(a[..., step], b[..., step], a_parts[0][..., step], a_parts[1][..., step],
                           b_parts[0][..., step], b_parts[1][..., step], total)
    return total.to(torch.float32)
