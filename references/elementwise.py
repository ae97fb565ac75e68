"""The functions an elementwise contract is written with, in two spellings.

A contract's formula (``sigmoid(gate) * x``) names its functions through ``fn``: with :data:`WRITTEN_OUT`
it is the contract's own arithmetic (``sigmoid(g) = 1 / (1 + exp(-g))``, evaluated in the dtype of its
operands: fp32 for the reference, float64 for the truth); with :data:`TORCH` it is what plain PyTorch
runs (``torch.sigmoid``: the stock op).  The Triton spelling of the same names is
``ops/triton_elementwise.py``, so one formula reads the same in the reference and in the kernel.
"""
from __future__ import annotations

import types

import torch
import torch.nn.functional as F


def _sigmoid(t: torch.Tensor) -> torch.Tensor:
    return 1 / (1 + torch.exp(-t))


WRITTEN_OUT = types.SimpleNamespace(sigmoid=_sigmoid, silu=lambda t: t * _sigmoid(t), exp=torch.exp)
TORCH = types.SimpleNamespace(sigmoid=torch.sigmoid, silu=F.silu, exp=torch.exp)
