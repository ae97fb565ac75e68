"""A parity finding carries the values that decide it (oracles/findings.py), and a failing corner shrinks to a
size a person reads (oracles/battery.py ``_shrink_corner``)."""
from __future__ import annotations

import types

import pytest
import torch

from ops.catalog import entries
from oracles.battery import Battery, Implementation, _shrink_corner, _size_ladder, replay, run_cell
from suites.norm import rms_norm_gated_impls
from suites.sampling import greedy_argmax_impls
from suites.speculative import strict_accept_impls

pytestmark = pytest.mark.cpu
CPU = torch.device("cpu")


def finding(op: str, module, name: str, cell: str, recipe: dict, strategy=None) -> str:
    entry = entries()[op]
    impl = Implementation(name, {op: getattr(module, name)})
    result = replay(entry, impl, entry.cell(cell), CPU, recipe, strategy or entry.strategy_module,
                    graph_parity_skipped="not asked here", oracles=("parity",))
    assert result.failing() == ["parity"], result.verdicts
    return result.failures["parity"].message


ARGMAX = {"R": 3, "V": 100, "dtype": "float32", "layout": "contiguous", "values": "tail_max", "seed": 5}


def test_an_argmax_finding_names_the_logits_at_both_indices_the_row_max_and_its_nans():
    text = finding("greedy_argmax", greedy_argmax_impls, "dropped_tail", "decode_small_batch", ARGMAX)
    entry = entries()["greedy_argmax"]
    logits = entry.strategy_module.build(ARGMAX, CPU)["logits"]
    returned, right = greedy_argmax_impls.dropped_tail(logits), entry.reference(logits)
    row = int((returned != right).nonzero()[0])
    got, expected, logits = int(returned[row]), int(right[row]), logits.double()
    assert f"returned: logits[{row}, {got}] = {logits[row, got].item()!r}" in text
    assert f"expected: logits[{row}, {expected}] = {logits[row, expected].item()!r}" in text
    assert f"row max {logits[row].max().item()!r}, 0 NaN of 100" in text
    assert f"logits[{row}]: (100,) float32, max finite" in text  # the generic row beside it


def test_without_the_ops_explain_the_generic_rows_are_still_given_and_a_broken_explain_is_reported():
    strategy = entries()["greedy_argmax"].strategy_module
    plain = types.SimpleNamespace(build=strategy.build, corners=strategy.corners, recipes=strategy.recipes)
    text = finding("greedy_argmax", greedy_argmax_impls, "dropped_tail", "decode_small_batch", ARGMAX, plain)
    assert "returned:" not in text and "(100,) float32, max finite" in text

    def explain(*_):
        raise RuntimeError("boom")

    broken = types.SimpleNamespace(**vars(plain), explain=explain)
    text = finding("greedy_argmax", greedy_argmax_impls, "dropped_tail", "decode_small_batch", ARGMAX, broken)
    assert "(the op's explain() raised RuntimeError: boom)" in text


def test_a_strict_accept_finding_names_the_rows_num_drafts_and_first_mismatch():
    recipe = {"B": 2, "K": 1, "layout": "every_other_row", "rows": "mixed", "vocab": "small",
              "seed": 8850761786822516722}
    text = finding("strict_accept", strict_accept_impls, "negative_count_unclamped", "small_batch", recipe)
    inputs = entries()["strict_accept"].strategy_module.build(recipe, CPU)
    drafts = int(inputs["num_drafts"][0])
    assert drafts < 0 and f"row 0: num_drafts {drafts} (n_b = 0 of K = 1); first mismatch" in text
    assert f"num_drafts[0] = {drafts}" in text


def test_a_band_finding_names_the_worst_element_its_truth_the_kernels_and_the_stock_ops_values():
    recipe = {"T": 1, "H": 128, "group_size": 64, "gate": "norm_then_gate", "amax": "zero", "x_layout": "padded_rows",
              "z_layout": "every_other_row", "weight_layout": "column_offset", "values": "group_scales", "eps": 1e-05,
              "seed": 6371672222481978704}  # tiny rows: eps outside the square root is far off there
    text = finding("rms_norm_gated", rms_norm_gated_impls, "eps_outside_sqrt", "per_head_decode", recipe)
    worst = next(line for line in text.splitlines() if line.startswith("output 0: worst at ("))
    assert ": truth " in worst and ", kernel " in worst and ", stock " in worst and " ULP; 1 ULP of the row" in worst


def test_a_band_findings_worst_element_is_a_real_miss_not_a_matched_nan():
    """NaN truth answered NaN, and +-inf by the same infinity, are matches (the band's rule): the worst element
    shown is the finite one that missed; the 2026-12-03 H200 run of liger's RMSNorm showed a matched NaN as
    the worst, at inf ULP."""
    from oracles.findings import band_detail

    nan, inf = float("nan"), float("inf")
    truth = torch.tensor([[nan, 1.0, -inf, 2.0]], dtype=torch.float64)
    out = torch.tensor([[nan, 1.0, -inf, 2.5]], dtype=torch.bfloat16)
    worst = band_detail((out,), None, (truth,), {}).splitlines()[0]
    assert worst.startswith("output 0: worst at (0, 3): truth 2.0, kernel 2.5"), worst
    assert "inf ULP" not in worst
    missed = band_detail((torch.tensor([[0.0, 1.0, -inf, 2.0]], dtype=torch.bfloat16),), None, (truth,), {})
    assert missed.startswith("output 0: worst at (0, 0): truth nan, kernel 0.0") and "inf ULP" in missed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_bitwise_finding_gives_the_bits_of_values_that_print_alike(dtype):
    """NaNs of two signs (or payloads) print as "nan" both; -0.0 and a NaN's payload are bits a repr may hide:
    the finding says the bit patterns of float elements.  Integers need none."""
    from oracles.bitwise import first_difference

    nan = torch.tensor([1.0, float("nan"), 0.0], dtype=dtype)
    integers = {4: torch.int32, 2: torch.int16}[nan.element_size()]
    width, sign = 2 * nan.element_size(), 1 << (8 * nan.element_size() - 1)
    flipped = nan.view(integers).clone()
    flipped[1:] ^= torch.tensor(-sign, dtype=integers)   # the NaN's and the zero's sign bits; 1.0 stays
    flipped = flipped.view(dtype)
    bits = int(nan.view(integers)[1]) & (2 * sign - 1)
    text = first_difference(nan, flipped)
    assert f"got nan (bits 0x{bits:0{width}x}), expected nan (bits 0x{bits ^ sign:0{width}x})" in text, text
    assert first_difference(torch.tensor([3]), torch.tensor([4])).endswith("got 3, expected 4")


def test_the_size_ladder_goes_smallest_first_through_block_edges():
    ladder = _size_ladder(1, 513)
    assert ladder[:4] == [1, 2, 3, 4] and ladder == sorted(set(ladder)) and max(ladder) < 513
    assert {63, 64, 65, 255, 256, 257, 511, 512} <= set(ladder) and len(ladder) < 40
    assert _size_ladder(5, 5) == []


def test_a_failing_corner_shrinks_to_a_size_a_person_reads():
    """large_batch_bug fails on row 255 of a 256-row corner: rows stay (the bug needs them), columns go
    from the corner's 513 down to the two a tie needs; bisecting from 513 stopped where a draw first passed."""
    entry = entries()["greedy_argmax"]
    impl = Implementation("large_batch_bug", {entry.name: greedy_argmax_impls.large_batch_bug})
    result = run_cell(entry, impl, entry.cell("decode_large_batch"), CPU, max_examples=0,
                      strategy=entry.strategy_module, oracles=("parity",), graph_parity_skipped="not asked here")
    recipe = result.failures["parity"].recipe
    assert recipe["R"] == 256 and recipe["V"] <= 16, recipe


def test_a_corner_failing_only_above_a_size_shrinks_to_that_threshold():
    """Negative control of the ladder alone: a bug above 1000 columns (bug_between_1000_and_4000_columns) is
    not found by small sizes, and bisecting between the ladder's last pass and first failure finds 1001."""
    entry = entries()["greedy_argmax"]
    impl = Implementation("between", {entry.name: greedy_argmax_impls.bug_between_1000_and_4000_columns})
    cell = entry.cell("decode_mid_batch")
    corner = {**entry.strategy_module.corners(cell, CPU)[0], "V": 3000, "values": "tail_max"}  # the max at the end
    battery = Battery(entry, impl, CPU, entry.strategy_module, cell=cell, graph_parity_skipped="not asked here")
    failure = battery.judge(corner, ["parity"])["parity"]
    failure.recipe = corner
    shrunk = _shrink_corner(battery, cell, "parity", failure)
    assert shrunk.recipe["V"] == 1001, shrunk.recipe
