"""GEMV checks only a GPU can run: the inline-PTX weight decode, and a summation-order control.

- The NVFP4 decodes (table lookup to bf16, bit placement to float32 or to bf16) are inline PTX, which the
  interpreter cannot run: here compiled kernels decode every byte against every E4M3 scale, bit for bit
  (their texts are also executed by a small PTX interpreter on every machine, in ``test_nvfp4_gemv.py``).
- A float32 reordering moves a sum by an ulp or two of float32, which changes its bf16 rounding rarely:
  the CPU's example sizes (at most 16 x 4096 outputs) did not show it once in 25 examples. A GPU cell's
  long-sum corner (16 x 2047 or 16 x 2048 outputs of K = 16384) moves 10 to 20 outputs
  (``gemv_inputs.LONG_SUM_OUTPUTS``); before it, narrow_outputs' corners (K = 80, or at most 65 outputs
  of long sums) moved none and the control was certified.
"""
from __future__ import annotations

import pytest
import torch

from ops.catalog import Arch
from ops.gemm import fp8_gemv, nvfp4_gemv
from suites.certification import arch_marks, assert_rejected, certify_cell, judged
from suites.gemm import fp8_gemv_impls, nvfp4_gemv_impls
from suites.gemm.test_nvfp4_gemv import decode_every_pair, float32_bits

pytestmark = arch_marks(nvfp4_gemv.ENTRY.archs & fp8_gemv.ENTRY.archs - {Arch.CPU_INTERP})

CASES = [(entry, impls, cell.id) for entry, impls in ((nvfp4_gemv.ENTRY, nvfp4_gemv_impls),
                                                      (fp8_gemv.ENTRY, fp8_gemv_impls))
         for cell in entry.cells]


@pytest.mark.parametrize("entry, impls, cell_id", CASES, ids=[f"{e.name}-{c}" for e, _, c in CASES])
def test_battery_rejects_a_summation_order_that_varies_per_call(entry, impls, cell_id):
    impl = judged(entry, impls, "summation_order_varies")
    assert_rejected(certify_cell(entry, entry.cell(cell_id), impl, max_examples=0), "determinism", impl.label)


@pytest.mark.parametrize("float32_decode, placed", [(False, False), (True, False), (False, True)],
                         ids=["E2M1_PAIRS_PTX", "E2M1_FLOAT32_PTX", "E2M1_PLACED_PTX"])
def test_ptx_decode_is_exact_for_every_byte_and_scale(float32_decode, placed):
    """E2M1_PLACED_PTX also checks that the GPU's bf16x2 fma keeps its subnormal input (the code 0.5)."""
    (low, high), (expected_low, expected_high) = decode_every_pair(ptx_decode=True, float32_decode=float32_decode,
                                                                   placed=placed)
    assert torch.equal(float32_bits(low), float32_bits(expected_low))
    assert torch.equal(float32_bits(high), float32_bits(expected_high))
