"""fla-core's gated RMSNorm (``fla.modules.norm.layernorm_gated.rmsnorm_fn``, Triton) as
``norm/rms_norm_gated``: the grouped, gate-order-aware kernel serving engines use for gated DeltaNet.

``rmsnorm_fn(x, weight, bias=None, z, eps, group_size, norm_before_gate)`` is the contract's signature
less ``amax``: per row and group, ``x * rsqrt(mean_g(x^2) + eps) * w * silu(z)`` (or the gate first),
in fp32, rounded once to x's dtype.  ``amax`` is the adapter's (torch, from the returned y), timed apart
(``suites/thirdparty/staging.py``).
"""
from __future__ import annotations

import ops  # noqa: F401 - on a CPU, chooses the Triton interpreter before fla imports Triton
from fla.modules.norm.layernorm_gated import rmsnorm_fn  # noqa: E402 - after ops

from suites.thirdparty import staging  # noqa: E402

PACKAGE = "fla-core"
JUDGED = {"rms_norm_gated": "rms_norm_gated"}
ADAPTER_CODE = {"rms_norm_gated": "amax raised in torch from the returned bf16 y"}


def _prepare(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    return {"x": x, "z": z, "weight": weight, "eps": eps, "group_size": group_size,
            "norm_before_gate": norm_before_gate, "amax": amax}


def _call(prepared):
    return rmsnorm_fn(prepared["x"], prepared["weight"], None, z=prepared["z"], eps=prepared["eps"],
                      group_size=prepared["group_size"], norm_before_gate=prepared["norm_before_gate"])


def _finish(prepared, y):
    staging.raise_amax(prepared["amax"], y)
    return y


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    prepared = _prepare(x, z, weight, eps, group_size, norm_before_gate, amax)
    return _finish(prepared, _call(prepared))


rms_norm_gated.stages = staging.stages(_prepare, _call, _finish)
