"""Outputs are checked against the contract before any comparison (issue 16, item 2).

An output must be exactly a ``torch.Tensor`` of the reference's dtype, shape and device, for bitwise and
band ops alike; a non-finite output where the truth is finite fails; a stock op that overflows no longer
widens the band (it falls back to the floor, and the stock's failure is recorded).
"""
from __future__ import annotations

import pytest
import torch

from ops.catalog import op
from oracles.band import FLOOR_ULP, check_band, row_ulp
from oracles.battery import Implementation, replay
from oracles.bitwise import check_bitwise
from oracles.failures import OracleFailure

pytestmark = [pytest.mark.cpu]
DEVICE = torch.device("cpu")


class _FakesEquality(torch.Tensor):
    """A hostile output: compares equal to anything, whatever it holds."""

    def __eq__(self, other):
        return torch.ones_like(torch.Tensor(self), dtype=torch.bool)

    __hash__ = torch.Tensor.__hash__

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.Tensor.__ne__, torch.Tensor.ne, torch.Tensor.any):
            return {torch.equal: True}.get(func, torch.tensor(False))
        return super().__torch_function__(func, types, args, kwargs or {})


def _first_corner(entry):
    cell = entry.cells[0]
    return cell, entry.strategy_module.corners(cell, DEVICE)[0]


def _judge(name: str, fn) -> str | None:
    """The oracle that rejected ``fn`` on the op's first corner, or None when it passed."""
    entry = op(name)
    cell, recipe = _first_corner(entry)
    result = replay(entry, Implementation(f"control {fn.__name__}", {name: fn}), cell, DEVICE, recipe, entry.strategy_module,
                    graph_parity_skipped="not asked of a control")
    return None if result.failure is None else f"{result.failure.oracle}: {result.failure.message}"


# -- band ops: dtype --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_band_op_returning_a_wider_dtype_is_rejected(dtype):
    reference = op("fp8_gemv").reference

    def fp8_gemv_wide(**kwargs):
        return reference(**kwargs).to(dtype)

    finding = _judge("fp8_gemv", fp8_gemv_wide)
    assert finding is not None and finding.startswith("parity") and f"dtype {dtype}" in finding, finding


def test_the_reference_passes_the_same_band_judge():
    reference = op("fp8_gemv").reference

    def fp8_gemv_reference(**kwargs):
        return reference(**kwargs)

    assert _judge("fp8_gemv", fp8_gemv_reference) is None


# -- tensor subclasses ------------------------------------------------------------------------------
def test_a_subclass_faking_equality_is_rejected_by_bitwise():
    wrong = torch.tensor([1.0, 2.0]).as_subclass(_FakesEquality)
    assert torch.equal(wrong, torch.tensor([5.0, 6.0]))  # the fake works on a naive judge
    with pytest.raises(OracleFailure, match="not exactly torch.Tensor"):
        check_bitwise(wrong, torch.tensor([5.0, 6.0]), "control")


def test_a_subclass_output_is_rejected_in_process_by_the_battery():
    reference = op("greedy_argmax").reference

    def greedy_argmax_subclass(**kwargs):
        return (reference(**kwargs) + 1).as_subclass(_FakesEquality)

    finding = _judge("greedy_argmax", greedy_argmax_subclass)
    assert finding is not None and "not exactly torch.Tensor" in finding, finding


def test_a_band_output_on_another_device_or_shape_is_rejected():
    truth = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    stock = truth.to(torch.bfloat16)
    with pytest.raises(OracleFailure, match="shape"):
        check_band(stock.reshape(2, 1), stock, truth, "control")
    with pytest.raises(OracleFailure, match="device"):
        check_band(stock.to("meta"), stock, truth, "control")


# -- non-finite outputs and overflowing stock ops ---------------------------------------------------
def test_a_non_finite_output_where_the_truth_is_finite_fails_even_if_the_stock_op_agrees():
    truth = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    nan_out = torch.tensor([[1.0, float("nan")]], dtype=torch.bfloat16)
    with pytest.raises(OracleFailure, match="non-finite"):
        check_band(nan_out, nan_out.clone(), truth, "control")


def test_an_overflowing_stock_op_falls_back_to_the_floor():
    truth = torch.tensor([[1.0, 3.0e38]], dtype=torch.float64)
    overflowed_stock = torch.tensor([[1.0, float("inf")]], dtype=torch.float32)
    ulp = row_ulp(truth, torch.float32).item()
    off_by_three_ulp = torch.tensor([[1.0, 3.0e38 + 3 * ulp]], dtype=torch.float32)
    with pytest.raises(OracleFailure, match="left out of E: stock inf ULP"):
        check_band(off_by_three_ulp, overflowed_stock, truth, "control")
    report = check_band(truth.float(), overflowed_stock, truth, "control")
    assert report.allowed_error_ulp == FLOOR_ULP and report.band_set_by is None
    assert report.legitimate_failures and "stock inf ULP (1 non-finite" in report.legitimate_failures