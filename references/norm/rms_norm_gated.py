"""Contract ``norm/rms_norm_gated`` (band for ``y``, exact self-consistency for ``amax``), in executable form.

``rms_norm_gated(x[T, H], z[T, H] | None, weight[H], eps, group_size, norm_before_gate=True, amax=None)
-> y bf16[T, H]``: RMSNorm over groups of ``group_size`` channels of each row, gated by ``silu(z)``
either after the norm (``norm_before_gate``: ``y = x * rsqrt(mean_g(x^2) + eps) * w * silu(z)``) or
before it (``u = x * silu(z)``; ``y = u * rsqrt(mean_g(u^2) + eps) * w``), computed in fp32 and
rounded once to bf16.  Without ``z`` the gate factor is 1.  ``amax`` (fp32, one element), when given,
is raised in place to ``max(amax[0], max |y|)`` over the bf16 values returned — the running absolute
maximum an FP8 quantizer of ``y`` keeps.

``LEGITIMATE_ORDERS``: the reference with each group's sum of squares in every order of
``references/orders.py`` (sequential, a tree, split into 2..8 chunks merged at the end); with the
stock op they set the band.

``truth`` is the same arithmetic in float64 from the same bf16 inputs; ``amax`` is not judged against
it (an fp32 copy of a bf16 maximum is one bf16 rounding away from any float64 truth): the stateful
property ``amax_is_max_of_returned_values`` judges it exactly, against the implementation's own ``y``.

Refused: the contract's Refuse line (shape/dtype mismatch, ``H % group_size != 0``), non-tensors, and
the wrong types the signature pins (``eps``/``group_size`` a tensor, ``group_size`` a float).
``norm_before_gate`` is read for its truth value: an int flag is answered like the bool it stands for.
"""
from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F

from oracles.failures import OracleFailure
from references import orders
from references.amax import amax_property, amax_refusals, raise_amax, validate_amax
from references.validation import (
    Refusal,
    refuse,
    require_dtype,
    require_ndim,
    require_same_device,
    require_shape,
    require_tensor,
)


def validate(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> None:
    require_tensor("x", x)
    require_ndim("x", x, 2, "[T, H]")
    require_dtype("x", x, (torch.bfloat16,))
    tokens, width = x.shape
    if z is not None:
        require_tensor("z", z)
        require_dtype("z", z, (torch.bfloat16,))
        require_shape("z", z, (tokens, width), "[T, H] like x")
    require_tensor("weight", weight)
    require_dtype("weight", weight, (torch.bfloat16,))
    require_shape("weight", weight, (width,), "[H]")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps: expected a real number, got {type(eps).__name__} — pass a float such as 1e-6")
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral):
        raise TypeError(f"group_size: expected an int, got {type(group_size).__name__} — pass H or a divisor of H")
    if group_size < 1 or width % group_size != 0:
        raise refuse("group_size", f"group_size = {group_size} with H = {width}",
                     "group_size must be a positive divisor of H (H itself for one group per row)")
    if not isinstance(norm_before_gate, numbers.Integral):   # a bool, or an int read as one
        raise TypeError(f"norm_before_gate: expected a bool, got {type(norm_before_gate).__name__}")
    validate_amax(amax)
    require_same_device({"x": x, "z": z, "weight": weight, "amax": amax})


def silu(z: torch.Tensor) -> torch.Tensor:
    """``z * sigmoid(z)`` as ``z / (1 + exp(-z))``, in the precision of ``z``."""
    return z / (1 + torch.exp(-z))


def normalize(x, z, weight, eps, group_size, norm_before_gate, dtype, order: orders.Order | None = None) -> torch.Tensor:
    """The contract's arithmetic in ``dtype`` (fp32: the reference; float64: the truth), the sum of
    squares of each group in ``order`` (None: torch's own)."""
    tokens, width = x.shape
    gate = None if z is None else silu(z.to(dtype))
    u = x.to(dtype)
    if gate is not None and not norm_before_gate:   # truthiness: an int flag reads as a bool
        u = u * gate
    groups = u.reshape(tokens, width // group_size, group_size)
    squares = groups * groups
    if order is None:
        mean_square = squares.mean(dim=-1, keepdim=True)
    else:
        mean_square = order.over_last(squares)[..., None] / group_size
    y = (groups * torch.rsqrt(mean_square + eps)).reshape(tokens, width) * weight.to(dtype)
    if gate is not None and norm_before_gate:
        y = y * gate
    return y


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    y = normalize(x, z, weight, eps, group_size, norm_before_gate, torch.float32).to(torch.bfloat16)
    if amax is not None:
        raise_amax(amax, y)
    return y


def rms_norm_gated_in_order(x, z, weight, eps, group_size, norm_before_gate=True, amax=None, *,
                            order: orders.Order) -> torch.Tensor:
    """The reference with each group's sum of squares in ``order`` (a kernel's per-group reduction:
    one thread, a tree, or a row split across blocks and merged)."""
    validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    y = normalize(x, z, weight, eps, group_size, norm_before_gate, torch.float32, order).to(torch.bfloat16)
    if amax is not None:
        raise_amax(amax, y)
    return y


LEGITIMATE_ORDERS = orders.legitimate_orders(rms_norm_gated_in_order)


def truth(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """float64 ``y``; with ``amax``, ``(y, None)``: amax is judged by the stateful property, not the band."""
    validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    y = normalize(x, z, weight, eps, group_size, norm_before_gate, torch.float64)
    return y if amax is None else (y, None)


def stock(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    """What a serving engine runs without a fused kernel: the torch composition of Mamba2's and FLA's
    gated-RMSNorm references (upcast, square, mean, rsqrt, silu, multiply: one kernel each), then the
    FP8 amax update."""
    tokens, width = x.shape
    x32, w32 = x.float(), weight.float()
    if z is not None and not norm_before_gate:
        x32 = x32 * F.silu(z.float())
    groups = x32.reshape(tokens, width // group_size, group_size)
    rstd = 1 / torch.sqrt(groups.square().mean(dim=-1, keepdim=True) + eps)
    y = (groups * rstd).reshape(tokens, width) * w32
    if z is not None and norm_before_gate:
        y = y * F.silu(z.float())
    y = y.to(torch.bfloat16)
    if amax is not None and y.numel():
        amax.copy_(torch.maximum(amax, y.abs().max().float()))
    return y


# -- the contract's stateful property (references/amax.py) ----------------------------------------
amax_is_max_of_returned_values = amax_property("rms_norm_gated")


# -- refused inputs ------------------------------------------------------------------------------
def _bf16(device, *shape):
    return torch.randn(shape, device=device).to(torch.bfloat16)


def _call(device, **override):
    kwargs = {"x": _bf16(device, 4, 64), "z": _bf16(device, 4, 64), "weight": _bf16(device, 64), "eps": 1e-6,
              "group_size": 32, "norm_before_gate": True, "amax": torch.zeros(1, device=device)}
    return {**kwargs, **override}


# the Refuse-line items of CONTRACTS.md the rows enforce, and the signature's pinned wrong types
MISMATCH, GROUPS = "shape/dtype mismatch", "`H % group_size != 0`"
WRONG_TYPE = "a tensor or a float for either is a wrong type"

REFUSALS = (
    Refusal("1-D x", lambda device: _call(device, x=_bf16(device, 64), z=None), "x", clause=MISMATCH),
    Refusal("3-D x", lambda device: _call(device, x=_bf16(device, 2, 4, 64), z=None), "x", clause=MISMATCH),
    Refusal("fp32 x", lambda device: _call(device, x=torch.randn(4, 64, device=device)), "x", TypeError,
            clause=MISMATCH),
    Refusal("x not a tensor", lambda device: _call(device, x=[[1.0] * 64] * 4), "x", TypeError, clause="non-tensor"),
    Refusal("z of another shape", lambda device: _call(device, z=_bf16(device, 4, 63)), ("z", "x"), clause=MISMATCH),
    Refusal("fp16 z", lambda device: _call(device, z=torch.randn(4, 64, device=device).half()), "z", TypeError,
            clause=MISMATCH),
    Refusal("weight of another length", lambda device: _call(device, weight=_bf16(device, 65)), ("weight", "x"),
            clause=MISMATCH),
    Refusal("2-D weight", lambda device: _call(device, weight=_bf16(device, 1, 64)), "weight", clause=MISMATCH),
    Refusal("fp32 weight", lambda device: _call(device, weight=torch.randn(64, device=device)), "weight", TypeError,
            clause=MISMATCH),
    Refusal("group_size not dividing H", lambda device: _call(device, group_size=48), "group_size", clause=GROUPS),
    Refusal("group_size 0", lambda device: _call(device, group_size=0), "group_size", clause=GROUPS),
    Refusal("float group_size", lambda device: _call(device, group_size=32.0), "group_size", TypeError,
            clause=WRONG_TYPE),
    Refusal("group_size as a tensor", lambda device: _call(device, group_size=torch.tensor(32)), "group_size",
            TypeError, clause=WRONG_TYPE),
    Refusal("eps as a tensor", lambda device: _call(device, eps=torch.tensor(1e-6)), "eps", TypeError,
            clause=WRONG_TYPE),
    *amax_refusals(_call, MISMATCH),
)
