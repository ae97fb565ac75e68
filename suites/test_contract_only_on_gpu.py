"""Implementations written from the contract alone pass on the GPU too (issue 24: every correct
implementation passes every cell on the CPU and the H200): each of ``suites/contract_only``'s, on every
cell of its op, with all the cell's corners (the GPU's: production sizes, long contexts) and a few draws,
judged as ``--impl`` judges any implementation (graph parity is asked of catalog kernels only)."""
from __future__ import annotations

import pytest

from ops.catalog import entries
from oracles.battery import Implementation
from suites.certification import certify_cell
from suites.test_contract_only import CASES, IMPLEMENTATIONS, assert_passes_but_where_refused_whole

pytestmark = pytest.mark.sm90
DRAWS = 4   # besides every corner: the CPU judged them at 1 draw on its first corners


@pytest.mark.parametrize("op_name, label", CASES, ids=[f"{op}-{label}" for op, label in CASES])
def test_an_implementation_written_from_the_contract_passes_on_cuda(op_name, label):
    entry = entries()[op_name]
    impl = Implementation(f"contract-only {op_name} ({label})", IMPLEMENTATIONS[op_name][label])
    assert_passes_but_where_refused_whole(op_name, label, [certify_cell(entry, cell, impl, max_examples=DRAWS,
                                                                        shrink=False) for cell in entry.cells])
