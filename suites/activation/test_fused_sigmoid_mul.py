"""fused_sigmoid_mul (Triton kernel): every cell through the whole battery, and the battery against wrong
implementations of the contract (``fused_sigmoid_mul_impls.py``)."""
from __future__ import annotations

from ops.activation.fused_sigmoid_mul import ENTRY
from suites.activation import fused_sigmoid_mul_impls as impls
from suites.certification import arch_marks
from suites.op_suite import OpSuite

pytestmark = arch_marks(ENTRY.archs)

# (wrong implementation, the cell whose examples reach its bug, the oracle that must catch it)
WRONG = [
    ("amax_before_rounding", "decode", "stateful"),
    ("amax_ignores_old", "decode", "stateful"),
    ("strided_rows_read_as_contiguous", "decode", "parity"),
    ("non_finite_as_zero", "decode", "parity"),
    ("writes_x_in_place", "decode", "write_guards"),
    ("batch_of_one_returns_x", "prefill", "batch_invariance"),
    ("missing_refusal", "decode", "refusals"),
    ("inputs_swapped", "decode", "parity"),
    ("silu_gate", "decode", "parity"),
    ("bf16_arithmetic", "decode", "parity"),
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_in_float64")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=0)  # corners only: they reach each mistake here
test_battery_accepts_another_correct_implementation = SUITE.accepts_test()
