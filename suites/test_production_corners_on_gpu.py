"""Production shapes are corners on the GPU too (issue 25.4): the cells the CPU's budget cannot reach at a real
size (greedy_argmax from R = 17, whose real vocabularies are corners only on a GPU) and the stateful and
recurrent ops' real page sizes, depths and head dims reject a kernel wrong only there, on CUDA."""
from __future__ import annotations


import pytest
import torch

from oracles.battery import Implementation
from ops.catalog import op
from suites import test_production_corners as on_cpu
from suites.certification import assert_rejected, certify_cell, judged

pytestmark = pytest.mark.sm90


@pytest.fixture(autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


@pytest.mark.parametrize("cell_id", [cell.id for cell in on_cpu.ENTRY.cells if cell.bounds["R"].hi > 0])
def test_a_kernel_wrong_only_at_real_vocabularies_is_rejected_in_every_cell(cell_id):
    impl = judged(on_cpu.ENTRY, on_cpu, "wrong_at_real_vocabularies")
    result = certify_cell(on_cpu.ENTRY, on_cpu.ENTRY.cell(cell_id), impl, max_examples=1)
    assert_rejected(result, "parity", impl.label)


@pytest.mark.parametrize("name, entry, cell_id", [
    pytest.param("save_wrong_at_real_page_sizes", on_cpu.ROLLBACK, "row_slots", id="rollback_save-S"),
    pytest.param("save_wrong_at_real_depths", on_cpu.ROLLBACK, "row_slots", id="rollback_save-T"),
    pytest.param("save_wrong_at_real_head_dims", on_cpu.ROLLBACK, "head_slots", id="rollback_save-E"),
    pytest.param("commit_wrong_at_real_depths", on_cpu.COMMIT, "bf16_state", id="gdn_commit-T"),
])
def test_a_kernel_wrong_only_at_one_real_size_is_rejected_on_cuda(name, entry, cell_id):
    siblings = {sibling: op(sibling).reference for sibling in entry.siblings}
    impl = Implementation(f"{on_cpu.__name__}:{name}", {**siblings, entry.name: getattr(on_cpu, name)})
    result = certify_cell(entry, entry.cell(cell_id), impl, max_examples=1, oracles=("parity",))
    assert_rejected(result, "parity", impl.label)
