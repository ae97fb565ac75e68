"""rollback_save: every cell through the whole battery (the restoration property included, with the
kernel's restore as its sibling), and the battery against wrong saves."""
from __future__ import annotations

from oracles.battery import Implementation
from ops.attention.rollback_save import ENTRY
from references.attention.rollback_restore import rollback_restore as reference_restore
from suites.attention import rollback_restore_impls as pair
from suites.attention import rollback_save_impls as impls
from suites.certification import arch_marks
from suites.op_suite import OpSuite

pytestmark = arch_marks(ENTRY.archs)
IMPLS = "suites.attention.rollback_save_impls"


def wrong_save(name: str) -> Implementation:
    """The save ``name`` of rollback_save_impls beside the contract's restore."""
    return Implementation(f"{IMPLS}:{name}", {"rollback_save": getattr(impls, name),
                                              "rollback_restore": reference_restore})


# (wrong save, the cell whose corners reach its bug, the oracle that must catch it)
WRONG = [
    ("garbage_for_dead_entries", "row_slots", "parity"),
    ("saves_through_minus_one_page", "head_slots", "parity"),
    ("saves_the_next_slot", "head_slots", "parity"),
    ("values_through_float32", "row_slots", "parity"),
    ("missing_refusal", "row_slots", "refusals"),
]
SUITE = OpSuite(ENTRY, wrong_save, wrong=WRONG, correct=Implementation(
    "suites.attention.rollback_restore_impls",
    {"rollback_save": pair.rollback_save, "rollback_restore": pair.rollback_restore}))

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test()
test_battery_accepts_another_correct_pair = SUITE.accepts_test(max_examples=2)

