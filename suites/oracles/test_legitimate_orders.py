"""``oracles.legitimate_orders``: a band op's legitimate implementations, computed together where they
share work, as the judge asks for them (``legitimate_outputs``)."""
from __future__ import annotations

import pytest
import torch

from oracles.legitimate_orders import LegitimateOrders, legitimate_outputs

pytestmark = pytest.mark.cpu


def _row_sums(calls: list):
    """A toy op's orders: the row sum forwards and backwards, computed together (``calls`` records each
    call); the together call writes its copy of x, which must not reach the caller's."""
    def together(x):
        calls.append("together")
        forwards, backwards = x.sum(dim=-1), x.flip(-1).sum(dim=-1)
        x.zero_()
        return {"forwards": forwards, "backwards": backwards}
    return LegitimateOrders.computed_together(together, ("forwards", "backwards"))


def test_orders_computed_together_are_one_call_on_a_copy():
    calls, x = [], torch.arange(12.0).view(3, 4)
    outputs = legitimate_outputs(_row_sums(calls), {"x": x}, ())
    assert calls == ["together"]
    assert torch.equal(outputs["forwards"][0], torch.tensor([6.0, 22.0, 38.0]))
    assert set(outputs) == {"forwards", "backwards"} and torch.equal(x, torch.arange(12.0).view(3, 4))


def test_orders_of_an_in_place_op_run_one_at_a_time_each_on_its_copy():
    """In place, each order's arguments after its call are its own outputs: no sharing."""
    def fill(value):
        def order(x):
            x.fill_(value)
        return order
    orders = LegitimateOrders({"ones": fill(1.0), "twos": fill(2.0)}, together=lambda x: pytest.fail("shared"))
    outputs = legitimate_outputs(orders, {"x": torch.zeros(2)}, ("x",))
    assert torch.equal(outputs["ones"][0], torch.ones(2)) and torch.equal(outputs["twos"][0], torch.full((2,), 2.0))


def test_orders_without_a_together_call_run_one_at_a_time():
    orders = {"forwards": lambda x: x.sum(dim=-1)}
    assert torch.equal(legitimate_outputs(orders, {"x": torch.ones(2, 3)}, ())["forwards"][0], torch.full((2,), 3.0))


def test_a_together_call_that_answers_other_orders_is_refused():
    """The judge's own defect, said as one (the battery reports it as an internal error), never a band set by
    fewer implementations than the reference names."""
    orders = LegitimateOrders({"forwards": lambda x: x, "backwards": lambda x: x},
                              together=lambda x: {"forwards": x.sum(dim=-1)})
    with pytest.raises(ValueError, match="orders: computed together they gave"):
        legitimate_outputs(orders, {"x": torch.ones(2, 3)}, ())


def test_relabelled_wraps_every_order_and_the_together_call():
    calls = []
    wrapped = _row_sums(calls).relabelled(lambda name, call: lambda **kwargs: (name, call(**kwargs)))
    assert wrapped.together(x=torch.ones(1, 2))[0] is None
    assert wrapped["backwards"](x=torch.ones(1, 2))[0] == "backwards"
    assert calls == ["together", "together"]
