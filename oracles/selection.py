"""Which oracles a run judges: the groups a user can name, and the ``--oracles`` text of a selection.
Apart from the battery so that a command line can parse ``--oracles`` without importing torch."""
from __future__ import annotations

from typing import Iterable

from oracles.failures import INTERFACE, NUMERICS, ORACLES

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
