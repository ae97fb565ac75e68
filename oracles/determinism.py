"""Determinism: the same input twice gives bitwise-equal outputs (and equal in-place writes)."""
from __future__ import annotations

from typing import Callable

from oracles.bitwise import check_bitwise
from oracles.tensors import as_outputs, clone_inputs


def run_on_copy(fn: Callable, kwargs: dict, in_place: tuple[str, ...]) -> tuple:
    """Call ``fn`` on fresh copies; return its outputs followed by the in-place arguments after it."""
    copies = clone_inputs(kwargs)
    return as_outputs(fn(**copies)) + tuple(copies[name] for name in in_place)


def check_determinism(fn: Callable, kwargs: dict, in_place: tuple[str, ...], first: tuple) -> None:
    """``first``: ``run_on_copy(fn, kwargs, in_place)`` from an earlier call (the parity oracle's)."""
    second = run_on_copy(fn, kwargs, in_place)
    check_bitwise(second, first, "second call on the same input", oracle="determinism")
