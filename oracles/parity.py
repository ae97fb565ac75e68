"""The parity oracle on one input, apart from the battery: the runtime canary of a serving process
(``ops/canary.py``) judges by it without the battery's Hypothesis machinery."""
from __future__ import annotations

from oracles.band import check_band
from oracles.bitwise import check_bitwise
from oracles.determinism import run_on_copy
from oracles.tensors import as_outputs, clone_inputs


def check_parity(entry, kwargs: dict, actual: tuple, in_place: tuple[str, ...], stock: tuple | None):
    """The parity oracle on one input: raise OracleFailure unless ``actual`` (outputs on ``kwargs``, then the
    in-place arguments after the call) meets the op's parity class — bitwise: the reference's bits; band:
    within the band of ``stock`` (the stock op's outputs; None: the reference's) against float64 truth.
    Returns the reference's outputs and, for a band op, the band report.  The battery and the runtime
    canary (``ops/canary.py``) judge by it alike."""
    expected = run_on_copy(entry.reference, kwargs, in_place)
    if entry.parity.value == "bitwise":
        check_bitwise(actual, expected, "vs the contract's reference")
        return expected, None
    truth = as_outputs(entry.truth(**clone_inputs(kwargs)))
    return expected, check_band(actual, stock if stock is not None else expected, truth, "vs float64 truth",
                                expected=expected)
