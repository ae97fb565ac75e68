"""quack-kernels' RMSNorm (``quack.rmsnorm``, a CuTe DSL kernel by Dao-AILab) as an implementation of the
``norm/rms_norm_gated`` contract, for ``tools/certify-cells --impl``:

    tools/certify-cells --op rms_norm_gated --cell plain_rms_norm --device cuda \\
        --impl suites.norm.quack_adapter:rms_norm_gated

quack normalizes whole rows with no gate: the contract's case ``z is None`` and ``group_size == H``,
which is exactly the cell ``plain_rms_norm``.  Judge it on that cell only.  On anything else (a gate,
groups within a row) the adapter raises NotImplementedError rather than compute the missing part
itself: run on another cell it fails there, saying so, and never passes for arithmetic quack did not do.

What is the adapter's, not quack's:
- the contract's refusals (``contract.validate`` first: quack has no group or gate arguments to refuse);
- ``amax``: quack keeps none; the adapter raises it in torch from the bf16 values quack returned, so the
  amax property judges the adapter there, and parity judges quack.

Two entry points:
- ``rms_norm_gated`` passes x and weight as the caller has them, as a user calling ``quack.rmsnorm``
  would: row-strided and unaligned views included (the cell's layouts have NaN garbage between rows);
- ``rms_norm_gated_contiguous`` first copies x and weight into fresh storage (``clone`` with a
  contiguous format: ``.contiguous()`` of a view that is already contiguous keeps its storage offset,
  and an offset weight then fails quack's 16-byte alignment check), which isolates quack's arithmetic
  from how it handles such layouts.
"""
from __future__ import annotations

import torch

from references.norm import rms_norm_gated as contract


def _quack_rmsnorm(x, weight, eps):
    from quack import rmsnorm  # late: quack needs a GPU and its own wheels (tools/install-wheels)

    return rmsnorm(x, weight, eps=eps)


def _run(x, z, weight, eps, group_size, norm_before_gate, amax, contiguous: bool) -> torch.Tensor:
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    if z is not None or group_size != x.shape[1]:
        raise NotImplementedError(
            "quack's RMSNorm has no gate and no groups within a row: judge it on the cell plain_rms_norm "
            f"(got z {'given' if z is not None else 'None'}, group_size {group_size} of H = {x.shape[1]})")
    if contiguous:
        x, weight = (t.clone(memory_format=torch.contiguous_format) for t in (x, weight))
    y = _quack_rmsnorm(x, weight, float(eps))
    if amax is not None:
        contract.raise_amax(amax, y)
    return y


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    return _run(x, z, weight, eps, group_size, norm_before_gate, amax, contiguous=False)


def rms_norm_gated_contiguous(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    return _run(x, z, weight, eps, group_size, norm_before_gate, amax, contiguous=True)
