"""A band op's legitimate implementations besides the stock op (CONTRACTS.md "Band parity": the reference in
each of the other reduction orders a real kernel may use), and how the judge gets their outputs: one call an
order, or one call for all of them where they share work (``oracles/band.py`` then sets the band from them)."""
from __future__ import annotations

from typing import Callable, Iterator, Mapping

from oracles.determinism import run_on_copy
from oracles.tensors import as_outputs, clone_inputs


class LegitimateOrders(Mapping[str, Callable]):
    """A band op's legitimate implementations besides the stock op, by name (the reference in the other
    reduction orders a real kernel may use), each a callable of the op's signature.  ``together``, where
    given, computes them all in one call (``together(**kwargs) -> {name: outputs}``), sharing what they have
    in common (the inputs gathered, the scores): the judge then makes that one call on one copy of the
    inputs (:func:`legitimate_outputs`)."""

    def __init__(self, orders: Mapping[str, Callable], together: Callable | None = None):
        self._orders, self.together = dict(orders), together

    @classmethod
    def of(cls, orders: Mapping[str, Callable]) -> "LegitimateOrders":
        return orders if isinstance(orders, cls) else cls(orders)

    @classmethod
    def computed_together(cls, implementation: Callable, names) -> "LegitimateOrders":
        """The orders ``names`` of ``implementation(*args, **kwargs) -> {name: outputs}``; asked for one, it
        computes them all and returns that one's."""
        def one(name: str) -> Callable:
            return lambda *args, **kwargs: implementation(*args, **kwargs)[name]
        return cls({name: one(name) for name in names}, implementation)

    def relabelled(self, wrap: Callable[[str | None, Callable], Callable]) -> "LegitimateOrders":
        """Each callable replaced by ``wrap(its name, it)``, and ``together`` by ``wrap(None, together)``."""
        return LegitimateOrders({name: wrap(name, order) for name, order in self._orders.items()},
                                self.together and wrap(None, self.together))

    def __getitem__(self, name: str) -> Callable:
        return self._orders[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._orders)

    def __len__(self) -> int:
        return len(self._orders)


def legitimate_outputs(orders: Mapping[str, Callable], kwargs: dict, in_place: tuple[str, ...]) -> dict[str, tuple]:
    """Every legitimate order's outputs on ``kwargs`` (each followed by the in-place arguments after it), on
    fresh copies: by one call of ``together`` where the orders have it and write nothing in place, else one
    call an order."""
    together = getattr(orders, "together", None)
    if together is None or in_place:
        return {name: run_on_copy(order, kwargs, in_place) for name, order in orders.items()}
    outputs = together(**clone_inputs(kwargs))
    if set(outputs) != set(orders):
        raise ValueError(f"orders: computed together they gave {sorted(outputs)}, not {sorted(orders)}")
    return {name: as_outputs(outputs[name]) for name in orders}
