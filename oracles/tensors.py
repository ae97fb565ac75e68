"""Tensor plumbing the oracles share: outputs as tuples, clones that keep layout, raw storage bytes."""
from __future__ import annotations

from typing import Any

import torch


def as_outputs(result: Any) -> tuple:
    """An op's result as a tuple of tensors (a single tensor, a tuple, or None for in-place ops)."""
    if result is None:
        return ()
    if isinstance(result, torch.Tensor):
        return (result,)
    return tuple(result)


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
