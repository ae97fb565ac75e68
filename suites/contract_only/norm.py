"""norm/rms_norm_gated from the contract, in fp32, rounded once to bf16; the mean square summed by halves in
an order that depends on the group's length alone (the contract asks for batch invariance)."""
from __future__ import annotations

import numbers

import torch

from suites.contract_only.checks import shape, tensor
from suites.contract_only.sums import tree_sum

BF16 = (torch.bfloat16,)


def _validate(x, z, weight, eps, group_size, amax):
    tensor("x", x, BF16, ndim=2)
    if z is not None:
        tensor("z", z, BF16)
        shape("z", z, x.shape)
    tensor("weight", weight, BF16)
    shape("weight", weight, x.shape[1:])
    if isinstance(eps, (bool, torch.Tensor)) or not isinstance(eps, numbers.Real):
        raise TypeError(f"argument 'eps' must be a Python float, not {type(eps).__name__}")
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"argument 'group_size' must be a Python int, not {type(group_size).__name__}")
    if group_size <= 0 or x.shape[1] % group_size:
        raise ValueError(f"argument 'group_size' = {group_size} does not divide H = {x.shape[1]}")
    if amax is not None:
        tensor("amax", amax, (torch.float32,))
        shape("amax", amax, (1,))


def _y(x, z, weight, eps, group_size, norm_before_gate, mean_square):
    tokens, width = x.shape
    gate = None if z is None else torch.nn.functional.silu(z.float())
    u = x.float() if gate is None or norm_before_gate else x.float() * gate
    groups = u.reshape(tokens, width // group_size, group_size)
    y = (groups * torch.rsqrt(mean_square(groups) + eps)).reshape(tokens, width) * weight.float()
    if gate is not None and norm_before_gate:
        y = y * gate
    return y.bfloat16()


def _raise_amax(amax, y):
    if amax is not None and y.numel():
        amax.copy_(torch.maximum(amax, y.float().abs().amax().reshape(1)))


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    _validate(x, z, weight, eps, group_size, amax)
    y = _y(x, z, weight, eps, group_size, norm_before_gate, lambda g: _mean_square(g, adjacent=False))
    _raise_amax(amax, y)
    return y


def _mean_square(groups, adjacent: bool):
    total = tree_sum(groups * groups, adjacent=adjacent)
    return total / torch.full_like(total, groups.shape[-1])   # (a Python divisor is a reciprocal on CUDA)


def rms_norm_gated_pairwise(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """The alternative: the mean square summed in adjacent pairs (another order inside the band)."""
    _validate(x, z, weight, eps, group_size, amax)
    y = _y(x, z, weight, eps, group_size, norm_before_gate, lambda g: _mean_square(g, adjacent=True))
    _raise_amax(amax, y)
    return y
