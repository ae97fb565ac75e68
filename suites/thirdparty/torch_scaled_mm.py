"""cuBLASLt FP8 through ``torch._scaled_mm`` as ``gemm/fp8_gemv``: what a PyTorch user on Hopper runs.

``torch._scaled_mm(a, b, scale_a, scale_b, out_dtype)`` multiplies two e4m3 matrices with per-tensor
fp32 decode scales, accumulating in fp32 (cuBLASLt), and wants ``a``'s rows padded to a multiple of 16
and ``b`` column-major.  The contract's activation is bf16, so the adapter quantizes it:

- ``x`` (bf16) is scaled per tensor to e4m3 (``amax / 448`` as its decode scale, 1 where ``amax`` is
  0) — a precision choice of this route, not of the contract (``y = x.float() @ w.float().T * w_scale``
  with x exact): the band judges what it costs;
- ``M`` is padded to 16 with zero rows and ``K`` to a multiple of 16 with zero columns (cuBLASLt's
  own limits: exact, zeros add nothing), sliced off after; an empty ``x`` or weight gives an empty or
  zero ``y`` without a call.
"""
from __future__ import annotations

import torch

PACKAGE = "torch"
JUDGED = {"fp8_gemv": "fp8_gemv"}
ADAPTER_CODE = {"fp8_gemv": "x quantized to e4m3 with a per-tensor scale (amax / 448); M and K padded to 16"}

E4M3_MAX = 448.0
ROW_MULTIPLE = 16


def _round_up(size: int) -> int:
    return -(-size // ROW_MULTIPLE) * ROW_MULTIPLE


def fp8_gemv(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    (rows, depth), columns = x.shape, w.shape[0]
    if x.numel() == 0 or w.numel() == 0:
        return torch.zeros(rows, columns, dtype=torch.bfloat16, device=x.device)
    amax = x.float().abs().amax()
    x_scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).reshape(1)
    a = torch.zeros(_round_up(rows), _round_up(depth), dtype=torch.float8_e4m3fn, device=x.device)
    a[:rows, :depth] = (x.float() / x_scale).to(torch.float8_e4m3fn)
    b = torch.zeros(_round_up(columns), _round_up(depth), dtype=torch.float8_e4m3fn, device=x.device)
    b[:columns, :depth] = w
    y = torch._scaled_mm(a, b.t(), scale_a=x_scale, scale_b=w_scale.reshape(1).float(), out_dtype=torch.bfloat16)
    return y[:rows, :columns]
