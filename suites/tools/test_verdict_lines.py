"""Verdict lines say what was judged (issue 25.5): a run the CPU's size budget narrowed says so in its
verdict, never a bare PASSED for the whole cell."""
from __future__ import annotations

import sys

import pytest
import torch

from ops.catalog import op
from suites.certification import certify_cell, judged
from tools.engine.certify import describe

pytestmark = pytest.mark.cpu
ENTRY = op("greedy_argmax")


def wrong_above_the_cpu_budget(logits):
    """Right wherever the CPU draws (R·V <= 2**18), the contract's refusals included; the last index of each
    row above it."""
    ENTRY.validate(logits)
    if logits.shape[0] * logits.shape[1] > 2**18:
        return torch.full((logits.shape[0],), logits.shape[1] - 1, dtype=torch.int64)
    return torch.argmax(logits, dim=-1)


def _line(cell_id: str, device: str = "cpu") -> str:
    impl = judged(ENTRY, sys.modules[__name__], "wrong_above_the_cpu_budget")
    result = certify_cell(ENTRY, ENTRY.cell(cell_id), impl, max_examples=1)
    assert result.status == "certified", describe(result, "cpu", impl.label)
    return describe(result, device, impl.label).splitlines()[0]


def test_a_pass_on_the_cpus_narrowed_region_names_the_narrowing():
    line = _line("decode_small_batch")
    assert "CERTIFIED on R·V <= 2^18 only: CPU interpreter cap; not judged above after" in line, line


def test_a_cell_the_budget_holds_whole_gets_a_bare_verdict():
    """The control: empty_batch (R = 0) fits the budget, so its verdict claims the whole cell."""
    line = _line("empty_batch")
    assert " after " in line and " only" not in line, line
