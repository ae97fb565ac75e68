"""Implementations of ``fused_sigmoid_mul`` for the battery to judge: one correct alternative, and wrong ones
that each break one thing the contract asks (the suite names the oracle that must catch each). All plain
torch; ``contract.validate`` first unless the refusal is what is broken. Add the op's own mistakes below the
ones every elementwise op can make."""
from __future__ import annotations

import torch

from references import elementwise
from references.activation import fused_sigmoid_mul as contract
from references.amax import raised
from suites.strided_reads import read_as_dense


def _fp32(x, gate):
    return contract.formula(x.float(), gate.float(), elementwise.WRITTEN_OUT)


def correct_in_float64(x, gate, amax=None):
    """Right: the contract's arithmetic in float64, rounded once (within half an ULP of the truth).  Its NaNs
    are made one NaN: torch's float64 paths give a NaN input's result a sign that depends on the tensor's
    size, which batch invariance (bitwise) would rightly tell apart."""
    contract.validate(x, gate, amax)
    y = contract.formula(x.double(), gate.double(), elementwise.WRITTEN_OUT).to(torch.bfloat16)
    y = torch.where(y.isnan(), torch.full_like(y, float("nan")), y)
    return raised(amax, y)


def amax_before_rounding(x, gate, amax=None):
    """Wrong: amax from the fp32 values before their rounding, not from the values returned."""
    contract.validate(x, gate, amax)
    y32 = _fp32(x, gate)
    if amax is not None and y32.numel():
        amax.copy_(torch.maximum(amax, y32.abs().amax().reshape(1)))
    return y32.to(torch.bfloat16)


def amax_ignores_old(x, gate, amax=None):
    """Wrong: overwrites amax with this call's max |y| instead of raising the running maximum."""
    contract.validate(x, gate, amax)
    y = _fp32(x, gate).to(torch.bfloat16)
    if amax is not None and y.numel():
        amax.copy_(y.float().abs().amax().reshape(1))
    return y


def strided_rows_read_as_contiguous(x, gate, amax=None):
    """Wrong: reads ``x``'s rows as if they were packed back to back (ignores its row stride)."""
    contract.validate(x, gate, amax)
    return contract.fused_sigmoid_mul(read_as_dense(x), gate, amax)


def non_finite_as_zero(x, gate, amax=None):
    """Wrong: NaN and infinities of the result written as 0 (a kernel that masks them "for safety")."""
    contract.validate(x, gate, amax)
    y = torch.nan_to_num(_fp32(x, gate), nan=0.0, posinf=0.0, neginf=0.0).to(torch.bfloat16)
    return raised(amax, y)


def writes_x_in_place(x, gate, amax=None):
    """Wrong: computes into ``x`` (an input the contract does not let it write) and returns a copy."""
    contract.validate(x, gate, amax)
    y = contract.fused_sigmoid_mul(x, gate, amax)
    x.copy_(y.to(x.dtype))
    return y.clone()


def batch_of_one_returns_x(x, gate, amax=None):
    """Wrong only for a batch of one row (a decode fast path that skips the op): right for every larger batch,
    so only batch invariance sees it."""
    contract.validate(x, gate, amax)
    if x.shape[0] == 1:
        return x.to(torch.bfloat16).clone()
    return contract.fused_sigmoid_mul(x, gate, amax)


def missing_refusal(x, gate, amax=None):
    """Wrong: no validation; a mismatched input fails inside torch, or is broadcast, instead."""
    y = _fp32(x, gate).to(torch.bfloat16)
    return raised(amax, y)


# -- the op's own mistakes ------------------------------------------------------------------------
def inputs_swapped(x, gate, amax=None):
    """Wrong: ``sigmoid(x) * gate`` (the two bf16 [T, H] arguments look alike at the call site)."""
    return contract.fused_sigmoid_mul(gate, x, amax)


def silu_gate(x, gate, amax=None):
    """Wrong: ``silu(gate) * x``, the gate of the GDN layers' gated norm, not of gated attention."""
    contract.validate(x, gate, amax)
    y = (elementwise.WRITTEN_OUT.silu(gate.float()) * x.float()).to(torch.bfloat16)
    return raised(amax, y)


def bf16_arithmetic(x, gate, amax=None):
    """Wrong: sigmoid and product in bf16, each rounded (a kernel that never upcasts)."""
    contract.validate(x, gate, amax)
    y = contract.formula(x, gate, elementwise.WRITTEN_OUT)
    return raised(amax, y)
