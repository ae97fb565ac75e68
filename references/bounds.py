"""The bounds a cell puts on one parameter of an op's input: an integer range or a set of choices.

The catalog declares cells with them (``ops.catalog.Cell``) and the input strategies draw inside them
(``references/strategies/shapes.py``); they sit here, below both, so a strategy needs no catalog.
"""
from __future__ import annotations

import dataclasses
import hashlib


@dataclasses.dataclass(frozen=True)
class Span:
    """An inclusive integer range of one cell dimension."""

    lo: int
    hi: int

    def __post_init__(self):
        if self.lo > self.hi:
            raise ValueError(f"Span: lo={self.lo} is above hi={self.hi}")

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.lo <= value <= self.hi


@dataclasses.dataclass(frozen=True)
class OneOf:
    """A finite set of choices (dtypes, flags, sizes) of one cell dimension."""

    choices: tuple

    def __contains__(self, value: object) -> bool:
        return value in self.choices


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from a stable digest of ``parts`` (never Python's salted ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
