"""paged_decode_nvfp4kv's wrong implementations that only a GPU makes wrong: the tensor core's arithmetic, which
the interpreter does not have.  Each row names the draws a cell its catch needed on the GPU; ``suites.measure_draws
--device cuda`` reads this table beside the suites' ``WRONG`` (``docs/draws.md``), so the sm90 policy's depth
counts them."""
from __future__ import annotations

import pytest

from ops.attention.paged_decode_nvfp4kv import ENTRY
from ops.catalog import Arch
from suites.attention import paged_decode_nvfp4kv_impls as impls
from suites.certification import arch_marks, assert_rejected, certify_cell, judged, target_oracles

pytestmark = arch_marks(ENTRY.archs - {Arch.CPU_INTERP})

# (wrong implementation, its cell, the oracle that must catch it, the draws a cell that catch needs)
WRONG_ON_GPU = [
    # an H100's certification of the kernel with this plan failed at draw 110 of the cell's seed-0 draws
    # (docs/results/2026-12-05e/certify_sm90_paged.log); the depth over seeds is docs/draws.md's to measure
    ("scores_on_tensor_cores", "dense_nvfp4_kv", "parity", 120),
]


@pytest.mark.parametrize("name, cell_id, oracle, draws", WRONG_ON_GPU, ids=[w[0] for w in WRONG_ON_GPU])
def test_battery_rejects_on_the_gpu(name, cell_id, oracle, draws):
    impl = judged(ENTRY, impls, name)
    result = certify_cell(ENTRY, ENTRY.cell(cell_id), impl, max_examples=draws, shrink=False,
                          oracles=target_oracles(oracle))
    assert_rejected(result, oracle, impl.label)
