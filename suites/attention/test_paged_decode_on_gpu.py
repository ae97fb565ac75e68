"""paged_decode checks only a GPU can run: the inline-PTX e4m3 -> fp16 conversion of V
(``cvt.rn.f16x2.e4m3x2``, ``_e4m3_to_fp16``), which the interpreter replaces by its twin (Triton's own
conversion), against torch's conversion for every one of the 256 codes, bit for bit."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ops.attention.paged_decode import ENTRY, _e4m3_to_fp16
from ops.catalog import Arch
from suites.certification import arch_marks, machine_device

pytestmark = arch_marks(ENTRY.archs - {Arch.CPU_INTERP})


@triton.jit
def _convert_rows(x_ptr, keep_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr):
    rows = tl.arange(0, ROWS)
    offsets = rows[:, None] * COLS + tl.arange(0, COLS)[None, :]
    keep = tl.load(keep_ptr + rows)[:, None]
    tl.store(out_ptr + offsets, _e4m3_to_fp16(tl.load(x_ptr + offsets), keep, True))


def test_e4m3_to_fp16_ptx_is_exact_for_every_code():
    """Every code in every byte position of a 4-byte register (each row of 16 holds all 256 codes,
    rotated by the row), kept rows bit for bit as torch converts them (NaN as NaN), dropped rows 0."""
    device = machine_device()
    rows, cols = 16, 256
    codes = (torch.arange(cols)[None, :] + torch.arange(rows)[:, None]) % 256
    x = codes.to(torch.uint8).to(device).view(torch.float8_e4m3fn)
    keep = torch.tensor([-1] * (rows - 2) + [0, 0], dtype=torch.int32, device=device)
    out = torch.empty(rows, cols, dtype=torch.float16, device=device)
    _convert_rows[(1,)](x, keep, out, ROWS=rows, COLS=cols)
    expected = x.to(torch.float16)
    kept = slice(0, rows - 2)
    nan = expected[kept].isnan()
    assert torch.equal(out[kept].isnan(), nan)
    assert torch.equal(out[kept].view(torch.int16)[~nan], expected[kept].view(torch.int16)[~nan])
    assert torch.equal(out[rows - 2:].view(torch.int16), torch.zeros(2, cols, dtype=torch.int16, device=device))
