"""Batch invariance: a row's output is bitwise the same alone, in a larger batch, and moved.

``batch_args`` name the arguments whose dim 0 is the batch (an optional one passed as None stays
None); every output is batched on dim 0.
The full batch is compared with each checked row alone (sliced, so a strided view stays strided: the
full batch is the larger batch, and may take another launch path) and with the batch rotated by one
(every row at another position), laid out as the original: same strides, storage offset and padding.
A kernel specializes on layout (Triton on whether a stride divides by 16), and the row-major copy that
advanced indexing makes turned padded rows and fused-projection views contiguous, so the rotated batch
ran another compiled kernel: on the H200 that failed rms_norm_gated and gdn_verify for their layout,
which is not what this oracle judges (a row's bits must not depend on its neighbours).
"""
from __future__ import annotations

from typing import Callable

import torch

from oracles.bitwise import check_bitwise
from oracles.calls import call_each
from oracles.tensors import clone_inputs


def _take_rows(kwargs: dict, batch_args: tuple[str, ...], rows: torch.Tensor | slice) -> dict:
    picked = dict(clone_inputs(kwargs))
    for name in batch_args:
        if kwargs[name] is not None:
            picked[name] = kwargs[name][rows] if isinstance(rows, slice) else _permuted_in_place(kwargs[name], rows)
    return picked


def _permuted_in_place(tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``tensor[rows]`` (a permutation of its rows) in a copy of its storage, viewed with its own size,
    strides and offset: the padding and whatever lies between rows stay as they were."""
    storage = torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(tensor.untyped_storage()).clone()
    permuted = storage.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())
    permuted.copy_(tensor[rows])
    return permuted


def check_batch_invariance(fn: Callable, kwargs: dict, batch_args: tuple[str, ...], full: tuple) -> None:
    """``full``: the outputs of ``fn`` on the whole batch (already computed by the parity oracle).  The
    calls go in one message where ``fn`` runs in another process (:func:`~oracles.calls.call_each`)."""
    batch = kwargs[batch_args[0]].shape[0]
    if batch == 0:
        return
    rows = sorted({0, batch // 2, batch - 1})
    rotated = torch.roll(torch.arange(batch, device=kwargs[batch_args[0]].device), 1)
    calls = [_take_rows(kwargs, batch_args, slice(row, row + 1)) for row in rows]
    results = call_each(fn, calls + [_take_rows(kwargs, batch_args, rotated)])
    expected = [(tuple(out[row:row + 1] for out in full), f"row {row} of {batch} computed alone") for row in rows]
    expected.append((tuple(out[rotated] for out in full), f"batch of {batch} rotated by one row"))
    for result, (wanted, what) in zip(results, expected):
        if isinstance(result, Exception):
            raise result
        check_bitwise(result, wanted, what, oracle="batch_invariance")
