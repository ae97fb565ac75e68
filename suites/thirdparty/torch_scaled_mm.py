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
Split in stages (``suites/thirdparty/staging.py``): ``tools/bench`` times ``torch._scaled_mm`` alone and the
quantization, padding and slicing apart (the whole adapter took 97.2 us at M = 1 on the H200, the call
alone 19.0 us at M = 16).
"""
from __future__ import annotations

import torch

from suites.thirdparty import staging

PACKAGE = "torch"
JUDGED = {"fp8_gemv": "fp8_gemv"}
ADAPTER_CODE = {"fp8_gemv": "x quantized to e4m3 with a per-tensor scale (amax / 448); M and K padded to 16"}

E4M3_MAX = 448.0
ROW_MULTIPLE = 16


def _round_up(size: int) -> int:
    return -(-size // ROW_MULTIPLE) * ROW_MULTIPLE


def _prepare(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> dict:
    (rows, depth), columns = x.shape, w.shape[0]
    if x.numel() == 0 or w.numel() == 0:
        return {"rows": rows, "columns": columns, "device": x.device, "a": None}
    amax = x.float().abs().amax()
    x_scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).reshape(1)
    a = torch.zeros(_round_up(rows), _round_up(depth), dtype=torch.float8_e4m3fn, device=x.device)
    a[:rows, :depth] = (x.float() / x_scale).to(torch.float8_e4m3fn)
    b = torch.zeros(_round_up(columns), _round_up(depth), dtype=torch.float8_e4m3fn, device=x.device)
    b[:columns, :depth] = w
    return {"rows": rows, "columns": columns, "device": x.device, "a": a, "b": b, "scale_a": x_scale,
            "scale_b": w_scale.reshape(1).float()}


def _call(prepared):
    if prepared["a"] is None:
        return None
    return torch._scaled_mm(prepared["a"], prepared["b"].t(), scale_a=prepared["scale_a"],
                            scale_b=prepared["scale_b"], out_dtype=torch.bfloat16)


def _finish(prepared, y):
    if y is None:
        return torch.zeros(prepared["rows"], prepared["columns"], dtype=torch.bfloat16, device=prepared["device"])
    return y[:prepared["rows"], :prepared["columns"]]


def fp8_gemv(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    prepared = _prepare(x, w, w_scale)
    return _finish(prepared, _call(prepared))


fp8_gemv.stages = staging.stages(_prepare, _call, _finish)
