"""In-place steps: the elements a contract names hold what it says, and not one other byte changes.

An in-place op (a rollback restore, a cache write, a state commit) is judged on the *whole* storage
under the tensor it mutates: the storage is snapshotted before the step; after it, every element the
contract names must be bitwise equal to its expected value, and every other byte of the storage —
the other elements of the tensor (other pages, other slots, kept rows) and the memory between and
around them that belongs to no element (view padding, the other half of an interleaved cache) — must
be bitwise equal to the snapshot.  A finding says which of the three went wrong, and where first.

The oracle knows nothing about any op: the contract's property tells it which elements are named
(a bool mask over the tensor's leading dims, broadcast over the rest) and what they must hold.
"""
from __future__ import annotations

from typing import Callable

import torch

from oracles.failures import OracleFailure
from oracles.tensors import storage_bytes


_SAME_WIDTH_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The same elements, in place, as same-width integers (a view: writes go through)."""
    return tensor.view(_SAME_WIDTH_INTS[tensor.element_size()])


def _view_of(storage: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``like``'s elements inside another storage of the same size (same offset and strides)."""
    return torch.empty(0, dtype=like.dtype, device=like.device).set_(
        storage.untyped_storage(), like.storage_offset(), like.shape, like.stride())


def _broadcast_mask(named: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    if named.dtype != torch.bool or tuple(state.shape[:named.dim()]) != tuple(named.shape):
        raise ValueError(f"named: expected a bool mask over the leading dims {tuple(state.shape)[:named.dim()]} "
                         f"of the state, got {named.dtype} {tuple(named.shape)}")
    return named.reshape(*named.shape, *(1,) * (state.dim() - named.dim())).expand(state.shape)


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0])


def check_in_place_step(state: torch.Tensor, step: Callable[[], object], named: torch.Tensor,
                        expected: torch.Tensor, what: str, oracle: str = "stateful") -> None:
    """Run ``step()`` (which mutates ``state`` in place) and judge the whole storage under ``state``.

    :param state: the tensor the step mutates (a view is judged with its whole storage).
    :param named: bool mask over ``state``'s leading dims: the elements the contract names.
    :param expected: a tensor of ``state``'s shape and dtype; only its named elements are read.
    :param what: the step, in words, for the finding.
    """
    mask = _broadcast_mask(named, state)
    before = storage_bytes(state).clone()
    step()
    after_storage = storage_bytes(state)
    wanted_storage = before.clone()
    wanted = _view_of(wanted_storage, state)
    _bits(wanted)[mask] = _bits(expected)[mask]   # the named elements take their expected bits, nothing else
    if torch.equal(after_storage, wanted_storage):
        return
    differs = _bits(_view_of(after_storage, state)) != _bits(wanted)
    if (differs & mask).any():
        at = _first(differs & mask)
        raise OracleFailure(oracle, f"{what}: {int((differs & mask).sum())} of {int(mask.sum())} named elements "
                                    f"do not hold their expected value; first at {at}: got "
                                    f"{state[at].item()!r}, expected {expected[at].item()!r}")
    if differs.any():
        at = _first(differs)
        raise OracleFailure(oracle, f"{what}: changed {int(differs.sum())} elements the contract does not name; "
                                    f"first at {at}: {_view_of(before, state)[at].item()!r} -> {state[at].item()!r}")
    offset = int((after_storage != wanted_storage).nonzero()[0, 0])
    raise OracleFailure(oracle, f"{what}: wrote storage outside the tensor's elements (view padding), first at "
                                f"byte {offset} of {after_storage.numel()}")
