"""activation/fused_sigmoid_mul from the contract (docs/contracts/fused_sigmoid_mul.md), in plain PyTorch:
nothing here imports ``references/`` or ``ops/``. ``CONTRACT_ONLY`` registers it with
``suites/test_contract_only.py``."""
from __future__ import annotations

import torch

from suites.contract_only.checks import shape, tensor


def _validate(x, gate, amax=None):
    tensor("x", x, (torch.bfloat16,), ndim=2)
    tensor("gate", gate, (torch.bfloat16,))
    shape("gate", gate, x.shape)
    if amax is not None:
        tensor("amax", amax, (torch.float32,))
        shape("amax", amax, (1,))


def _finished(amax, y):
    """``y``, with ``amax`` raised to ``max(amax, max |y|)`` when given."""
    if amax is not None and y.numel():
        amax.copy_(torch.maximum(amax, y.float().abs().amax().reshape(1)))
    return y


def fused_sigmoid_mul(x, gate, amax=None):
    _validate(x, gate, amax)
    y = (torch.sigmoid(gate.float()) * x.float()).to(torch.bfloat16)
    return _finished(amax, y)


def fused_sigmoid_mul_exp2(x, gate, amax=None):
    """The alternative: sigmoid through exp2 (``1 / (1 + 2**(-g * log2(e)))``, as ``ex2``-based GPU kernels
    compute it): other fp32 bits than exp's, inside the band."""
    _validate(x, gate, amax)
    y = (x.float() / (1 + torch.exp2(gate.float() * -1.4426950408889634))).to(torch.bfloat16)
    return _finished(amax, y)


CONTRACT_ONLY = {"fused_sigmoid_mul": {"contract": {"fused_sigmoid_mul": fused_sigmoid_mul},
                                       "exp2": {"fused_sigmoid_mul": fused_sigmoid_mul_exp2}}}
