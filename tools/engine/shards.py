"""``--shard I/N``: split a certification run or a test list over N CI runners, deterministically.

Shard ``I`` of ``N`` (1-based: ``--shard 1/4`` .. ``--shard 4/4``) holds every id whose stable digest
(``ops.catalog.stable_seed``, never Python's salted ``hash``) is ``I - 1`` modulo ``N``: the same on
every machine and run, and an id keeps its shard when others are added.  Certification ids are
``(op, cell)``; test ids are pytest node ids.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Shard:
    index: int   # 1..count
    count: int

    def holds(self, *key: object) -> bool:
        from ops.catalog import stable_seed  # late: parsing --shard needs no torch

        return stable_seed("shard", *key) % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"I/N"`` with 1 <= I <= N, else ValueError naming the fix."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise ValueError(f"--shard {text!r}: expected I/N, e.g. 1/4")
    index, count = int(match[1]), int(match[2])
    if not 1 <= index <= count:
        raise ValueError(f"--shard {text!r}: I must be 1..N (shards are numbered from 1)")
    return Shard(index, count)


def select(items: Iterable[T], shard: Shard | None, key: Callable[[T], tuple]) -> list[T]:
    """The items of ``shard`` (all of them without one), in their order."""
    return [item for item in items if shard is None or shard.holds(*key(item))]


def partition_problems(ids: list[T], count: int, selected: Callable[[Shard], list[T]]) -> list[str]:
    """How shards ``1/count .. count/count`` (as ``selected`` chooses them) fail to hold every id once."""
    holders = {i: [] for i in ids}
    problems = []
    for index in range(1, count + 1):
        shard = Shard(index, count)
        for item in selected(shard):
            if item not in holders:
                problems.append(f"shard {shard} holds {item!r}, which is not an id of the run")
            else:
                holders[item].append(str(shard))
    problems += [f"{item!r} is in no shard" for item, shards in holders.items() if not shards]
    problems += [f"{item!r} is in shards {', '.join(shards)}" for item, shards in holders.items() if len(shards) > 1]
    return problems
