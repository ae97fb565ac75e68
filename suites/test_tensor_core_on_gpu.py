"""The tensor-core model (``references/tensor_core.py``) against the H200's own ``tl.dot``, bit for bit.

The legitimate order ``tensor_core_k16`` of paged_decode rests on this model: a ``tl.dot`` of bf16 or fp16
tiles into an fp32 accumulator, one k-step (K = 16: one block FMA with the accumulator) and a chain of 16
k-steps (K = 256: paged_decode's D), for the shapes Triton lowers to ``mma.sync`` (M = 16) and to ``wgmma``
(M = 64) on sm_90.  Operands span 2^-20..2^20 (bf16) or 2^-10..2^10 (fp16) with mixed signs, some
subnormal and zero; the accumulator is drawn on the same scales.
"""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from references.tensor_core import tensor_core_dot

pytestmark = pytest.mark.sm90


@triton.jit
def _dot_into(a_ptr, b_ptr, c_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rows, columns, depth = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rows[:, None] * K + depth[None, :])
    b = tl.load(b_ptr + depth[:, None] * N + columns[None, :])
    c = tl.load(c_ptr + rows[:, None] * N + columns[None, :])
    tl.store(out_ptr + rows[:, None] * N + columns[None, :], tl.dot(a, b, c))


def _operands(shape, dtype, spread: int, generator) -> torch.Tensor:
    exponents = torch.randint(-spread, spread + 1, shape, generator=generator, device="cuda").double()
    x = torch.randn(shape, generator=generator, device="cuda", dtype=torch.float64) * torch.exp2(exponents)
    tiny = torch.finfo(dtype).smallest_normal
    x.view(-1)[::29] = tiny * 0.25          # subnormal operands
    x.view(-1)[5::31] = 0.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [16, 64])
@pytest.mark.parametrize("depth", [16, 256])
def test_the_model_is_the_h200s_dot(dtype, rows, depth):
    generator = torch.Generator(device="cuda").manual_seed(rows * 1000 + depth + (dtype == torch.float16))
    spread = 20 if dtype == torch.bfloat16 else 10
    columns = 16
    a = _operands((rows, depth), dtype, spread // 2, generator)
    b = _operands((depth, columns), dtype, spread // 2, generator)
    c = _operands((rows, columns), torch.float32, spread, generator).float()
    out = torch.empty(rows, columns, device="cuda")
    _dot_into[(1,)](a, b, c, out, rows, columns, depth)
    expected = tensor_core_dot(a[:, None, :], b.T[None, :, :], dtype, c)   # row i of a, column j of b, from c[i, j]
    differ = (out != expected).nonzero()
    assert differ.numel() == 0, (
        f"{differ.shape[0]} of {out.numel()} outputs differ from the model; first at {differ[0].tolist()}: "
        f"GPU {out[tuple(differ[0])].item()!r}, model {expected[tuple(differ[0])].item()!r}, "
        f"fp64 {(a.double() @ b.double() + c.double())[tuple(differ[0])].item()!r}")
