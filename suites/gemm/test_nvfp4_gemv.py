"""nvfp4_gemv: every cell through the whole battery, and the battery against wrong GEMVs."""
from __future__ import annotations

import pytest

from oracles.battery import Implementation, strategy_module
from ops.gemm.gemv_launch import gemv_plan
from ops.gemm.nvfp4_gemv import E2M1_BITS, ENTRY
from ops.triton_backend import interpreting, sm_count
from references.formats import E4M3_MAX
from suites.certification import (
    arch_marks,
    assert_certified,
    assert_rejected,
    cell_params,
    certify_cell,
    machine_device,
)
from suites.gemm import nvfp4_gemv_impls as impls

pytestmark = arch_marks(ENTRY.archs)
IMPLS = "suites.gemm.nvfp4_gemv_impls"


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_cell(cell):
    assert_certified(certify_cell(ENTRY, cell))


# (wrong implementation, the oracle that must catch it): the corners of narrow_outputs reach every bug.
# summation_order_varies (determinism) is judged in test_gemv_on_gpu.py: the CPU's sizes are too small
# for a float32 reordering to move a bf16 output (0 of 25 examples did, measured).
WRONG = [
    ("high_nibble_first", "parity"),
    ("scale_per_32_elements", "parity"),
    ("global_scale_forgotten", "parity"),
    ("e2m1_read_as_linear", "parity"),
    ("tail_dropped", "parity"),
    ("bf16_accumulation", "parity"),
    ("float16_activations", "parity"),
    ("missing_refusal", "refusals"),
]


@pytest.mark.parametrize("name, oracle", WRONG, ids=[w[0] for w in WRONG])
def test_battery_rejects(name, oracle):
    impl = Implementation(f"{IMPLS}:{name}", {ENTRY.name: getattr(impls, name)})
    assert_rejected(certify_cell(ENTRY, ENTRY.cell("narrow_outputs"), impl, max_examples=0), oracle, impl.label)


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_battery_accepts_another_correct_implementation(cell):
    impl = Implementation(f"{IMPLS}:correct_via_float32_sums", {ENTRY.name: impls.correct_via_float32_sums})
    assert_certified(certify_cell(ENTRY, cell, impl), impl.label)


def test_corners_reach_both_launch_paths_and_the_hard_weights():
    """On this device: split-K and one-pass plans, K not a multiple of 64, M = 1 and 16, and weights
    with zero, subnormal and saturated block scales, all from the corners alone."""
    device, strategy = machine_device(), strategy_module(ENTRY)
    reached = set()
    for cell in ENTRY.cells:
        for recipe in strategy.corners(cell, device):
            kwargs = strategy.build(recipe, device)
            plan = gemv_plan(recipe["N"], recipe["K"], E2M1_BITS, sm_count(device), interpreting())
            scales = kwargs["block_scales"].float()
            reached |= {"split_k" if plan.splits > 1 else "one_pass", f"M={recipe['M']}"}
            reached |= {name for name, hit in (("K_not_a_multiple_of_64", recipe["K"] % 64 != 0),
                                               ("zero_scale", (scales == 0).any()),
                                               ("subnormal_scale", ((scales > 0) & (scales < 2.0**-6)).any()),
                                               ("saturated_scale", (scales == E4M3_MAX).any()),
                                               ("zero_x_row", (kwargs["x"] == 0).all(dim=1).any())) if hit}
    expected = {"split_k", "one_pass", "M=1", "M=16", "K_not_a_multiple_of_64", "zero_scale", "subnormal_scale",
                "saturated_scale", "zero_x_row"}
    assert expected <= reached, f"not reached: {sorted(expected - reached)}"

