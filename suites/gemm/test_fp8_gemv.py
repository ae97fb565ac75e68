"""fp8_gemv: every cell through the whole battery, and the battery against wrong GEMVs."""
from __future__ import annotations

import pytest

from oracles.battery import Implementation
from ops.gemm.fp8_gemv import ENTRY
from suites.certification import arch_marks, assert_certified, assert_rejected, cell_params, certify_cell

pytestmark = arch_marks(ENTRY.archs)


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_cell(cell):
    assert_certified(certify_cell(ENTRY, cell))
