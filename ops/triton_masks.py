"""Masks that stay bool blocks under every Triton interpreter.

A module of its own, not ``ops/triton_backend``: a kernel's certificate digest covers the project helpers
it imports, and only the kernels that use these should go stale when they change.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def block_and(block_mask, flag):
    """``block_mask & flag`` for a scalar ``flag`` (a comparison), kept a bool block under the interpreter.

    The interpreter labels a scalar comparison with its operands' type, so broadcasting it to a block
    makes int32 data, and from Triton 3.9 a load or store refuses such a mask ("mask has unsupported
    dtype"); a select of the bool block stays bool there, and compiles to the same ``and`` on a GPU."""
    return tl.where(flag, block_mask, False)

