"""Outputs that alias: an output lying in an input's storage, or outputs whose elements share memory.

Outputs are judged by value (CONTRACTS.md): any strides and storage offset are a legal answer, a view of
a larger fresh allocation included, and two outputs may lie apart in one fresh allocation.  What is not
legal is memory that is not the output's own: an output in the storage of an argument (a caller who
writes the input later changes the output), or elements that share bytes with each other or with another
output's (writing one changes the other).  This finding is named apart from the numbers, before any
value is compared.

A storage is named by a key the caller chooses (its device and address, in the process that made it),
so that the implementation host, whose outputs reach the judge as copies, can send the keys as facts.
Geometry alone (dtype, storage offset, shape, strides) decides whether elements overlap.
"""
from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import torch


def storage_key(tensor: torch.Tensor) -> tuple[str, int] | None:
    """Which storage ``tensor`` lies in (None for an empty storage, which holds nothing to alias)."""
    storage = tensor.untyped_storage()
    return (str(tensor.device), storage.data_ptr()) if storage.nbytes() else None


def _extent(tensor: torch.Tensor) -> tuple[int, int]:
    """The bytes of its storage an output's elements span: [first, last + 1)."""
    size = tensor.element_size()
    first = tensor.storage_offset() * size
    last = first + sum((n - 1) * step for n, step in zip(tensor.shape, tensor.stride())) * size
    return first, last + size


def _surely_apart(tensor: torch.Tensor) -> bool:
    """A sufficient test that no two elements share a byte: with its dims of size > 1 sorted by stride,
    each stride steps over everything the smaller ones span (dense, transposed, padded and column views)."""
    spanned = 1   # elements (of its own size) the dims taken so far span
    for step, n in sorted((step, n) for n, step in zip(tensor.shape, tensor.stride()) if n > 1):
        if step < spanned:
            return False
        spanned += (n - 1) * step
    return True


def _element_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The first byte of every element in its storage, sorted (int64, on its device)."""
    starts = torch.zeros((), dtype=torch.int64, device=tensor.device)
    for n, step in zip(tensor.shape, tensor.stride()):
        starts = starts.unsqueeze(-1) + torch.arange(n, dtype=torch.int64, device=tensor.device) * step
    return ((starts.reshape(-1) + tensor.storage_offset()) * tensor.element_size()).sort().values


def overlaps_itself(tensor: torch.Tensor) -> bool:
    """Whether two elements of ``tensor`` share a byte (a zero or too small stride over a dim of size > 1)."""
    if tensor.numel() < 2 or _surely_apart(tensor):
        return False
    return bool((_element_bytes(tensor).diff() < tensor.element_size()).any())


def share_elements(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether an element of ``a`` and one of ``b`` share a byte, both laid out in one storage."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    (a_first, a_end), (b_first, b_end) = _extent(a), _extent(b)
    if a_end <= b_first or b_end <= a_first:
        return False
    starts_a, starts_b = _element_bytes(a), _element_bytes(b).to(a.device)
    # for each element of b, the last element of a starting before b's end: the one that could reach it
    before = torch.searchsorted(starts_a, starts_b + b.element_size(), right=False) - 1
    reaches = starts_a[before.clamp(min=0)] + a.element_size() > starts_b
    return bool((reaches & (before >= 0)).any())


def aliasing(outputs: Sequence[torch.Tensor], keys: Sequence[Hashable | None],
             arguments: Mapping[str, Hashable | None]) -> str | None:
    """None when every output's memory is its own; else the finding, in words (``outputs alias ...``).

    :param outputs: the outputs, each with the geometry it has in its storage.
    :param keys: each output's storage key (:func:`storage_key`, or the host's).
    :param arguments: each tensor argument's storage key, by name.
    """
    for index, (output, key) in enumerate(zip(outputs, keys)):
        if output.numel() == 0 or key is None:
            continue
        named = [name for name, argument in arguments.items() if argument == key]
        if named:
            return f"outputs alias an input: output {index} lies in the storage of argument {named[0]!r}"
        if overlaps_itself(output):
            return (f"outputs alias each other: elements of output {index} share memory (shape "
                    f"{tuple(output.shape)}, strides {tuple(output.stride())})")
    for i in range(len(outputs)):
        for j in range(i + 1, len(outputs)):
            if keys[i] is not None and keys[i] == keys[j] and share_elements(outputs[i], outputs[j]):
                return f"outputs alias each other: outputs {i} and {j} share elements of one storage"
    return None
