"""Every oracle against a deliberately wrong implementation it must reject, and a right one it accepts.

The oracles know nothing about ops, so the controls use toy functions: a row maximum, a row sum, a
copy, an in-place row fill.  Each wrong one breaks exactly the property its oracle judges.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import oracles.band
from oracles.band import band_reports, check_band, output_errors, row_ulp
from oracles.band_limit import BandLimit
from oracles.batch_invariance import check_batch_invariance
from oracles.bitwise import check_bitwise
from oracles.determinism import check_determinism, run_on_copy
from oracles.failures import OracleFailure
from oracles.graph import check_graph_parity
from oracles.refusals import check_refusals
from oracles.stateful import check_properties
from oracles.write_guards import check_write_guards
from references.orders import ORDERS
from references.validation import Refusal, require_ndim
from suites.certification import machine_device

pytestmark = [pytest.mark.cpu, pytest.mark.sm90, pytest.mark.sm100, pytest.mark.sm103, pytest.mark.sm107]
DEVICE = machine_device()


def _rows(rows=8, cols=37, seed=0):
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    return torch.randn(rows, cols, generator=generator, device=DEVICE)


# -- bitwise ------------------------------------------------------------------------------------
@pytest.mark.parametrize("actual, expected", [
    (torch.tensor([-0.0]), torch.tensor([0.0])),                                  # sign of zero
    (torch.tensor([1], dtype=torch.int32), torch.tensor([1], dtype=torch.int64)),  # dtype
    (torch.tensor([1.0, 2.0]), torch.tensor([[1.0, 2.0]])),                        # shape
    (torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32),            # NaN payload
     torch.tensor([0x7FC00000], dtype=torch.int32).view(torch.float32)),
])
def test_bitwise_rejects(actual, expected):
    with pytest.raises(OracleFailure, match="parity"):
        check_bitwise(actual, expected, "control")


def test_bitwise_accepts_equal_bits_including_nan():
    value = torch.tensor([float("nan"), -0.0, 1.5])
    check_bitwise(value.clone(), value, "control")


# -- band ---------------------------------------------------------------------------------------
def _sum_truth(x):
    return x.double().sum(dim=-1, keepdim=True)


def _sum_stock(x):
    return x.sum(dim=-1, keepdim=True, dtype=torch.float32).to(torch.bfloat16)


def _sum_in_bf16(x):
    """Wrong: accumulates in bf16, one rounding per term."""
    total = torch.zeros(x.shape[0], 1, dtype=torch.bfloat16, device=x.device)
    for column in range(x.shape[1]):
        total = total + x[:, column:column + 1].to(torch.bfloat16)
    return total


def test_band_rejects_low_precision_accumulation_and_reports_both_errors():
    x = (_rows(64, 512) + 3).to(torch.bfloat16)
    with pytest.raises(OracleFailure, match="stock op"):
        check_band(_sum_in_bf16(x), _sum_stock(x), _sum_truth(x), "control")
    [report] = band_reports(_sum_in_bf16(x), _sum_stock(x), _sum_truth(x))
    assert report.kernel_error_ulp > report.allowed_error_ulp >= 2 * report.stock_error_ulp


def test_band_judges_each_output_against_its_own_stock_error():
    """A loose stock op on one output (here an fp32 output the stock op gets 1000 ULPs wrong) must not
    widen the band of another output."""
    x = (_rows(64, 512) + 3).to(torch.bfloat16)
    truth = (_sum_truth(x), _sum_truth(x))
    loose_stock_second = _sum_truth(x).float() * (1 + 1000 * 2.0 ** -23)
    with pytest.raises(OracleFailure, match="output 0"):
        check_band((_sum_in_bf16(x), _sum_truth(x).float()), (_sum_stock(x), loose_stock_second), truth, "control")


def test_band_accepts_fp32_accumulation():
    x = (_rows(64, 512) + 3).to(torch.bfloat16)
    report = check_band(_sum_stock(x), _sum_stock(x), _sum_truth(x), "control")
    assert report.kernel_error_ulp <= 0.5 and report.allowed_error_ulp == 1.0


def test_band_needs_exact_match_where_truth_is_infinite():
    truth = torch.tensor([[-torch.inf, 1.0]], dtype=torch.float64)
    with pytest.raises(OracleFailure):
        check_band(torch.tensor([[-1e30, 1.0]]), truth.float(), truth, "control")


def test_band_leaves_an_output_whose_truth_is_none_to_the_properties_and_still_judges_the_rest():
    x = (_rows(64, 512) + 3).to(torch.bfloat16)
    unjudged = torch.tensor([123.0])  # far from anything: only a property could judge it
    check_band((_sum_stock(x), unjudged), (_sum_stock(x), torch.tensor([0.0])), (_sum_truth(x), None), "control")
    with pytest.raises(OracleFailure, match="stock op"):
        check_band((_sum_in_bf16(x), unjudged), (_sum_stock(x), unjudged), (_sum_truth(x), None), "control")


def _ulps_off(truth: torch.Tensor, ulps: float) -> torch.Tensor:
    """``ulps`` row-scale ULPs above a truth held exactly in bf16 (whole and half ULPs stay exact)."""
    return (truth + ulps * row_ulp(truth, torch.bfloat16)).to(torch.bfloat16)


def _bf16_truth(x: torch.Tensor) -> torch.Tensor:
    """A float64 truth each of whose values is a bf16 (per row ``[rows, 1]``: one element, its own scale)."""
    return _sum_stock(x).double()


def test_band_non_finite_truth_is_matched_exactly():
    """NaN truth takes any NaN (a NaN-propagating op passes), +-inf the same infinity; an op returning 0
    for NaN, or the other infinity, fails, whatever the legitimate implementations say."""
    truth = torch.tensor([[float("nan"), -torch.inf, float("nan"), 2.0, torch.inf]], dtype=torch.float64)
    other_nan = torch.tensor([0x7FC1], dtype=torch.int16).view(torch.bfloat16).item()   # another NaN payload
    propagated = torch.tensor([[other_nan, -torch.inf, float("nan"), 2.0, torch.inf]], dtype=torch.bfloat16)
    report = check_band(propagated, propagated.clone(), truth, "control")
    assert report.kernel_error_ulp == 0 and report.passed
    zero_for_nan = propagated.clone()
    zero_for_nan[0, 0] = 0.0
    with pytest.raises(OracleFailure, match="truth is NaN or"):
        check_band(zero_for_nan, propagated, truth, "control")
    wrong_infinity = propagated.clone()
    wrong_infinity[0, 4] = -torch.inf
    with pytest.raises(OracleFailure, match="truth is NaN or"):
        check_band(wrong_infinity, propagated, truth, "control")


def test_band_a_legitimate_order_that_misses_non_finite_truth_is_left_out_of_e():
    truth = torch.tensor([[float("nan"), 2.0]], dtype=torch.float64)
    exact = truth.to(torch.bfloat16)
    missed = torch.tensor([[0.0, 2.0]], dtype=torch.bfloat16)
    report = check_band(exact, exact, truth, "control", orders={"sequential": missed})
    assert report.band_set_by == "stock" and "sequential" in report.legitimate_failures


def test_band_is_twice_the_worst_legitimate_order_which_it_names():
    """A split-K kernel 2 ULP off passes when the split order itself is 1 ULP off (band 2); against a
    stock op alone (exact here) it fails the floor of 1 ULP."""
    x = (_rows(64, 512) + 3).to(torch.bfloat16)
    truth = _bf16_truth(x)
    orders = {"sequential": _ulps_off(truth, 0.0), "split_4": _ulps_off(truth, 1.0)}
    report = check_band(_ulps_off(truth, 2.0), _sum_stock(x), truth, "control", orders=orders)
    assert report.band_set_by == "split_4" and report.legitimate_error_ulp == 1.0
    assert report.allowed_error_ulp == 2.0 and report.kernel_error_ulp == 2.0
    with pytest.raises(OracleFailure, match="exceeds the band 1 ULP"):
        check_band(_ulps_off(truth, 2.0), _sum_stock(x), truth, "control")


def test_band_rejects_three_ulp_off_where_the_legitimate_orders_agree_within_one():
    x = (_rows(64, 512) + 3).to(torch.bfloat16)
    truth = _sum_truth(x)
    orders = {order.name: order.over_last(x.float()).to(torch.bfloat16)[:, None] for order in ORDERS}
    report = check_band(_sum_stock(x), _sum_stock(x), truth, "control", orders=orders)
    assert report.legitimate_error_ulp <= 1.0
    with pytest.raises(OracleFailure, match=r"error 3(\.\d+)? ULP exceeds the band 1 ULP"):
        check_band(_ulps_off(truth, 3.0), _sum_stock(x), truth, "control", orders=orders)


def test_band_vacuous_fails_closed_even_for_an_exact_output():
    """A legitimate implementation 5 ULP off makes a 10-ULP band, beyond the default limit of 8: the input
    judges nothing, so the exact answer fails too; a declared wider limit (with its reason) judges it."""
    x = (_rows(64, 512) + 3).to(torch.bfloat16)
    truth = _bf16_truth(x)
    far = {"split_2": _ulps_off(truth, 5.0)}
    with pytest.raises(OracleFailure, match=r"band vacuous: E = 5 ULP \(set by split_2\).*limit 8 ULP"):
        check_band(truth.to(torch.bfloat16), _sum_stock(x), truth, "control", orders=far)
    [report] = band_reports(truth.to(torch.bfloat16), _sum_stock(x), truth, far)
    assert report.vacuous and not report.passed
    wider = BandLimit(16.0, "control: a recurrence that rounds its state each step")
    assert check_band(truth.to(torch.bfloat16), _sum_stock(x), truth, "control", orders=far, limit=wider).passed


def test_errors_of_many_outputs_are_measured_at_once_each_in_its_own_dtype():
    """``output_errors``: one pass over every implementation's answer for an output, each error in ULPs of its
    own dtype at the row scale, non-finite answers and missed non-finite truth counted per answer."""
    truth = torch.tensor([[1.0, 2.0, float("nan"), float("inf")]], dtype=torch.float64)
    exact = truth.to(torch.float32)
    bf16_one_off = torch.tensor([[1.0, 2.0 + 2.0 ** -6, float("nan"), float("inf")]]).to(torch.bfloat16)
    fp32_half_off = torch.tensor([[1.0 + 2.0 ** -23, 2.0, float("nan"), float("inf")]])
    nan_where_finite = torch.tensor([[float("nan"), 2.0, float("nan"), float("inf")]])
    misses_inf = torch.tensor([[1.0, 2.0, float("nan"), 7.0]])
    errors = output_errors([exact, bf16_one_off, fp32_half_off, nan_where_finite, misses_inf], truth)
    assert [e.error_ulp for e in errors[:3]] == [0.0, 1.0, 0.5]   # the row scale 2: a bf16 ULP 2^-6, fp32 2^-22
    assert (errors[3].error_ulp, errors[3].non_finite, errors[3].missed_non_finite) == (math.inf, 1, 0)
    assert (errors[4].error_ulp, errors[4].non_finite, errors[4].missed_non_finite) == (0.0, 0, 1)
    assert [e.usable for e in errors] == [True, True, True, False, False]
    assert errors[2].relative_rms == pytest.approx(2.0 ** -23 / math.sqrt(5.0))
    assert output_errors([exact[:, :0]], truth[:, :0])[0].error_ulp == 0.0
    # outputs too large to stack at once go in passes (STACKED_BYTES): the same figures, each in its place
    # (a pass that lost or shuffled an answer would move the nan and the missed infinity)
    passes = [exact, bf16_one_off, fp32_half_off, nan_where_finite, misses_inf]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oracles.band, "STACKED_BYTES", truth.numel() * 8)   # one output a pass
        assert output_errors(passes, truth) == errors


def test_an_output_too_large_for_one_pass_is_measured_a_block_of_rows_at_a_time():
    """Past STACKED_BYTES an output goes alone, in blocks of rows (each row's ULP is its own row's): the same
    worst error and counts as in one pass, the norms combined to the same relative RMS. Every row holds its own
    mark (a worst error, a non-finite answer, a missed infinity), so a block lost or taken twice moves a figure."""
    rows = torch.tensor([[1.0, 2.0], [4.0, 8.0], [float("inf"), 1.0], [16.0, float("nan")], [32.0, 64.0]],
                        dtype=torch.float64)
    truth = torch.stack([rows, rows * 3])                       # [2, 5, 2]: leading dims flattened into rows
    answer = truth.to(torch.float32).clone()
    answer[0, 0, 1] += 2.0 ** -22                               # 1 fp32 ULP of row scale 2
    answer[1, 1, 0] = float("inf")                              # non-finite where the truth is finite
    answer[1, 4, 1] += 3 * 2.0 ** -15                           # 6 fp32 ULP of row scale 192: the worst finite
    answer[0, 2, 0] = 7.0                                       # a missed infinity
    strided = torch.empty(2, 5, 4)[:, :, ::2]                   # a legal output with no flat view: copied once
    strided.copy_(answer)
    whole = output_errors([answer, strided, truth.to(torch.bfloat16)], truth)
    assert (whole[0].error_ulp, whole[0].non_finite, whole[0].missed_non_finite) == (math.inf, 1, 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oracles.band, "STACKED_BYTES", 2 * 8)    # one row of two elements a pass
        assert oracles.band._passes(3, 10, 2)[:2] == [(slice(0, 1), slice(0, 1)), (slice(0, 1), slice(1, 2))]
        blocked = output_errors([answer, strided, truth.to(torch.bfloat16)], truth)
    for one, other in zip(whole, blocked):
        assert (one.error_ulp, one.non_finite, one.missed_non_finite) == \
            (other.error_ulp, other.non_finite, other.missed_non_finite)
        assert one.relative_rms == pytest.approx(other.relative_rms, rel=1e-15)
    finite_answer = answer.clone()
    finite_answer[1, 1, 0] = 12.0                               # the truth there
    finite_answer[0, 2, 0] = float("inf")
    whole = output_errors([finite_answer], truth)[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oracles.band, "STACKED_BYTES", 2 * 8)
        blocked = output_errors([finite_answer], truth)[0]
    assert (blocked.error_ulp, blocked.non_finite, blocked.missed_non_finite) == (6.0, 0, 0)   # the last block's
    assert blocked.relative_rms == pytest.approx(whole.relative_rms, rel=1e-15) and whole.relative_rms > 0

def test_row_ulp_is_one_unit_of_the_row_scale():
    assert row_ulp(torch.tensor([[1.0, -3.0]], dtype=torch.float64), torch.bfloat16).item() == 2.0 ** -6


# -- determinism --------------------------------------------------------------------------------
def test_determinism_rejects_a_call_counter_in_the_result():
    calls = itertools.count()

    def drifting(x):
        return x.amax(dim=1) + next(calls) * 2.0 ** -20

    x = _rows()
    with pytest.raises(OracleFailure, match="determinism"):
        check_determinism(drifting, {"x": x}, (), first=run_on_copy(drifting, {"x": x}, ()))


def test_determinism_accepts_a_pure_function():
    x = _rows()
    check_determinism(torch.amax, {"input": x, "dim": 1}, (), first=run_on_copy(torch.amax, {"input": x, "dim": 1}, ()))


# -- batch invariance ---------------------------------------------------------------------------
def _sum_split_by_batch(x):
    """Wrong: splits the columns into as many chunks as there are rows, so a row's rounding depends
    on the batch size (each answer is still a fine fp32 sum: only batch invariance sees it)."""
    chunks = torch.tensor_split(x, max(1, x.shape[0]), dim=1)
    return sum(chunk.sum(dim=1) for chunk in chunks)


def test_batch_invariance_rejects_a_batch_dependent_reduction_order():
    x = _rows(16, 1000) * 1e3
    with pytest.raises(OracleFailure, match="batch_invariance"):
        check_batch_invariance(_sum_split_by_batch, {"x": x}, ("x",), full=(_sum_split_by_batch(x),))


def test_batch_invariance_accepts_a_rowwise_exact_reduction():
    # amax, not sum: torch's CUDA sum picks its reduction order from the shape, so a row summed alone
    # and in a batch of 16 differ in the last bit (seen on the H200) -- the oracle is right to say so
    x = _rows(16, 1000) * 1e3
    rowwise = lambda x: x.amax(dim=1)  # noqa: E731
    check_batch_invariance(rowwise, {"x": x}, ("x",), full=(rowwise(x),))


def _sum_by_layout(x):
    """Right for any one layout, but its arithmetic follows the row stride: padded rows are summed in
    float64, contiguous ones in float32 -- as a kernel compiled per stride alignment can differ."""
    return x.sum(dim=1) if x.stride(0) == x.shape[1] else x.double().sum(dim=1).float()


def test_batch_invariance_rotates_the_batch_in_its_own_layout():
    """A padded batch stays padded when rotated: the oracle judges neighbours, not layouts (the layout's
    own path is the parity oracle's to judge, on layouts the strategies draw)."""
    padded = (_rows(16, 1001 + 7) * 1e3)[:, :1001]
    check_batch_invariance(_sum_by_layout, {"x": padded}, ("x",), full=(_sum_by_layout(padded),))
    with pytest.raises(OracleFailure, match="batch_invariance"):  # the control can fail: a real batch bug
        check_batch_invariance(_sum_split_by_batch, {"x": padded}, ("x",), full=(_sum_split_by_batch(padded),))


def test_rotated_rows_keep_strides_offset_and_padding():
    from oracles.batch_invariance import _permuted_in_place

    storage = torch.full((5 * 12 + 3,), float("nan"))
    padded = storage[3:].view(5, 12)[:, :10]
    padded.copy_(torch.arange(50.0).view(5, 10))
    rotated = _permuted_in_place(padded, torch.roll(torch.arange(5), 1))
    assert (rotated.stride(), rotated.storage_offset()) == (padded.stride(), padded.storage_offset())
    assert torch.equal(rotated, padded[torch.roll(torch.arange(5), 1)])
    assert torch.isnan(rotated.as_strided((5, 2), (12, 1), 13)).all()  # the padding is the original's
    assert rotated.untyped_storage().data_ptr() != padded.untyped_storage().data_ptr()


def _sum_with_optional_weights(x, weights=None):
    return _sum_split_by_batch(x if weights is None else x * weights)


def test_batch_invariance_leaves_an_optional_batch_argument_passed_as_none():
    x = _rows(16, 1000) * 1e3
    with pytest.raises(OracleFailure, match="batch_invariance"):
        check_batch_invariance(_sum_with_optional_weights, {"x": x, "weights": None}, ("x", "weights"),
                               full=(_sum_with_optional_weights(x),))


# -- write guards -------------------------------------------------------------------------------
def _double_missing_last(x):
    out = torch.empty_like(x)
    out.view(-1)[:-1] = (x * 2).reshape(-1)[:-1]
    return out


def _double_writing_past_the_end(x):
    out = torch.empty_like(x)
    out.copy_(x * 2)
    torch.as_strided(out, (1,), (1,), out.storage_offset() + out.numel()).fill_(0)  # one element too far
    return out


def _double_scribbling_on_input(x):
    out = x * 2
    x.view(-1)[0] = 0
    return out


def _double(x):
    out = torch.empty_like(x)
    return out.copy_(x * 2)


@pytest.mark.parametrize("wrong, finding", [
    (_double_missing_last, "two different allocation poisons"),
    (_double_writing_past_the_end, "outside the bounds"),
    (_double_scribbling_on_input, "modified inputs"),
])
def test_write_guards_reject(wrong, finding):
    with pytest.raises(OracleFailure, match=finding):
        check_write_guards(wrong, {"x": _rows()})


def test_write_guards_read_padding_of_strided_views_as_input():
    buffer = _rows(8, 40)

    def writes_padding(x):
        x.as_strided((1,), (1,), x.storage_offset() + x.shape[1]).fill_(1)  # the column just past the view
        return x.amax(dim=1)

    with pytest.raises(OracleFailure, match="modified inputs"):
        check_write_guards(writes_padding, {"x": buffer[:, :37]})


def _fill_rows(plane, rows):
    plane[rows] = 1.0


def _fill_rows_and_one_past(plane, rows):
    plane[rows] = 1.0
    torch.as_strided(plane, (1,), (1,), plane.storage_offset() + plane.numel()).fill_(1.0)


def test_write_guards_reject_an_in_place_write_past_its_argument():
    kwargs = {"plane": _rows(), "rows": torch.tensor([0, 3], device=DEVICE)}
    check_write_guards(_fill_rows, kwargs, in_place=("plane",))
    with pytest.raises(OracleFailure, match="in-place argument 'plane'"):
        check_write_guards(_fill_rows_and_one_past, kwargs, in_place=("plane",))


def test_write_guards_accept_a_correct_op():
    check_write_guards(_double, {"x": _rows()})


# -- refusals -----------------------------------------------------------------------------------
def _validate_2d(x):
    require_ndim("x", x, 2, "[R, C]")


REFUSE_1D = (Refusal("1-D x", lambda device: {"x": torch.ones(4, device=device)}, "x"),)


def _silent(x):
    return x.amax(dim=-1)


def _refuses_with_the_wrong_type(x):
    raise RuntimeError("bad input")


def _refuses_without_naming(x):
    raise ValueError("bad shape")


def _refuses_after_mutating(x):
    x.zero_()
    _validate_2d(x)


@pytest.mark.parametrize("wrong, finding", [
    (_silent, "accepted"), (_refuses_with_the_wrong_type, "expected ValueError"),
    (_refuses_without_naming, "does not name"), (_refuses_after_mutating, "mutated"),
])
def test_refusals_reject(wrong, finding):
    with pytest.raises(OracleFailure, match=finding):
        check_refusals(wrong, REFUSE_1D, DEVICE)


def test_refusals_accept_a_validating_op():
    assert check_refusals(_validate_2d, REFUSE_1D, DEVICE) == 1


# -- stateful hook ------------------------------------------------------------------------------
def _rows_filled_only(impl, kwargs):
    """A contract property: fill(plane, rows) sets the named rows to 1 and nothing else."""
    before = kwargs["plane"].clone()
    impl["fill"](**kwargs)
    expected = before.clone()
    expected[kwargs["rows"]] = 1.0
    if not torch.equal(kwargs["plane"], expected):
        raise OracleFailure("stateful", "fill changed rows it was not given")


def test_stateful_hook_rejects_a_property_violation():
    kwargs = {"plane": _rows(), "rows": torch.tensor([1], device=DEVICE)}
    check_properties([_rows_filled_only], {"fill": _fill_rows}, kwargs)
    with pytest.raises(OracleFailure, match="stateful"):
        check_properties([_rows_filled_only], {"fill": lambda plane, rows: plane.fill_(1.0)}, kwargs)


# -- graph parity (CUDA only) -------------------------------------------------------------------
_POINTER_CACHE = {}


def _cached_by_pointer(x):
    """Wrong (stale replay state): memoizes a staged copy of its input on the input's address."""
    staged = _POINTER_CACHE.setdefault(x.data_ptr(), x.clone())
    return staged.amax(dim=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_graph_parity_rejects_state_kept_outside_the_graph():
    cases = [{"x": _rows(seed=seed)} for seed in range(4)]
    with pytest.raises(OracleFailure, match="graph_parity"):
        check_graph_parity(_cached_by_pointer, cases, [{"x": _rows(3, 5)}])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_graph_parity_accepts_a_pure_op():
    cases = [{"x": _rows(seed=seed)} for seed in range(4)]
    check_graph_parity(lambda x: x.amax(dim=1), cases, [{"x": _rows(3, 5)}])
