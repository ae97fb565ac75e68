"""Implementations of ``rms_norm_gated`` for the battery to judge: one correct alternative, and wrong
ones that each break one thing the contract asks (the suite names the oracle that must catch each).

All are plain torch; ``contract.validate`` first unless the refusal is what is broken.
"""
from __future__ import annotations

import torch

from references.norm import rms_norm_gated as contract
from suites.strided_reads import read_as_dense


def correct_in_float64(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Right: the contract's arithmetic in float64, rounded once to bf16 (within half an ULP of truth)."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    y = contract.normalize(x, z, weight, eps, group_size, norm_before_gate, torch.float64).to(torch.bfloat16)
    if amax is not None:
        contract.raise_amax(amax, y)
    return y


def _fp32(x, z, weight, eps, group_size, norm_before_gate):
    return contract.normalize(x, z, weight, eps, group_size, norm_before_gate, torch.float32)


def amax_before_rounding(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: amax from the fp32 values before their rounding to bf16, not from the values returned."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    y32 = _fp32(x, z, weight, eps, group_size, norm_before_gate)
    if amax is not None and y32.numel():
        amax.copy_(torch.maximum(amax, y32.abs().amax().reshape(1)))
    return y32.to(torch.bfloat16)


def amax_ignores_old(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: overwrites amax with this call's max |y| instead of raising the running maximum."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    y = _fp32(x, z, weight, eps, group_size, norm_before_gate).to(torch.bfloat16)
    if amax is not None and y.numel():
        amax.copy_(y.float().abs().amax().reshape(1))
    return y


def nan_to_zero(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: right wherever the truth is finite, but writes 0 where it is NaN (a kernel that masks
    non-finite lanes to zero)."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    y = _fp32(x, z, weight, eps, group_size, norm_before_gate).to(torch.bfloat16).nan_to_num(nan=0.0)
    if amax is not None:
        contract.raise_amax(amax, y)
    return y


def groups_ignored(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: normalizes each whole row, whatever the group size."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    return contract.rms_norm_gated(x, z, weight, eps, x.shape[1], norm_before_gate, amax)


def gate_order_ignored(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: always normalizes first and gates after."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    return contract.rms_norm_gated(x, z, weight, eps, group_size, True, amax)


def eps_outside_sqrt(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: ``x / (sqrt(mean(x^2)) + eps)``, the other common way of writing the norm."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    tokens, width = x.shape
    gate = None if z is None else contract.silu(z.float())
    u = x.float() if gate is None or norm_before_gate else x.float() * gate
    groups = u.reshape(tokens, width // group_size, group_size)
    y = (groups / (groups.square().mean(-1, keepdim=True).sqrt() + eps)).reshape(tokens, width) * weight.float()
    y = (y if gate is None or not norm_before_gate else y * gate).to(torch.bfloat16)
    if amax is not None:
        contract.raise_amax(amax, y)
    return y


def bf16_arithmetic(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: computes in bf16 (squares, mean, products each rounded), as a naive bf16 kernel would."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    y = contract.normalize(x, z, weight, eps, group_size, norm_before_gate, torch.bfloat16)
    if amax is not None:
        contract.raise_amax(amax, y)
    return y


def strided_rows_read_as_contiguous(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: reads x's rows as if they were packed back to back (ignores its row stride)."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    return contract.rms_norm_gated(read_as_dense(x), z, weight, eps, group_size, norm_before_gate, amax)


def batch_of_one_unweighted(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong only for a batch of one row (another launch path that forgets the weight): right for
    every batch of prefill size, so only batch invariance sees it."""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    if x.shape[0] == 1:
        weight = torch.ones_like(weight)
    return contract.rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate, amax)


def rstd_follows_row_slot(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong only in its bits: rows at odd positions of the batch take their rstd from an approximate
    reciprocal square root that errs high by 2**-12 (x86's rsqrtps is good to 1.5 * 2**-12), the others
    from an exact one, as a kernel whose code for a row follows its slot in a multi-row tile.  Each row is
    within the band (0.5 + 1/16 bf16 ULP), but a row moved to another slot changes the rounding of about one
    output in 16.  (An rstd that differs in its last float32 bit only moves one bf16 output in 2**15, which
    a small draw need not meet.)"""
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    tokens, width = x.shape
    gate = None if z is None else contract.silu(z.float())
    u = x.float() if gate is None or norm_before_gate else x.float() * gate
    squares = (u * u).reshape(tokens, width // group_size, group_size)
    mean_square = squares.sum(-1, keepdim=True) / group_size + eps
    rstd = torch.rsqrt(mean_square)
    rstd[1::2] = (torch.rsqrt(mean_square[1::2].double()) * (1 + 2 ** -12)).float()
    y = (u.reshape(squares.shape) * rstd).reshape(tokens, width) * weight.float()
    y = (y if gate is None or not norm_before_gate else y * gate).to(torch.bfloat16)
    if amax is not None:
        contract.raise_amax(amax, y)
    return y


def missing_refusal(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Wrong: no validation; a group size that does not divide H fails inside torch instead."""
    y = _fp32(x, z, weight, eps, group_size, norm_before_gate).to(torch.bfloat16)
    if amax is not None:
        contract.raise_amax(amax, y)
    return y
