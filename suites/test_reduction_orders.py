"""references/orders.py: each named order adds in exactly the order its name says, in float32.

Checked against plain Python loops over numpy float32 scalars (one rounding per addition, nothing
reordered), on lengths that are not multiples of any chunk count or power of two, and on terms whose
float32 sums differ between orders (so an order that silently falls back to another one is caught).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from references import orders

pytestmark = [pytest.mark.cpu]


def _terms(n: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    scale = torch.exp2(torch.randint(-12, 13, (3, n), generator=generator).float())
    return torch.randn(3, n, generator=generator) * scale


def _sequential(values) -> np.float32:
    total = np.float32(values[0])
    for value in values[1:]:
        total = np.float32(total + np.float32(value))
    return total


def _tree(values) -> np.float32:
    size = 1 << (len(values) - 1).bit_length()
    level = [np.float32(v) for v in values] + [np.float32(0)] * (size - len(values))
    while len(level) > 1:
        level = [np.float32(level[i] + level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def _split(values, chunks: int) -> np.float32:
    length = -(-len(values) // chunks)
    partials = [_sequential(values[i:i + length]) for i in range(0, len(values), length)]
    return _sequential(partials)


@pytest.mark.parametrize("n", [1, 7, 100, 257])
def test_each_order_adds_as_named(n):
    terms = _terms(n)
    by_name = {order.name: order.over_last(terms) for order in orders.ORDERS}
    assert set(by_name) == {"sequential", "pairwise", *(f"split_{c}" for c in orders.SPLITS)}
    for row in range(terms.shape[0]):
        values = terms[row].numpy()
        assert by_name["sequential"][row].item() == _sequential(values)
        assert by_name["pairwise"][row].item() == _tree(values)
        for chunks in orders.SPLITS:
            assert by_name[f"split_{chunks}"][row].item() == _split(values, chunks), chunks


def test_orders_differ_on_terms_that_cancel():
    """The control: on long sums of mixed scales the orders really give different float32 sums."""
    terms = _terms(4096, seed=1)
    sums = {order.name: order.over_last(terms)[0].item() for order in orders.ORDERS}
    assert len(set(sums.values())) > 3, sums


def test_a_tree_wider_than_one_fetch_merges_leaves_as_one_tree(monkeypatch):
    """Fetching fewer terms at once changes how many term() calls a tree takes, never its sum."""
    terms = _terms(1000, seed=2)
    whole = orders.pairwise(lambda index: terms[..., index], 1000)
    monkeypatch.setattr(orders, "TERMS_AT_ONCE", 3 * 64)
    assert torch.equal(orders.pairwise(lambda index: terms[..., index], 1000), whole)
    monkeypatch.setattr(orders, "TERMS_AT_ONCE", 3 * 5)
    assert torch.equal(orders.split(lambda index: terms[..., index], 1000, 3),
                       torch.tensor([_split(terms[r].numpy(), 3) for r in range(3)]))


def test_an_empty_reduction_is_zero():
    terms = torch.zeros(3, 0)
    for order in orders.ORDERS:
        assert torch.equal(order.over_last(terms), torch.zeros(3))
