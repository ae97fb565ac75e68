"""fp8_gemv: every cell through the whole battery, and the battery against wrong GEMVs."""
from __future__ import annotations

import pytest
import torch

from ops.gemm import fp8_gemv
from ops.gemm.fp8_gemv import ENTRY, default_plan
from ops.triton_backend import interpreting
from suites.certification import arch_marks, assert_certified, certify_cell, machine_device
from suites.gemm import fp8_gemv_impls as impls
from suites.gemm import gemv_plans
from suites.op_suite import OpSuite

pytestmark = arch_marks(ENTRY.archs)


# (wrong implementation, the cell whose corners reach its bug, the oracle that must catch it)
# summation_order_varies (determinism) is judged in test_gemv_on_gpu.py (see test_nvfp4_gemv.py).
WRONG = [
    ("scale_forgotten", "narrow_outputs", "parity"),
    ("read_as_e5m2", "narrow_outputs", "parity"),
    ("tail_dropped", "narrow_outputs", "parity"),
    ("weight_rows_assumed_dense", "narrow_outputs", "parity"),
    ("x_rows_read_as_contiguous", "narrow_outputs", "parity"),
    ("bf16_accumulation", "narrow_outputs", "parity"),
    ("float16_activations", "narrow_outputs", "parity"),
    ("missing_refusal", "narrow_outputs", "refusals"),
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_via_float32_sums")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test()
test_battery_accepts_another_correct_implementation = SUITE.accepts_test()


@pytest.mark.parametrize("cell, shape", gemv_plans.shapes_to_judge(ENTRY, fp8_gemv.DEFAULT_M1_SHAPE,
                                                                   fp8_gemv.VARIANT_SHAPES),
                         ids=lambda value: value.label() if hasattr(value, "label") else value.id)
def test_every_variant_plan_passes_the_battery_on_the_corners(cell, shape):
    """What tools/bench --variants times must be right: each plan on the corners (see gemv_plans)."""
    impl = gemv_plans.planned(ENTRY, fp8_gemv, shape)
    assert_certified(certify_cell(ENTRY, cell, impl, max_examples=0), impl.label)


def test_corners_reach_both_launch_paths_and_every_kind_of_code():
    """On this device: split-K and one-pass plans, K not a multiple of 64 and K = 1, M = 1 and 16, weights with
    both zeros, subnormals and ±448, and weights whose rows are not dense or start past their storage's start,
    all from the corners alone."""
    device, strategy = machine_device(), ENTRY.strategy_module
    reached, every_path_corners = set(), []
    for cell in ENTRY.cells:
        for recipe in strategy.corners(cell, device):
            kwargs = strategy.build(recipe, device)
            if cell.id == gemv_plans.EVERY_PATH_CELL:
                every_path_corners.append(kwargs)
            plan = default_plan(kwargs["x"], kwargs["w"])
            codes = kwargs["w"].view(torch.uint8) & 0x7F
            reached |= {"split_k" if plan.splits > 1 else "one_pass", f"M={recipe['M']}", f"K={recipe['K']}"}
            reached |= {name for name, hit in (("K_not_a_multiple_of_64", recipe["K"] % 64 != 0),
                                               ("negative_zero", (kwargs["w"].view(torch.uint8) == 0x80).any()),
                                               ("subnormal", ((codes > 0) & (codes < 8)).any()),
                                               ("saturated", (codes == 0x7E).any()),
                                               ("zero_x_row", (kwargs["x"] == 0).all(dim=1).any()),
                                               ("w_rows_not_dense", kwargs["w"].stride(0) != recipe["K"]),
                                               ("w_offset", kwargs["w"].storage_offset() > 0)) if hit}
    expected = {"split_k", "one_pass", "M=1", "M=16", "K=1", "K_not_a_multiple_of_64", "negative_zero", "subnormal",
                "saturated", "zero_x_row", "w_rows_not_dense", "w_offset"}
    assert expected <= reached, f"not reached: {sorted(expected - reached)}"
    # under the interpreter each variant design meets EVERY_PATH_CELL's corners alone (gemv_plans): on the
    # design's own plan they must reach both launch paths, at M = 1 and at M = 16
    if interpreting():
        assert gemv_plans.paths_not_reached(ENTRY, fp8_gemv, every_path_corners) == {}
