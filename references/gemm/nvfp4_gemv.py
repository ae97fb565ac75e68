"""Contract ``gemm/nvfp4_gemv`` (band): validation, reference, float64 truth, stock op, refused inputs.

``nvfp4_gemv(x, packed, block_scales, global_scale) -> y bf16 [M, N]``: ``y = x @ W^T`` where ``W``
(``[N, K]``) is the contract's dequantization of the NVFP4 weight that ``nvfp4_quantize`` produced,
``w[n, k] = e2m1(code) * float(sf[n, k // 16]) * (1 / global_scale)`` in float32
(``references/formats/nvfp4.nvfp4_dequantize``), accumulated in float32 and rounded once to bf16.

- ``reference``: the float32 accumulation with no accumulation error (the products summed in float64,
  where they are exact, rounded once to float32), then bf16: what any float32 accumulator approaches.
- ``truth``: the same sum in float64, not rounded: what the band is measured against.
- ``LEGITIMATE_ORDERS``: the float32 accumulation in each reduction order of ``references/orders.py``
  (sequential, a tree, split-K into 2..8 chunks merged at the end), products rounded to float32,
  then bf16: with the stock op, what sets the band.
- ``stock``: plain PyTorch in the contract's working precision (CONTRACTS.md's convention): the float32
  ``W`` and ``torch.matmul`` in float32, then bf16. Decided: not the bf16 weight a user might dequantize
  to (the bench times that path beside it, "torch.matmul on bf16 weights"): rounding ``W`` to bf16 costs
  2**-9 relative per weight, which cancellation in the sum turns into any number of output ULP (6.3 on
  an H200 draw at 100 draws a cell: a vacuous band for a kernel 0.3 ULP off), so it is no legitimate
  implementation of a float32 weight.

Refused: the contract's Refuse line (M outside 1..16, K mismatch, wrong dtypes) and non-tensors; a
K mismatch may name either side (``x`` or the weight's tensors).  Shapes outside the signature (a
1-D ``x``, a ``global_scale`` of several elements, packed and scales of different N) are refused here
too, but demanded of no implementation.

Decided where the contract leaves room: ``N == 0`` gives an empty ``[M, 0]``; strides of ``x`` are
free (rows of a larger buffer are legal), the weight tensors are read through PyTorch indexing here, so any strides work.
"""
from __future__ import annotations

import torch

from references import orders
from references.formats import nvfp4 as formats
from references.validation import (
    Refusal,
    refuse,
    require_dtype,
    require_ndim,
    require_range,
    require_same_device,
    require_tensor,
)

MAX_ROWS = 16


def validate_activations(x, cols: int) -> None:
    """``x``: bf16 ``[M, K]`` with ``M`` in 1..16 and ``K == cols`` (the weight's K). Shared by the GEMVs."""
    require_tensor("x", x)
    require_ndim("x", x, 2, "[M, K]")
    require_dtype("x", x, (torch.bfloat16,))
    require_range("x", x.shape[0], 1, MAX_ROWS, "M (rows of x)")
    if x.shape[1] != cols:
        raise refuse("x", f"K = {x.shape[1]} but the weight holds K = {cols}",
                     "pass activations with as many columns as the weight")


def validate(x, packed, block_scales, global_scale) -> None:
    formats.validate_dequantize(packed, block_scales, global_scale)
    validate_activations(x, 2 * packed.shape[1])
    require_same_device({"x": x, "packed": packed})


def _weight(packed, block_scales, global_scale) -> torch.Tensor:
    return formats.nvfp4_dequantize(packed, block_scales, global_scale)


def nvfp4_gemv(x: torch.Tensor, packed: torch.Tensor, block_scales: torch.Tensor,
               global_scale: torch.Tensor) -> torch.Tensor:
    """bf16 ``[M, N]``: the exact sum rounded to float32, then to bf16 (module docstring)."""
    validate(x, packed, block_scales, global_scale)
    return truth(x, packed, block_scales, global_scale).float().bfloat16()


def truth(x, packed, block_scales, global_scale) -> torch.Tensor:
    """float64 ``[M, N]``: ``x @ W^T`` with the contract's float32 ``W``, every product exact."""
    return x.double() @ _weight(packed, block_scales, global_scale).double().T


def accumulate(x: torch.Tensor, weight: torch.Tensor, order: orders.Order) -> torch.Tensor:
    """float32 ``[M, N]``: ``x @ weight^T`` with float32 products summed over K in ``order``."""
    x32, w32 = x.float(), weight.float()
    return order.reduce(lambda k: x32[:, None, k.to(x.device)] * w32[None, :, k.to(x.device)], x.shape[1])


def nvfp4_gemv_in_order(x, packed, block_scales, global_scale, order: orders.Order) -> torch.Tensor:
    validate(x, packed, block_scales, global_scale)
    return accumulate(x, _weight(packed, block_scales, global_scale), order).bfloat16()


LEGITIMATE_ORDERS = orders.legitimate_orders(nvfp4_gemv_in_order)


def stock(x, packed, block_scales, global_scale) -> torch.Tensor:
    """The float32 weight, ``torch.matmul`` in float32, then bf16."""
    return torch.matmul(x.float(), _weight(packed, block_scales, global_scale).float().T).bfloat16()


def _weights(device, rows=8, cols=64):
    return {"packed": torch.zeros(rows, cols // 2, dtype=torch.uint8, device=device),
            "block_scales": torch.ones(rows, cols // 16, device=device).to(torch.float8_e4m3fn),
            "global_scale": torch.ones(1, device=device)}


def _x(device, shape=(2, 64), dtype=torch.bfloat16):
    return torch.ones(shape, dtype=dtype, device=device)


# the Refuse-line items of CONTRACTS.md the rows enforce (fp8_gemv's line is "as above": the same)
ROWS, K_MISMATCH, DTYPES = "M outside 1..16", "K mismatch", "wrong dtypes"

REFUSALS = (
    Refusal("M = 0", lambda device: {"x": _x(device, (0, 64)), **_weights(device)}, "x", clause=ROWS),
    Refusal("M = 17", lambda device: {"x": _x(device, (17, 64)), **_weights(device)}, "x", clause=ROWS),
    Refusal("float16 x", lambda device: {"x": _x(device, dtype=torch.float16), **_weights(device)}, "x", TypeError,
            clause=DTYPES),
    Refusal("K of x 80, of the weight 64", lambda device: {"x": _x(device, (2, 80)), **_weights(device)},
            ("x", "packed", "block_scales"), clause=K_MISMATCH),
    Refusal("int8 packed", lambda device: {"x": _x(device), **_weights(device),
                                           "packed": torch.zeros(8, 32, dtype=torch.int8, device=device)},
            "packed", TypeError, clause=DTYPES),
    Refusal("packed of 12 bytes a row (K = 24) beside block_scales for K = 64", lambda device: {
        "x": _x(device, (2, 24)), **_weights(device), "packed": torch.zeros(8, 12, dtype=torch.uint8, device=device)},
        ("packed", "block_scales"), clause=K_MISMATCH),
    Refusal("float32 block_scales", lambda device: {"x": _x(device), **_weights(device),
                                                    "block_scales": torch.ones(8, 4, device=device)},
            "block_scales", TypeError, clause=DTYPES),
    Refusal("block_scales of 3 columns for K = 64", lambda device: {
        "x": _x(device), **_weights(device), "block_scales": torch.ones(8, 3, device=device).to(torch.float8_e4m3fn)},
        ("block_scales", "packed"), clause=K_MISMATCH),
    Refusal("float64 global_scale", lambda device: {"x": _x(device), **_weights(device),
                                                     "global_scale": torch.ones(1, dtype=torch.float64, device=device)},
            "global_scale", TypeError, clause=DTYPES),
    Refusal("x not a tensor", lambda device: {"x": [[1.0] * 64] * 2, **_weights(device)}, "x", TypeError,
            clause="non-tensor"),
)
