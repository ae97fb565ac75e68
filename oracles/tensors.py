"""Tensor plumbing the oracles share: outputs as tuples checked against the contract, clones that keep
layout, raw storage bytes."""
from __future__ import annotations

from typing import Any

import torch

from oracles.failures import OracleFailure


def as_outputs(result: Any) -> tuple:
    """An op's result as a tuple of tensors (a single tensor, a tuple, or None for in-place ops)."""
    if result is None:
        return ()
    if isinstance(result, torch.Tensor):
        return (result,)
    return tuple(result)


def contract_problem(actual: Any, expected: torch.Tensor) -> str | None:
    """None when ``actual`` is what the contract promises in place of ``expected`` (the reference's
    output on the same input): exactly a ``torch.Tensor`` (a subclass can fake comparisons), of the same
    dtype, shape and device; otherwise what differs, in words."""
    if type(actual) is not torch.Tensor:
        return f"is a {type(actual).__module__}.{type(actual).__qualname__}, not exactly torch.Tensor"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.device != expected.device:
        return f"device {actual.device} != {expected.device}"
    return None


def check_contract_outputs(actual: Any, expected: Any, what: str, oracle: str = "parity") -> tuple[tuple, tuple]:
    """Both results as tuples, after checking ``actual`` output by output against the contract's
    ``expected`` (:func:`contract_problem`), before any comparison of values looks at them."""
    actual, expected = as_outputs(actual), as_outputs(expected)
    if len(actual) != len(expected):
        raise OracleFailure(oracle, f"{what}: {len(actual)} outputs, expected {len(expected)}")
    for position, (a, e) in enumerate(zip(actual, expected)):
        problem = contract_problem(a, e)
        if problem:
            raise OracleFailure(oracle, f"{what}: output {position} {problem}")
    return actual, expected


def clone_keeping_layout(tensor: torch.Tensor) -> torch.Tensor:
    """A copy with the same sizes, strides and storage offset, in a storage of its own.

    Strided views (``buf[:, :V]``) stay strided views into a copy of the whole buffer, garbage
    padding included, so an implementation sees exactly the memory the original had.
    """
    storage = storage_bytes(tensor).clone().untyped_storage()
    return torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
        storage, tensor.storage_offset(), tensor.shape, tensor.stride())


def clone_inputs(kwargs: dict) -> dict:
    return {name: clone_keeping_layout(v) if isinstance(v, torch.Tensor) else v for name, v in kwargs.items()}


def storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``tensor`` (view padding included) as a uint8 tensor (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


def snapshot_storages(kwargs: dict, skip: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    return {name: storage_bytes(v).clone() for name, v in kwargs.items()
            if isinstance(v, torch.Tensor) and name not in skip}


def changed_storages(kwargs: dict, snapshot: dict[str, torch.Tensor]) -> list[str]:
    """Names whose storage bytes differ from ``snapshot``, with the first changed byte offset."""
    changed = []
    for name, before in snapshot.items():
        after = storage_bytes(kwargs[name])
        if not torch.equal(before, after):
            first = int((before != after).nonzero()[0, 0])
            changed.append(f"{name} (first changed byte at offset {first} of {before.numel()})")
    return changed
