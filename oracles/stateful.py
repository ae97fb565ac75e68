"""Stateful properties: the hook through which a contract's own properties (rollback restoration,
replay equivalence...) are judged.  A property is ``property(impl, kwargs) -> None`` defined beside
the contract's reference; it raises OracleFailure("stateful", ...) when the implementation breaks it.
``impl`` maps op names to callables (the op and its contract siblings)."""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

from oracles.tensors import clone_inputs


def check_properties(properties: Iterable[Callable], impl: Mapping[str, Callable], kwargs: dict) -> None:
    for contract_property in properties:
        contract_property(impl, clone_inputs(kwargs))
