"""gdn_decode: every cell through the battery; the battery against wrong decodes; the pool check."""
from __future__ import annotations

import pytest
import torch

from oracles.band import check_band
from oracles.battery import Implementation
from oracles.determinism import run_on_copy
from oracles.failures import OracleFailure
from oracles.tensors import as_outputs, clone_inputs
from ops.catalog import kernels
from ops.ssm.gdn_decode import ENTRY
from references.ssm.gdn_decode import writes_only_live_slots
from references.ssm import gdn_decode_strategy as strategy
from suites.certification import arch_marks, machine_device
from suites.op_suite import OpSuite
from suites.ssm.gdn_impls import judged

pytestmark = arch_marks(ENTRY.archs)


# (wrong implementation, the cell whose corners reach its bug, the oracles that may catch it first)
WRONG = [
    ("padding_writes_through_minus_one", "fp32_state", "parity"),
    ("heads_interleaved", "bf16_state", "parity"),
    # with beta = 0 and k = 0 the two orders agree in value; replay against the right verify still parts
    ("decay_after_update", "fp32_state", ("parity", "stateful")),
    ("l2norm_without_eps", "bf16_state", "parity"),
    ("padding_rows_multiplied_by_zero", "fp32_state", "parity"),
    ("slots_read_as_dense", "fp32_state", ("parity", "stateful")),
    ("stray_write_within_band", "fp32_state", "stateful"),
    ("missing_refusal", "fp32_state", "refusals"),
]
SUITE = OpSuite(ENTRY, judged, wrong=WRONG, correct="gdn_decode")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=4)
test_battery_accepts_another_correct_implementation = SUITE.accepts_test(max_examples=1)


def _corner(cell_id: str, **fields) -> dict:
    cell = ENTRY.cell(cell_id)
    recipe = next(r for r in strategy.corners(cell, machine_device()) if all(r[k] == v for k, v in fields.items()))
    return strategy.build(recipe, machine_device())


def test_pool_check_sees_the_write_through_minus_one_bit_for_bit():
    """All rows padding over a free last slot: the only write is the wrapped one, and the check names it."""
    kwargs = _corner("fp32_state", padding="all", slots="last_slot_free")
    with pytest.raises(OracleFailure, match=r"\[stateful\].*elements the contract does not name"):
        writes_only_live_slots(judged("padding_writes_through_minus_one"), kwargs)
    writes_only_live_slots(Implementation.of_kernels(ENTRY, kernels), kwargs)


def test_a_stray_write_inside_the_band_passes_parity_and_fails_the_pool_check():
    """One ulp in a slot no row owns is within the band's one-ulp floor: only a bitwise check sees it."""
    kwargs = _corner("fp32_state", padding="ends")
    impl = judged("stray_write_within_band")
    actual = run_on_copy(impl["gdn_decode"], kwargs, ENTRY.in_place)
    check_band(actual, run_on_copy(ENTRY.stock, kwargs, ENTRY.in_place),
               as_outputs(ENTRY.truth(**clone_inputs(kwargs))), "a decode with one stray write")
    with pytest.raises(OracleFailure, match="stateful"):
        writes_only_live_slots(impl, kwargs)


def test_out_of_pool_slots_are_padding_rows():
    """A slot past the pool is a padding row (the contract's -1 generalised; no device value is checked)."""
    kwargs = _corner("fp32_state", B=1, values="edges")
    kwargs["slots"] = torch.tensor([kwargs["state"].shape[0]], dtype=torch.int32, device=machine_device())
    before = kwargs["state"].clone()
    o = ENTRY.kernel(**kwargs)
    assert torch.equal(o, torch.zeros_like(o)) and torch.equal(kwargs["state"], before)
