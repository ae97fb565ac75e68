"""Determinism: the same input twice gives bitwise-equal outputs (and equal in-place writes)."""
from __future__ import annotations

from typing import Callable

from oracles.bitwise import check_bitwise
from oracles.calls import call_each
from oracles.tensors import as_outputs, clone_inputs


def run_on_copies(fn: Callable, kwargs: dict, in_place: tuple[str, ...], times: int) -> list:
    """``times`` calls of ``fn``, each on fresh copies (one message where ``fn`` runs in another process):
    each one's outputs followed by the in-place arguments after it, or the exception it raised (the last
    item then: the calls after it do not run)."""
    copies = [clone_inputs(kwargs) for _ in range(times)]
    return [result if isinstance(result, Exception) else result + tuple(inputs[name] for name in in_place)
            for result, inputs in zip(call_each(fn, copies), copies)]


def run_on_copy(fn: Callable, kwargs: dict, in_place: tuple[str, ...]) -> tuple:
    """Call ``fn`` on fresh copies; return its outputs followed by the in-place arguments after it."""
    copies = clone_inputs(kwargs)
    return as_outputs(fn(**copies)) + tuple(copies[name] for name in in_place)


def check_determinism(fn: Callable, kwargs: dict, in_place: tuple[str, ...], first: tuple,
                      second: tuple | Exception | None = None) -> None:
    """``first``: ``run_on_copy(fn, kwargs, in_place)`` from an earlier call (the parity oracle's);
    ``second``: the second call's, where it ran beside the first (:func:`run_on_copies`), else it runs here."""
    second = run_on_copy(fn, kwargs, in_place) if second is None else second
    if isinstance(second, Exception):
        raise second
    check_bitwise(second, first, "second call on the same input", oracle="determinism")
