"""The widest band an op's inputs may need before the band judges nothing (CONTRACTS.md "Band parity"): a
reference declares its own with the reason.  Apart from the band oracle (``oracles/band.py``) so that a
reference's certificate covers the limit it declares, not the oracle's code."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class BandLimit:
    """The widest band an op's inputs may need before the band judges nothing, with its reason."""

    ulp: float
    reason: str


DEFAULT_LIMIT = BandLimit(8.0, "the contract's default: 8 output ULP of the row scale")
