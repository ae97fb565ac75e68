"""Contract ``gemm/fp8_gemv`` (band): validation, reference, float64 truth, stock op, refused inputs.

``fp8_gemv(x, w, w_scale) -> y bf16 [M, N]``: ``y = (x.float() @ w.float().T) * w_scale`` with float32
accumulation, rounded once to bf16; ``w`` is E4M3 ``[N, K]`` (any K), ``w_scale`` the float32
one-element DECODE scale.

- ``reference``: the float32 accumulation with no accumulation error (products summed in float64,
  where they are exact, rounded once to float32), times ``w_scale`` in float32, then bf16.
- ``truth``: ``(x @ w^T) * w_scale`` in float64, not rounded.
- ``LEGITIMATE_ORDERS``: the float32 accumulation in each reduction order of ``references/orders.py``
  (sequential, a tree, split-K into 2..8 chunks merged at the end), times ``w_scale``, then bf16.
- ``stock``: plain PyTorch in the working precision: ``torch.matmul`` of ``x`` and ``w`` in float32, times
  ``w_scale``, then bf16. Decided, as for nvfp4_gemv: not a bf16 copy of ``w * w_scale`` (the bench times
  that path beside it), whose rounding cancellation can make any number of output ULP.

Refused: the contract's Refuse line ("as above": M outside 1..16, K mismatch, wrong dtypes) and
non-tensors; a K mismatch may name ``x`` or ``w``.  A ``w`` that is not 2-D and a ``w_scale`` of
several elements are outside the signature: refused here, demanded of no implementation.

E4M3 NaN codes (0x7F, 0xFF) are not weights any quantizer writes; an input holding them is outside the
contract (NaN truth cannot be matched). ``N == 0`` gives ``[M, 0]``.
"""
from __future__ import annotations

import torch

from references import orders
from references.gemm.nvfp4_gemv import DTYPES, K_MISMATCH, ROWS, accumulate, validate_activations
from references.validation import (
    Refusal,
    refuse,
    require_dtype,
    require_ndim,
    require_same_device,
    require_tensor,
)


def validate(x, w, w_scale) -> None:
    require_tensor("w", w)
    require_ndim("w", w, 2, "[N, K]")
    require_dtype("w", w, (torch.float8_e4m3fn,))
    validate_activations(x, w.shape[1])
    require_tensor("w_scale", w_scale)
    require_dtype("w_scale", w_scale, (torch.float32,))
    if w_scale.numel() != 1:
        raise refuse("w_scale", f"has {w_scale.numel()} elements (shape {tuple(w_scale.shape)})",
                     "pass the one-element float32 decode scale of the weight")
    require_same_device({"x": x, "w": w, "w_scale": w_scale})


def fp8_gemv(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """bf16 ``[M, N]``: the exact sum rounded to float32, times ``w_scale`` in float32, then bf16."""
    validate(x, w, w_scale)
    accumulated = (x.double() @ w.double().T).float()
    return (accumulated * w_scale.reshape(())).bfloat16()


def truth(x, w, w_scale) -> torch.Tensor:
    return (x.double() @ w.double().T) * w_scale.double().reshape(())


def fp8_gemv_in_order(x, w, w_scale, order: orders.Order) -> torch.Tensor:
    validate(x, w, w_scale)
    return (accumulate(x, w, order) * w_scale.reshape(())).bfloat16()


LEGITIMATE_ORDERS = orders.legitimate_orders(fp8_gemv_in_order)


def stock(x, w, w_scale) -> torch.Tensor:
    """``torch.matmul`` in float32, times ``w_scale``, then bf16."""
    return (torch.matmul(x.float(), w.float().T) * w_scale.reshape(())).bfloat16()


def _w(device, shape=(8, 64), dtype=torch.float8_e4m3fn):
    return torch.ones(shape, device=device).to(dtype)


def _x(device, shape=(2, 64), dtype=torch.bfloat16):
    return torch.ones(shape, dtype=dtype, device=device)


def _scale(device, count=1, dtype=torch.float32):
    return torch.ones(count, dtype=dtype, device=device)


REFUSALS = (
    Refusal("M = 0", lambda device: {"x": _x(device, (0, 64)), "w": _w(device), "w_scale": _scale(device)}, "x",
            clause=ROWS),
    Refusal("M = 17", lambda device: {"x": _x(device, (17, 64)), "w": _w(device), "w_scale": _scale(device)}, "x",
            clause=ROWS),
    Refusal("float32 x", lambda device: {"x": _x(device, dtype=torch.float32), "w": _w(device),
                                         "w_scale": _scale(device)}, "x", TypeError, clause=DTYPES),
    Refusal("K of x 65, of w 64", lambda device: {"x": _x(device, (2, 65)), "w": _w(device), "w_scale": _scale(device)},
            ("x", "w"), clause=K_MISMATCH),
    Refusal("e5m2 w", lambda device: {"x": _x(device), "w": _w(device, dtype=torch.float8_e5m2),
                                      "w_scale": _scale(device)}, "w", TypeError, clause=DTYPES),
    Refusal("bf16 w", lambda device: {"x": _x(device), "w": _w(device, dtype=torch.bfloat16),
                                      "w_scale": _scale(device)}, "w", TypeError, clause=DTYPES),
    Refusal("bf16 w_scale", lambda device: {"x": _x(device), "w": _w(device),
                                            "w_scale": _scale(device, dtype=torch.bfloat16)}, "w_scale", TypeError,
            clause=DTYPES),
    Refusal("w_scale a Python float", lambda device: {"x": _x(device), "w": _w(device), "w_scale": 1.0},
            "w_scale", TypeError, clause="non-tensor"),
)
