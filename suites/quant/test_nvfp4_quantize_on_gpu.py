"""nvfp4_quantize negative control that only a GPU can run: the kernel built with Triton's plain ``/``.

On NVIDIA GPUs Triton compiles float32 ``a / b`` to approximate division (``div.full.f32``); under the
interpreter numpy divides, IEEE, so there the same kernel is right and the CPU suite judges the torch
emulation ``approximate_division_emulated`` instead (``test_nvfp4_quantize.py``).
"""
from __future__ import annotations

import pytest

from ops.catalog import Arch
from ops.quant.nvfp4_quantize import ENTRY
from suites.certification import arch_marks, assert_rejected, cell_params, certify_cell, judged
from suites.quant import nvfp4_quantize_impls as impls

pytestmark = arch_marks(ENTRY.archs - {Arch.CPU_INTERP})


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_battery_rejects_the_approximate_division_kernel(cell):
    impl = judged(ENTRY, impls, "approximate_division_kernel")
    assert_rejected(certify_cell(ENTRY, cell, impl, shrink=False), "parity", impl.label)
