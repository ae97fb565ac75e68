"""The parity oracle on one input, apart from the battery: the runtime canary of a serving process
(``ops/canary.py``) judges by it without the battery's Hypothesis machinery."""
from __future__ import annotations

from oracles.band import check_band
from oracles.band_limit import DEFAULT_LIMIT
from oracles.bitwise import check_bitwise
from oracles.determinism import run_on_copy
from oracles.failures import OracleFailure
from oracles.findings import band_detail, bitwise_detail
from oracles.legitimate_orders import legitimate_outputs
from oracles.tensors import as_outputs, clone_inputs


def check_parity(entry, kwargs: dict, actual: tuple, in_place: tuple[str, ...], stock: tuple | None,
                 explain=None, expected: tuple | None = None, truth: tuple | None = None,
                 orders: dict | None = None):
    """The parity oracle on one input: raise OracleFailure unless ``actual`` (outputs on ``kwargs``, then the
    in-place arguments after the call) meets the op's parity class — bitwise: the reference's bits; band:
    within the band of ``stock`` (the stock op's outputs; None: the reference's) against float64 truth.
    Returns the reference's outputs (``expected``, and for a band op ``truth`` and ``orders``, the outputs of
    the reference's legitimate reduction orders: already computed on these inputs) and, for a band op, the
    band report (its band set by the stock op and those orders, within the entry's limit).  A finding carries the lines that
    say which elements differ and what decides them (``oracles/findings.py``; ``explain``: the op's own
    words for an element, from its strategy).  The battery and the runtime canary (``ops/canary.py``)
    judge by it alike."""
    expected = run_on_copy(entry.reference, kwargs, in_place) if expected is None else expected
    if entry.parity.value == "bitwise":
        try:
            check_bitwise(actual, expected, "vs the contract's reference")
        except OracleFailure as failure:
            raise _detailed(failure, bitwise_detail(actual, expected, kwargs, explain)) from None
        return expected, None
    truth = as_outputs(entry.truth(**clone_inputs(kwargs))) if truth is None else truth
    if orders is None:
        orders = legitimate_outputs(entry.legitimate_orders, kwargs, in_place)
    try:
        return expected, check_band(actual, stock if stock is not None else expected, truth, "vs float64 truth",
                                    expected=expected, orders=orders, limit=entry.band_limit or DEFAULT_LIMIT)
    except OracleFailure as failure:
        raise _detailed(failure, band_detail(actual, stock, truth, kwargs, explain)) from None


def _detailed(failure: OracleFailure, detail: str) -> OracleFailure:
    """``failure`` with the lines that say which elements differ and what decides them."""
    return OracleFailure(failure.oracle, failure.message + ("\n" + detail if detail else ""))
