"""rms_norm_gated (Triton kernel): every cell through the whole battery, and the battery — amax's exact
property included — against wrong implementations of the contract.  The CuTe DSL kernel of the same
contract has its own suite (``test_rms_norm_gated_cute.py``); these controls judge the contract's
oracles, whichever kernel they certify."""
from __future__ import annotations

import dataclasses
import sys
import types

import pytest
import torch

from ops.norm import rms_norm_gated as kernel
from ops.norm.rms_norm_gated import ENTRY
from oracles.band import check_band
from oracles.battery import Battery
from references.norm import rms_norm_gated as contract
from references.norm.rms_norm_gated_strategy import build
from suites.certification import arch_marks, assert_certified, assert_rejected, certify_cell, judged, machine_device
from suites.contract_only import norm as contract_only_norm
from suites.launches import aten_launches
from suites.norm import quack_adapter
from suites.norm import rms_norm_gated_impls as impls
from suites.op_suite import OpSuite

pytestmark = arch_marks(ENTRY.archs)


# whole tiles (group 128 of H 512, a power of two), padded groups (group 24 of H 72), eps 0, strided x and z
VARIANT_RECIPES = [
    {"T": 37, "H": 512, "group_size": 128, "gate": "norm_then_gate", "amax": "zero", "x_layout": "contiguous",
     "z_layout": "contiguous", "weight_layout": "contiguous", "values": "normal", "eps": 1e-6, "seed": 0},
    {"T": 23, "H": 72, "group_size": 24, "gate": "gate_then_norm", "amax": "zero", "x_layout": "column_offset",
     "z_layout": "every_other_row", "weight_layout": "strided", "values": "gate_extremes", "eps": 0.0, "seed": 1},
]


@pytest.mark.parametrize("recipe", VARIANT_RECIPES, ids=["whole_tile", "padded_groups"])
def test_bench_variants_return_the_default_plans_bits(recipe):
    """What ``tools/bench --variants`` times must be the op: every launch plan it offers (persistent and
    prefetching ones too, each program taking several rows here) gives the default plan's y and amax bit
    for bit.  A plan labelled as changing the numerics (fused multiply-adds, fast math) may round otherwise,
    so it is held to what certification would ask instead: y within the band against float64 truth, amax
    the maximum of its own y.  Under the interpreter fast math's exp2, rcp and rsqrt are float64 rounded
    once, not the GPU's approximations: their error bounds are studied in
    ``docs/lab/rms_norm_gated_fast_math.py band``, and the GPU's bits are the sm90 certificate's to judge."""
    args = build(recipe, machine_device())
    expected_amax = args["amax"].clone()
    expected = kernel.rms_norm_gated(**{**args, "amax": expected_amax})
    unjudged = {**args, "amax": None}
    truth, stock = contract.truth(**unjudged), contract.stock(**unjudged)
    orders = {name: order(**unjudged) for name, order in contract.LEGITIMATE_ORDERS.items()}
    variants = kernel.bench_variants(**args)
    for label, launch in variants.items():
        if "numerics differ" in label:
            returned = []
            contract.amax_is_max_of_returned_values(
                {"rms_norm_gated": lambda **kwargs: returned.append(launch(**kwargs)) or returned[-1]},
                {**args, "amax": args["amax"].clone()})
            check_band(returned[0], stock, truth, label, orders=orders)
            continue
        amax = args["amax"].clone()
        y = launch(**{**args, "amax": amax})
        assert torch.equal(y.view(torch.int16), expected.view(torch.int16)), label
        assert torch.equal(amax.view(torch.int32), expected_amax.view(torch.int32)), label


# (wrong implementation, the cell whose examples reach its bug, the oracle that must catch it)
WRONG = [
    ("amax_before_rounding", "per_head_decode", "stateful"),
    ("amax_ignores_old", "per_head_decode", "stateful"),
    ("groups_ignored", "per_head_decode", "parity"),
    ("gate_order_ignored", "gated_whole_row", "parity"),
    ("eps_outside_sqrt", "per_head_decode", "parity"),
    ("bf16_arithmetic", "plain_rms_norm", "parity"),
    ("strided_rows_read_as_contiguous", "per_head_decode", "parity"),
    ("batch_of_one_unweighted", "per_head_prefill", "batch_invariance"),
    ("rstd_follows_row_slot", "plain_rms_norm", "batch_invariance"),
    ("missing_refusal", "empty_batch", "refusals"),
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_in_float64")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=8)
test_battery_accepts_another_correct_implementation = SUITE.accepts_test(["per_head_decode", "gated_whole_row"])


def test_amax_from_fp32_values_passes_every_oracle_but_the_property():
    """The negative control's other half: without the amax property the battery certifies the
    pre-rounding amax, so the property is what catches it."""
    impl = judged(ENTRY, impls, "amax_before_rounding")
    blind = dataclasses.replace(ENTRY, properties=())
    assert_certified(certify_cell(blind, ENTRY.cell("per_head_decode"), impl, max_examples=8), impl.label)


def test_stock_op_is_a_torch_composition_of_many_kernels():
    """The bench's baseline, what ``tools/bench`` times against: one kernel per step of the composition."""
    recipe = {"T": 4, "H": 256, "group_size": 128, "gate": "norm_then_gate", "amax": "zero",
              "x_layout": "contiguous", "z_layout": "contiguous", "weight_layout": "contiguous",
              "values": "normal", "eps": 1e-6, "seed": 0}
    assert len(aten_launches(ENTRY.stock, build(recipe, machine_device()))) >= 10


# -- the quack adapter's glue, with a stand-in for quack (quack itself runs on the GPU run only) -------
def _stand_in_quack(monkeypatch, rmsnorm):
    quack = types.ModuleType("quack")
    quack.rmsnorm = rmsnorm
    monkeypatch.setitem(sys.modules, "quack", quack)


def _plain_rms_norm(x, weight, eps):
    # the contract-only implementation, batch-invariant on any device: the reference's mean (torch's own
    # reduction) is not on a GPU (an H100, 2026-12-07g: one bf16 ULP of a row of 1001 moved by one position),
    # and a right stand-in holds every property the op declares
    return contract_only_norm.rms_norm_gated(x, None, weight, eps, x.shape[1])


@pytest.mark.parametrize("entry_point", ["rms_norm_gated", "rms_norm_gated_contiguous"])
def test_quack_adapter_passes_a_right_rms_norm_through_on_its_cell(monkeypatch, entry_point):
    _stand_in_quack(monkeypatch, _plain_rms_norm)
    impl = judged(ENTRY, quack_adapter, entry_point)
    assert_certified(certify_cell(ENTRY, ENTRY.cell("plain_rms_norm"), impl, max_examples=4), impl.label)


def test_quack_adapter_neither_hides_a_wrong_rms_norm_nor_passes_a_gated_cell(monkeypatch):
    _stand_in_quack(monkeypatch, lambda x, weight, eps: _plain_rms_norm(x, weight, 0.5))
    impl = judged(ENTRY, quack_adapter, "rms_norm_gated")
    assert_rejected(certify_cell(ENTRY, ENTRY.cell("plain_rms_norm"), impl, max_examples=4, shrink=False),
                    "parity", impl.label)
    _stand_in_quack(monkeypatch, _plain_rms_norm)
    result = certify_cell(ENTRY, ENTRY.cell("gated_whole_row"), impl, max_examples=1, shrink=False)
    assert_rejected(result, "parity", impl.label)
    assert "NotImplementedError" in result.failure.message and "plain_rms_norm" in result.failure.message


@pytest.mark.parametrize("gate", ["norm_then_gate", "gate_then_norm"])
def test_non_finite_inputs_need_nan_where_the_truth_is_nan(gate):
    """x and z with NaN and +-inf: the NaN-propagating implementation passes parity, the one writing 0
    for NaN fails it (CONTRACTS.md: non-finite truth is matched exactly)."""
    cell = ENTRY.cell("gated_whole_row")
    recipe = {"T": 8, "H": 256, "group_size": 256, "gate": gate, "amax": "zero", "x_layout": "contiguous",
              "z_layout": "contiguous", "weight_layout": "contiguous", "values": "non_finite", "eps": 1e-6,
              "seed": 3}
    kwargs = ENTRY.strategy_module.build(recipe, machine_device())
    assert ENTRY.truth(**kwargs)[0].isnan().any() and cell.contains(ENTRY.params_of(**kwargs))
    for name, fails in (("correct_in_float64", False), ("nan_to_zero", True)):
        battery = Battery(ENTRY, judged(ENTRY, impls, name), machine_device(), ENTRY.strategy_module)
        found = battery.judge(recipe, ["parity"])
        assert bool(found) == fails, (name, found)
        if fails:
            assert "NaN or +-inf" in found["parity"].message


def test_gpu_corners_reach_each_cells_widths_both_ends():
    """Each cell's H is one dispatch may route whole: the GPU corners reach its narrowest and widest row (a
    per-head row of one group is the whole-row cells' input, so per-head cells start at two groups)."""
    from references.norm.rms_norm_gated_strategy import corners

    for cell in ENTRY.cells:
        widths = [recipe["H"] for recipe in corners(cell, "cuda")]
        assert (min(widths), max(widths)) == (cell.bounds["H"].lo, cell.bounds["H"].hi), cell.id
