"""rms_norm_gated (CuTe DSL kernel): every cell through the whole battery, on the GPUs the kernel claims.

On the CPU these tests are skipped (the entry claims GPU archs only: a CuTe kernel needs a GPU to run);
what the CPU checks of this kernel is that every reachable launch plan compiles
(``suites/test_cute_compile.py``).  The contract's negative controls live in ``test_rms_norm_gated.py``:
they judge the oracles, whichever kernel those then certify.
"""
from __future__ import annotations

import pytest

# Without the DSL (a GPU machine it was not carried to: tools/install-wheels) this module is skipped
# with that reason, rather than stop the collection of every other suite.
pytest.importorskip("ops.cute_dsl", reason="nvidia-cutlass-dsl is not installed here (tools/install-wheels)")

from ops.norm import rms_norm_gated_cute as cute_kernel  # noqa: E402
from ops.norm.rms_norm_gated_cute import ENTRY  # noqa: E402
from suites.certification import arch_marks  # noqa: E402
from suites.op_suite import OpSuite  # noqa: E402

pytestmark = arch_marks(ENTRY.archs)

test_cell = OpSuite(ENTRY).cell_test()


@pytest.mark.cpu
@pytest.mark.parametrize("width, group_size, aligned, whole_row, vector", [
    (4096, 128, True, False, 8),      # the bench case: groups within a warp, 16-byte accesses
    (1001, 1001, False, True, 1),     # a row that is not a multiple of 8 channels: element accesses
    (8192, 8192, True, True, 8),
])
def test_launch_plan_picks_the_kind_of_group_and_the_vector_width(width, group_size, aligned, whole_row, vector):
    plan = cute_kernel.launch_plan(width, group_size, "norm_then_gate", aligned)
    assert (plan.whole_row, plan.vector) == (whole_row, vector)
    assert plan in cute_kernel.reachable_plans()


@pytest.mark.cpu
@pytest.mark.parametrize("width, group_size", [(cute_kernel.MAX_WIDTH + 8, 128), (4096, 512), (4096, 96)])
def test_launch_plan_sends_what_it_cannot_hold_to_the_triton_kernel(width, group_size):
    with pytest.raises(NotImplementedError, match="Triton kernel"):
        cute_kernel.launch_plan(width, group_size, "none", True)
