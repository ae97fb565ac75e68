"""The oracles' names, and what an oracle raises when the implementation under judgement breaks its contract."""
from __future__ import annotations

from typing import Iterable

NUMERICS = ("parity", "determinism", "batch_invariance", "graph_parity", "write_guards", "stateful")
INTERFACE = ("refusals",)
ORACLES = NUMERICS + INTERFACE
"""Every oracle of the battery (``oracles/battery.py``), which the certification policy asks of every cell:
the numerics (per example) and the interface (the contract's refusal table), reported apart."""
ORACLE_GROUPS = {"numerics": NUMERICS, "interface": INTERFACE}


def parse_oracles(text: str) -> tuple[str, ...]:
    """``numerics``, ``interface`` or a comma list of oracle names (and groups) -> oracle names, in
    battery order; ValueError naming an unknown one."""
    asked = set()
    for word in (part.strip() for part in text.split(",")):
        if word in ORACLE_GROUPS:
            asked.update(ORACLE_GROUPS[word])
        elif word in ORACLES:
            asked.add(word)
        else:
            raise ValueError(f"no oracle or group {word!r}; oracles: {', '.join(ORACLES)}; "
                             f"groups: {', '.join(ORACLE_GROUPS)}")
    return tuple(oracle for oracle in ORACLES if oracle in asked)


def oracles_text(oracles: Iterable[str]) -> str:
    """The shortest ``--oracles`` value naming exactly ``oracles`` (a group's name where one matches)."""
    oracles = tuple(oracles)
    return next((group for group, members in ORACLE_GROUPS.items() if members == oracles), ",".join(oracles))


class OracleFailure(AssertionError):
    """``oracle`` names the judge (parity, determinism, ...); ``recipe`` is filled in by the runner."""

    def __init__(self, oracle: str, message: str):
        super().__init__(f"[{oracle}] {message}")
        self.oracle = oracle
        self.message = message
        self.recipe: dict | None = None
