"""liger-kernel's RMSNorm (``liger_kernel.ops.rms_norm.LigerRMSNormFunction``, Triton) as
``norm/rms_norm_gated`` on the contract's plain case: no gate, one group per row (cell
``plain_rms_norm``).

liger computes ``y = x * rsqrt(mean(x^2) + eps) * weight`` per row in fp32 (``casting_mode="llama"``:
the normalized row is cast to x's dtype BEFORE the weight multiply, as Llama does; ``"gemma"`` and
``"none"`` keep fp32 throughout).  The adapter uses ``casting_mode="none"`` (one rounding, as the
contract) and ``offset=0``.  A gate or groups within a row raise NotImplementedError: liger has neither,
and the adapter does not compute them for it.  ``amax`` is the adapter's (torch, from the returned y),
timed apart (``suites/thirdparty/staging.py``).
"""
from __future__ import annotations

from liger_kernel.ops.rms_norm import LigerRMSNormFunction

from suites.thirdparty import staging

PACKAGE = "liger-kernel"
JUDGED = {"rms_norm_gated": "rms_norm_gated"}
ADAPTER_CODE = {"rms_norm_gated": "amax raised in torch from the returned bf16 y"}


def _prepare(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    if z is not None or group_size != x.shape[-1]:
        raise NotImplementedError("liger-kernel's RMSNorm has no gate and no groups within a row")
    return {"x": x, "weight": weight, "eps": eps, "amax": amax}


def _call(prepared):
    return LigerRMSNormFunction.apply(prepared["x"], prepared["weight"], prepared["eps"], 0.0, "none", False)


def _finish(prepared, y):
    staging.raise_amax(prepared["amax"], y)
    return y


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    prepared = _prepare(x, z, weight, eps, group_size, norm_before_gate, amax)
    return _finish(prepared, _call(prepared))


rms_norm_gated.stages = staging.stages(_prepare, _call, _finish)
