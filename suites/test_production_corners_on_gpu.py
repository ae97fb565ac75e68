"""Production shapes are corners on the GPU too (issue 25.4): the cells the CPU's budget cannot reach at a real
size (greedy_argmax from R = 17, whose real vocabularies are corners only on a GPU) and the stateful and
recurrent ops' real page sizes, depths and head dims reject a kernel wrong only there, on CUDA."""
from __future__ import annotations

import pytest

from suites import test_production_corners as on_cpu
from suites.certification import assert_rejected, certify_cell, judged

pytestmark = pytest.mark.sm90


@pytest.mark.parametrize("cell_id", [cell.id for cell in on_cpu.ENTRY.cells if cell.bounds["R"].hi > 0])
def test_a_kernel_wrong_only_at_real_vocabularies_is_rejected_in_every_cell(cell_id):
    impl = judged(on_cpu.ENTRY, on_cpu, "wrong_at_real_vocabularies")
    result = certify_cell(on_cpu.ENTRY, on_cpu.ENTRY.cell(cell_id), impl, max_examples=1)
    assert_rejected(result, "parity", impl.label)


@pytest.mark.parametrize("name, entry, cell_id", on_cpu.REAL_SIZE_CASES)
def test_a_kernel_wrong_only_at_one_real_size_is_rejected_on_cuda(name, entry, cell_id):
    on_cpu.assert_wrong_at_one_real_size_rejected(name, entry, cell_id)
