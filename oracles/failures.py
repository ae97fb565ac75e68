"""The oracles' names, and what an oracle raises when the implementation under judgement breaks its contract."""
from __future__ import annotations

NUMERICS = ("parity", "determinism", "batch_invariance", "graph_parity", "write_guards", "stateful")
INTERFACE = ("refusals",)
ORACLES = NUMERICS + INTERFACE
"""Every oracle of the battery (``oracles/battery.py``), which the certification policy asks of every cell:
the numerics (per example) and the interface (the contract's refusal table), reported apart."""


class OracleFailure(AssertionError):
    """``oracle`` names the judge (parity, determinism, ...); ``recipe`` is filled in by the runner."""

    def __init__(self, oracle: str, message: str):
        super().__init__(f"[{oracle}] {message}")
        self.oracle = oracle
        self.message = message
        self.recipe: dict | None = None
