"""An adapter in three parts, so that the third party's own call is timed apart from the adapter's glue.

An adapter writes ``prepare(*contract arguments) -> prepared`` (its glue before the call: casts, padding,
index and scale layouts, buffers the caller allocates), ``call(prepared) -> raw`` (the third party's
function and nothing else) and ``finish(prepared, raw) -> the contract's outputs`` (its glue after:
slicing, widening, an lse the package leaves out).  The contract function is
``finish(prepared, call(prepared))``; ``stages(prepare, call, finish)`` is set on it as ``fn.stages``,
which ``tools/bench`` uses for an ``--impl`` that has it:

    call, glue = fn.stages(**inputs)   # prepares once, runs the call once
    call()    # the third party's call alone, on buffers prepared before the timing
    glue()    # the adapter's own code alone: prepare and finish, finishing the raw output of that call
"""
from __future__ import annotations

import torch


def stages(prepare, call, finish):
    def split(*args, **kwargs):
        prepared = prepare(*args, **kwargs)
        raw = call(prepared)
        return (lambda: call(prepared)), (lambda: finish(prepare(*args, **kwargs), raw))
    return split


def raise_amax(amax, y) -> None:
    """``amax[0] = max(amax[0], max |y|)``: the ``rms_norm_gated`` contract's amax, which neither RMSNorm
    package (fla-core, liger-kernel) computes."""
    if amax is not None and y.numel():
        torch.maximum(amax, y.float().abs().amax().reshape(1), out=amax)
