"""Rows every op's table of refused inputs repeats, made from one legal call (``Refusal`` rows).

``call(device, **override)`` returns the keyword arguments of a legal call with ``override`` applied;
each helper returns the rows that break one argument in the usual ways.  An op's ``REFUSALS`` is the
concatenation of these and its own rows (the ones only its contract states).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from references.validation import Refusal

Call = Callable[..., dict]


def tensor_of(device, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(tuple(shape), device=device).to(dtype)


def tensor_refusals(call: Call, argument: str, shape: Sequence[int], dtype: torch.dtype, clause: str, *,
                    other_dtype: torch.dtype = torch.float32, like: str | None = None) -> tuple[Refusal, ...]:
    """Rows for a tensor ``argument`` of one rank and dtype (its legal ``shape`` in ``call``): one dim
    fewer, one more, ``other_dtype``, a nested list instead of a tensor, and, when its shape must match the
    argument ``like``, a last dim one longer (the message may name either)."""
    shape = tuple(shape)
    rank = len(shape)

    def with_value(make):
        return lambda device: call(device, **{argument: make(device)})

    rows = [
        Refusal(f"{rank - 1}-D {argument}", with_value(lambda d: tensor_of(d, shape[1:], dtype)),
                (argument,) if like is None else (argument, like), clause=clause),
        Refusal(f"{rank + 1}-D {argument}", with_value(lambda d: tensor_of(d, (2, *shape), dtype)),
                (argument,) if like is None else (argument, like), clause=clause),
        Refusal(f"{str(other_dtype).removeprefix('torch.')} {argument}",
                with_value(lambda d: tensor_of(d, shape, other_dtype)), argument, TypeError, clause=clause),
        Refusal(f"{argument} not a tensor", with_value(lambda d: tensor_of("cpu", shape, torch.float32).tolist()),
                argument, TypeError, clause="non-tensor"),
    ]
    if like is not None and rank:
        rows.append(Refusal(f"{argument} of another shape than {like}",
                            with_value(lambda d: tensor_of(d, (*shape[:-1], shape[-1] + 1), dtype)),
                            (argument, like), clause=clause))
    return tuple(rows)
