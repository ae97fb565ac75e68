"""strict_accept: every cell through the whole battery, the battery against wrong kernels, and the
launch count that is the point of fusing the stock composition."""
from __future__ import annotations

import pytest
import torch

from ops.speculative.strict_accept import ENTRY
from references.speculative.strict_accept import STOCK_LAUNCHES, stock
from references.speculative.strict_accept_strategy import build
from suites.certification import arch_marks, assert_certified, certify_cell, judged, machine_device
from suites.launches import aten_launches, cuda_launches
from suites.op_suite import OpSuite
from suites.speculative import strict_accept_impls as impls

pytestmark = arch_marks(ENTRY.archs)


# (wrong implementation, the cell whose corners reach its bug, the oracle that must catch it)
WRONG = [
    ("reads_past_num_drafts", "small_batch", "parity"),
    ("counts_agreements_not_prefix", "small_batch", "parity"),
    ("negative_count_unclamped", "small_batch", "parity"),
    ("no_correction_token", "small_batch", "parity"),
    ("int64_num_accepted", "small_batch", "parity"),
    ("large_batch_bug", "large_batch", ("parity", "batch_invariance")),  # either sees it first
    ("missing_refusal", "small_batch", "refusals"),
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_column_loop")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=4)
test_battery_accepts_another_correct_implementation = SUITE.accepts_test(max_examples=2)


def test_large_batch_bug_hides_from_small_batches():
    """The large-batch control is right up to 64 rows: only a cell reaching that path exposes it."""
    impl = judged(ENTRY, impls, "large_batch_bug")
    assert_certified(certify_cell(ENTRY, ENTRY.cell("small_batch"), impl, max_examples=2), impl.label)


def test_a_new_seed_changes_the_step_but_no_shape():
    """Graph parity replays the captured call on the recipe under new seeds: drafts, targets and draft
    counts must all change, shapes and layouts must not."""
    recipe = {"B": 64, "K": 16, "layout": "padded_rows", "rows": "mixed", "vocab": "wide", "seed": 7}
    first, second = build(recipe, "cpu"), build({**recipe, "seed": 8}, "cpu")
    for name in first:
        assert first[name].shape == second[name].shape and first[name].stride() == second[name].stride(), name
        assert not torch.equal(first[name], second[name]), name


def _step(device, batch=64, drafts=16):
    return build({"B": batch, "K": drafts, "layout": "contiguous", "rows": "mixed", "vocab": "small", "seed": 1},
                 device)


def test_stock_runs_the_declared_number_of_ops():
    """The bench label's launch count for the stock composition, counted op by op (views excluded)."""
    ops = aten_launches(stock, _step("cpu"))
    assert len(ops) == STOCK_LAUNCHES, ops


@pytest.mark.skipif(not torch.cuda.is_available(), reason="counts CUDA kernel launches")
def test_kernel_is_one_launch_where_stock_is_many():
    step = _step(torch.device("cuda"), batch=4096)
    kernel, composed = cuda_launches(ENTRY.kernel, step), cuda_launches(stock, step)
    assert len(kernel) == 1, kernel
    assert len(composed) == STOCK_LAUNCHES, composed


def test_bench_variants_keep_the_contract():
    """``tools/bench --variants`` times other launch plans: each must still be the op."""
    from ops.speculative.strict_accept import bench_variants
    from references.speculative.strict_accept import strict_accept as reference
    from oracles.bitwise import check_bitwise

    step = _step(machine_device(), batch=300)
    for label, variant in bench_variants(**step).items():
        check_bitwise(variant(**step), reference(**step), f"variant {label}")
