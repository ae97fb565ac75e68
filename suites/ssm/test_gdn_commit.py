"""gdn_commit: every cell through the battery (bitwise), and the battery against wrong commits."""
from __future__ import annotations

import functools

import torch

from ops.ssm.gdn_commit import ENTRY
from references.ssm import gdn_commit_strategy as strategy
from suites.certification import arch_marks, machine_device
from suites.op_suite import OpSuite
from suites.ssm.gdn_impls import judged

pytestmark = arch_marks(ENTRY.archs)


WRONG = [
    ("zero_accepted_wraps", "fp32_state", "parity"),
    ("commit_through_minus_one", "bf16_state", "parity"),
    ("accepted_read_as_dense", "fp32_state", "parity"),
]
SUITE = OpSuite(ENTRY, functools.partial(judged, op="gdn_commit"), wrong=WRONG, correct="gdn_commit")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=4)
test_battery_accepts_another_correct_implementation = SUITE.accepts_test(max_examples=1)


def test_accepted_counts_past_the_draft_commit_its_last_checkpoint():
    recipe = {"B": 3, "T": 2, "HV": 2, "Dk": 64, "Dv": 64, "state_dtype": "bfloat16", "free_slots": 1,
              "padding": "none", "slots": "shuffled", "accepted": "mixed", "layout": "contiguous",
              "values": "bit_patterns", "seed": 3}
    kwargs = strategy.build(recipe, machine_device())
    kwargs["num_accepted"] = torch.tensor([7, 0, -2], dtype=torch.int32, device=machine_device())
    before = kwargs["state"].clone()
    ENTRY.kernel(**kwargs)
    slots = kwargs["slots"].long()
    assert torch.equal(kwargs["state"][slots[0]].view(torch.int16), kwargs["checkpoints"][0, 1].view(torch.int16))
    untouched = torch.ones(before.shape[0], dtype=torch.bool)
    untouched[slots[0]] = False
    assert torch.equal(kwargs["state"][untouched].view(torch.int16), before[untouched].view(torch.int16))


def test_gpu_corners_reach_each_cells_most_value_heads():
    """The region a GPU run certifies is the one dispatch routes, and its HV was whatever the draws reached
    (2026-12-07e: 118 of 128 on fp32 state): a corner at the cell's most value heads pins its top where the
    budget takes it, on a GPU; the CPU's corners stay inside the interpreter's budget."""
    for cell in ENTRY.cells:
        top = cell.bounds["HV"].hi
        assert max(recipe["HV"] for recipe in strategy.corners(cell, "cuda")) == top, cell.id
        assert max(recipe["HV"] for recipe in strategy.corners(cell, "cpu")) < top, cell.id
