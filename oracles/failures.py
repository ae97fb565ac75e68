"""What an oracle raises when the implementation under judgement breaks its contract."""
from __future__ import annotations


class OracleFailure(AssertionError):
    """``oracle`` names the judge (parity, determinism, ...); ``recipe`` is filled in by the runner."""

    def __init__(self, oracle: str, message: str):
        super().__init__(f"[{oracle}] {message}")
        self.oracle = oracle
        self.message = message
        self.recipe: dict | None = None
