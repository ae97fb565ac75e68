"""rollback_save: every cell through the whole battery (the restoration property included, with the
kernel's restore as its sibling), and the battery against wrong saves."""
from __future__ import annotations

import pytest

from oracles.battery import Implementation
from ops.attention.rollback_save import ENTRY
from references.attention.rollback_restore import rollback_restore as reference_restore
from suites.attention import rollback_restore_impls as pair
from suites.attention import rollback_save_impls as impls
from suites.certification import arch_marks, assert_certified, assert_rejected, cell_params, certify_cell

pytestmark = arch_marks(ENTRY.archs)
IMPLS = "suites.attention.rollback_save_impls"


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_cell(cell):
    assert_certified(certify_cell(ENTRY, cell))


# (wrong save, the cell whose corners reach its bug, the oracle that must catch it)
WRONG = [
    ("garbage_for_dead_entries", "row_slots", "parity"),
    ("saves_through_minus_one_page", "head_slots", "parity"),
    ("saves_the_next_slot", "head_slots", "parity"),
    ("values_through_float32", "row_slots", "parity"),
    ("missing_refusal", "row_slots", "refusals"),
]


@pytest.mark.parametrize("name, cell_id, oracle", WRONG, ids=[w[0] for w in WRONG])
def test_battery_rejects(name, cell_id, oracle):
    impl = Implementation(f"{IMPLS}:{name}", {"rollback_save": getattr(impls, name),
                                              "rollback_restore": reference_restore})
    result = certify_cell(ENTRY, ENTRY.cell(cell_id), impl, max_examples=0)
    assert_rejected(result, oracle, impl.label)


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_battery_accepts_another_correct_pair(cell):
    impl = Implementation("suites.attention.rollback_restore_impls",
                          {"rollback_save": pair.rollback_save, "rollback_restore": pair.rollback_restore})
    assert_certified(certify_cell(ENTRY, cell, impl, max_examples=2), impl.label)
