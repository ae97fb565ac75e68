"""fla-core's gated RMSNorm (``fla.modules.norm.layernorm_gated.rmsnorm_fn``, Triton) as
``norm/rms_norm_gated``: the grouped, gate-order-aware kernel serving engines use for gated DeltaNet.

``rmsnorm_fn(x, weight, bias=None, z, eps, group_size, norm_before_gate)`` is the contract's signature
less ``amax``: per row and group, ``x * rsqrt(mean_g(x^2) + eps) * w * silu(z)`` (or the gate first),
in fp32, rounded once to x's dtype.  ``amax`` is the adapter's (torch, from the returned y).
"""
from __future__ import annotations

import torch

import ops  # noqa: F401 - on a CPU, chooses the Triton interpreter before fla imports Triton
from fla.modules.norm.layernorm_gated import rmsnorm_fn  # noqa: E402 - after ops

PACKAGE = "fla-core"
JUDGED = {"rms_norm_gated": "rms_norm_gated"}
ADAPTER_CODE = {"rms_norm_gated": "amax raised in torch from the returned bf16 y"}


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    y = rmsnorm_fn(x, weight, None, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate)
    if amax is not None and y.numel():
        torch.maximum(amax, y.float().abs().amax().reshape(1), out=amax)
    return y
