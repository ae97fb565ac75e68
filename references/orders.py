"""Reduction orders a real kernel may use, evaluated in a working precision: the pieces the band ops'
references build their *legitimate implementations* from (``oracles/band.py``: the band is twice the
largest error among them, CONTRACTS.md "Band parity").

A reduction is given as ``term(index) -> tensor [..., len(index)]`` (the terms at those positions of the
reduced axis, in the working dtype) and its length ``n``, so that a long reduction never has to hold
all of its terms at once (a GEMV's ``[M, N, K]`` products do not fit on a device at the cell's sizes).
Each order returns the sum ``[...]`` in the dtype of the terms, rounding after every addition:

- ``sequential``: one accumulator, positions in order (a thread walking K alone).
- ``pairwise``: a tree (a warp's shuffle reduction, a block's shared-memory tree).
- ``split_c`` for c in 2..8: the axis cut into c contiguous chunks, each summed sequentially, the c
  partial sums then added in chunk order (split-K / split-KV: partials merged at the end).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import torch

Term = Callable[[torch.Tensor], torch.Tensor]
SPLITS = tuple(range(2, 9))
# terms fetched by one term() call: a device holds them easily; fewer calls keep the CPU's cost down
TERMS_AT_ONCE = 2**24


def _per_position(term: Term) -> int:
    return max(1, term(torch.zeros(1, dtype=torch.long)).numel())


def split(term: Term, n: int, chunks: int) -> torch.Tensor:
    """c contiguous chunks summed sequentially, all chunks at once, then their partials in order."""
    length = -(-n // chunks)
    if length == 0:
        return term(torch.zeros(0, dtype=torch.long)).sum(-1)
    starts = torch.arange(chunks)[:, None] * length
    steps = max(1, TERMS_AT_ONCE // (_per_position(term) * chunks))
    partials = None
    for first in range(0, length, steps):
        index = starts + torch.arange(first, min(first + steps, length))[None, :]     # [chunks, steps]
        terms = term(index.clamp(max=n - 1).flatten())
        terms = terms.reshape(*terms.shape[:-1], *index.shape)
        zero = torch.zeros((), dtype=terms.dtype, device=terms.device)
        terms = torch.where((index < n).to(terms.device), terms, zero)   # past the end: nothing to add
        for step_terms in terms.movedim(-1, 0).contiguous().unbind(0):
            if partials is None:
                partials = step_terms.clone()
            else:
                partials.add_(step_terms)
    total = partials[..., 0]
    for chunk in range(1, chunks):
        total = total + partials[..., chunk]
    return total


def sequential(term: Term, n: int) -> torch.Tensor:
    return split(term, n, 1)


def _tree(terms: torch.Tensor) -> torch.Tensor:
    while terms.shape[-1] > 1:
        terms = terms[..., 0::2] + terms[..., 1::2]
    return terms[..., 0]


def pairwise(term: Term, n: int) -> torch.Tensor:
    """A tree over the axis padded with zeros to a power of two, neighbours added pairwise level by
    level; fetched a leaf at a time (leaf sums merged as the same tree's upper levels), so the sum is
    the same whatever a fetch holds."""
    if n == 0:
        return term(torch.zeros(0, dtype=torch.long)).sum(-1)
    size = 1 << (n - 1).bit_length()
    leaf = min(size, 1 << max(0, (TERMS_AT_ONCE // _per_position(term)).bit_length() - 1))

    def leaf_sum(first: int) -> torch.Tensor:
        index = torch.arange(first, first + leaf)
        terms = term(index.clamp(max=n - 1))
        zero = torch.zeros((), dtype=terms.dtype, device=terms.device)
        return _tree(torch.where((index < n).to(terms.device), terms, zero))

    stack: list[tuple[int, torch.Tensor]] = []
    for first in range(0, size, leaf):
        level, total = 0, leaf_sum(first)
        while stack and stack[-1][0] == level:
            _, earlier = stack.pop()
            level, total = level + 1, earlier + total
        stack.append((level, total))
    [(_, total)] = stack
    return total


@dataclasses.dataclass(frozen=True)
class Order:
    """One named reduction order: ``reduce(term, n)``."""

    name: str
    reduce: Callable[[Term, int], torch.Tensor]

    def over_last(self, terms: torch.Tensor) -> torch.Tensor:
        """The order applied to the last axis of a tensor already held."""
        return self.reduce(lambda index: terms[..., index.to(terms.device)], terms.shape[-1])


ORDERS = (Order("sequential", sequential), Order("pairwise", pairwise),
          *(Order(f"split_{chunks}", functools.partial(split, chunks=chunks)) for chunks in SPLITS))


def legitimate_orders(implementation: Callable, orders=ORDERS) -> dict[str, Callable]:
    """``{order name: the implementation evaluated in that order}``: ``implementation(*args, order=...,
    **kwargs)`` is the op's contract in its working precision with the named reduction order."""
    return {order.name: functools.partial(implementation, order=order) for order in orders}
