"""The oracles' names, and what an oracle raises when the implementation under judgement breaks its contract."""
from __future__ import annotations

ORACLES = ("parity", "determinism", "batch_invariance", "graph_parity", "write_guards", "stateful", "refusals")
"""Every oracle of the battery (``oracles/battery.py``), which the certification policy asks of every cell."""


class OracleFailure(AssertionError):
    """``oracle`` names the judge (parity, determinism, ...); ``recipe`` is filled in by the runner."""

    def __init__(self, oracle: str, message: str):
        super().__init__(f"[{oracle}] {message}")
        self.oracle = oracle
        self.message = message
        self.recipe: dict | None = None
