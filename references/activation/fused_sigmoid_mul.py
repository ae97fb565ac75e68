"""Contract ``activation/fused_sigmoid_mul`` (band (y), exact self-consistency (amax)), in executable form.

``fused_sigmoid_mul(x, gate, amax=None) -> y bf16[T, H]``: y = sigmoid(gate) * x in fp32, rounded once to
bf16, with the FP8 amax of y. Its section: docs/contracts/fused_sigmoid_mul.md (for CONTRACTS.md).

Parity: band — sigmoid's fp32 exp differs by implementation (libdevice exp, exp2 of g * log2(e), ex2.approx in
tl.sigmoid), so no bit pattern is the contract's; one rounding of an fp32 product keeps every such kernel
within an ULP.

``amax`` (fp32, one element), when given, is raised in place to ``max(amax[0], max |y|)`` over the bf16 values
returned (``references/amax.py``): the band does not judge it, the stateful property
``amax_is_max_of_returned_values`` does, exactly.

Refused: the contract's Refuse line (shape/dtype mismatch) and non-tensors.
"""
from __future__ import annotations

import torch

from references import elementwise
from references.amax import amax_property, amax_refusals, raised, validate_amax
from references.refusal_tables import tensor_of, tensor_refusals
from references.validation import require_dtype, require_ndim, require_same_device, require_shape, require_tensor


def validate(x, gate, amax=None) -> None:
    require_tensor("x", x)
    require_ndim("x", x, 2, "[T, H]")
    require_dtype("x", x, (torch.bfloat16,))
    require_tensor("gate", gate)
    require_dtype("gate", gate, (torch.bfloat16,))
    require_shape("gate", gate, tuple(x.shape), "[T, H] like x")
    validate_amax(amax)
    require_same_device({"x": x, "gate": gate, "amax": amax})


def formula(x, gate, fn):
    """The contract's arithmetic on operands already in the working dtype; ``fn``: ``elementwise.WRITTEN_OUT``
    (the contract's own formulas) or ``elementwise.TORCH`` (plain PyTorch's)."""
    return fn.sigmoid(gate) * x


def fused_sigmoid_mul(x, gate, amax=None) -> torch.Tensor:
    validate(x, gate, amax)
    y = formula(x.float(), gate.float(), elementwise.WRITTEN_OUT).to(torch.bfloat16)
    return raised(amax, y)


def truth(x, gate, amax=None):
    """float64 ``y``; with ``amax``, ``(y, None)``: amax is judged by the stateful property, not the band."""
    validate(x, gate, amax)
    y = formula(x.double(), gate.double(), elementwise.WRITTEN_OUT)
    return y if amax is None else (y, None)


def stock(x, gate, amax=None) -> torch.Tensor:
    """What a serving engine runs without a fused kernel: PyTorch's own functions in fp32, one kernel each."""
    y = formula(x.float(), gate.float(), elementwise.TORCH).to(torch.bfloat16)
    return raised(amax, y)


amax_is_max_of_returned_values = amax_property("fused_sigmoid_mul")


# -- refused inputs ------------------------------------------------------------------------------
def _call(device, **override):
    kwargs = {"x": tensor_of(device, (4, 64), torch.bfloat16),
              "gate": tensor_of(device, (4, 64), torch.bfloat16),
              "amax": torch.zeros(1, device=device)}
    return {**kwargs, **override}


MISMATCH = "shape/dtype mismatch"   # the contract's Refuse line
REFUSALS = (
    *tensor_refusals(_call, "x", (4, 64), torch.bfloat16, MISMATCH),
    *tensor_refusals(_call, "gate", (4, 64), torch.bfloat16, MISMATCH, like="x"),
    *amax_refusals(_call, MISMATCH),
)
