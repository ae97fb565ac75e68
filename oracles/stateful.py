"""Stateful properties: the hook through which a contract's own properties (rollback restoration,
replay equivalence...) are judged.  A property is ``property(impl, kwargs) -> None`` defined beside
the contract's reference; it raises OracleFailure("stateful", ...) when the implementation breaks it.
``impl`` maps op names to callables (the op and its contract siblings).

:func:`check_rows_unchanged` is the judge such properties share for pools written in place (recurrent
states per slot, KV pages): the rows a call does not own must keep every bit.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

import torch

from oracles.bitwise import bit_pattern
from oracles.failures import OracleFailure
from oracles.tensors import clone_inputs

LISTED_ROWS = 8


def check_properties(properties: Iterable[Callable], impl: Mapping[str, Callable], kwargs: dict) -> None:
    for contract_property in properties:
        contract_property(impl, clone_inputs(kwargs))


def check_rows_unchanged(before: torch.Tensor, after: torch.Tensor, may_change: torch.Tensor, what: str) -> None:
    """Every row (dim 0) of ``after`` that ``may_change`` (bool ``[rows]``) leaves out is bitwise ``before``'s.

    Bitwise, NaN payloads and signed zeros included: a band comparison would let a write of one ulp
    through, and an index of -1 written in torch lands on the last row, which only this check sees.
    """
    if before.shape != after.shape or before.dtype != after.dtype:
        raise OracleFailure("stateful", f"{what}: the pool changed shape or dtype: {tuple(before.shape)} "
                                        f"{before.dtype} -> {tuple(after.shape)} {after.dtype}")
    rows = before.shape[0]
    differs = (bit_pattern(before) != bit_pattern(after)).reshape(rows, -1).any(dim=1)
    changed = (differs & ~may_change).nonzero()[:, 0].tolist()
    if changed:
        listed = ", ".join(map(str, changed[:LISTED_ROWS])) + (", ..." if len(changed) > LISTED_ROWS else "")
        raise OracleFailure("stateful", f"{what}: {len(changed)} of {int((~may_change).sum())} rows that must "
                                        f"keep every bit changed (rows {listed})")
