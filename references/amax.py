"""The optional FP8 amax an op keeps of its bf16 output, in place: what every such op shares.

An op with ``amax=None`` or an fp32 one-element ``amax`` raises it, when given, to
``max(amax[0], max |y|)`` over the bf16 values ``y`` it returns — the running absolute maximum an FP8
quantizer of ``y`` keeps.  The band does not judge ``amax`` (an fp32 copy of a bf16 maximum is one bf16
rounding away from any float64 truth: an op's ``truth`` returns None for it); :func:`amax_property`
judges it exactly, against the same call's own ``y``.
"""
from __future__ import annotations

from typing import Callable

import torch

from oracles.failures import OracleFailure
from references.validation import Refusal, require_dtype, require_shape, require_tensor


def validate_amax(amax) -> None:
    """``amax``: None, or an fp32 tensor of one element."""
    if amax is not None:
        require_tensor("amax", amax)
        require_dtype("amax", amax, (torch.float32,))
        require_shape("amax", amax, (1,), "(one fp32 element)")


def raise_amax(amax: torch.Tensor, y: torch.Tensor) -> None:
    """``amax[0] = max(amax[0], max |y|)`` in place (NaN propagates, as in torch.maximum)."""
    if y.numel():
        amax.copy_(torch.maximum(amax, y.abs().amax().float().reshape(1)))


def raised(amax: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
    """``y``, after :func:`raise_amax` when ``amax`` is given: an op's last line (``return raised(amax, y)``)."""
    if amax is not None:
        raise_amax(amax, y)
    return y


def amax_property(op_name: str, output: int | None = None) -> Callable:
    """The stateful property of an op with an in-place ``amax``: after the call,
    ``amax[0] == max(old amax[0], max |y|)`` exactly, ``y`` being the bf16 values the same call returned
    (``output``: y's index when the op returns a tuple).  ``==``: -0.0 equals +0.0; NaN only where the
    maximum is NaN."""

    def amax_is_max_of_returned_values(impl, kwargs) -> None:
        amax = kwargs["amax"]
        if amax is None:
            return
        old = amax.clone()
        y = impl[op_name](**kwargs)
        y = y if output is None else y[output]
        expected = old.clone()
        raise_amax(expected, y)
        if not bool(((amax == expected) | (amax.isnan() & expected.isnan())).all()):
            largest = y.float().abs().amax().item() if y.numel() else None
            raise OracleFailure("stateful", f"amax is {amax.item()!r} after the call; max(old {old.item()!r}, "
                                            f"max |y| {largest!r} of the returned bf16 values) is {expected.item()!r}")

    return amax_is_max_of_returned_values


def amax_refusals(call: Callable[..., dict], clause: str) -> tuple[Refusal, ...]:
    """The refusal rows of an ``amax`` argument: another dtype, another size.  ``call(device, **override)``
    is the op's legal call with ``override`` applied; ``clause`` the Refuse-line item the rows enforce."""
    return (
        Refusal("bf16 amax", lambda device: call(device, amax=torch.zeros(1, device=device).to(torch.bfloat16)),
                "amax", TypeError, clause=clause),
        Refusal("amax of two elements", lambda device: call(device, amax=torch.zeros(2, device=device)), "amax",
                clause=clause),
    )


# -- what a strategy draws for amax ---------------------------------------------------------------
AMAX_MODES = ("none", "zero", "below", "above", "negative", "negative_zero")
"""``none``: no amax; else its value before the call: 0, 1e-30, 3e38 (above every finite output), -1.0,
-0.0 (a running maximum that must not be overwritten, or must lose to any |y|)."""
AMAX_BEFORE = {"zero": 0.0, "below": 1e-30, "above": 3e38, "negative": -1.0, "negative_zero": -0.0}


def amax_of_mode(mode: str, device) -> torch.Tensor | None:
    if mode not in AMAX_MODES:
        raise ValueError(f"amax mode: {mode!r} is not one of {AMAX_MODES}")
    return None if mode == "none" else torch.full((1,), AMAX_BEFORE[mode], dtype=torch.float32, device=device)
