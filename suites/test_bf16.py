"""bf16 conversions kernels and truths rely on: the Triton helpers (every bf16, rounding ties and
carries, on this machine's backend) and the single-rounding float64 -> bf16 of the references."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from ops.triton_backend import bf16_bits_to_float32, float32_to_bf16_rne
from references.formats.bf16 import round_float64_to_bf16
from suites.certification import machine_device

pytestmark = [pytest.mark.cpu, pytest.mark.sm90, pytest.mark.sm100, pytest.mark.sm103, pytest.mark.sm107]
DEVICE = machine_device()
BLOCK = 4096


@triton.jit
def _widen(bf16_ptr, out_ptr, BLOCK: tl.constexpr):
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + at, bf16_bits_to_float32(tl.load(bf16_ptr + at)))


@triton.jit
def _narrow(fp32_ptr, out_ptr, BLOCK: tl.constexpr):
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + at, float32_to_bf16_rne(tl.load(fp32_ptr + at)))


def test_every_bf16_widens_exactly():
    every = torch.arange(-2**15, 2**15, dtype=torch.int32, device=DEVICE).to(torch.int16).view(torch.bfloat16)
    out = torch.empty(every.shape, dtype=torch.float32, device=DEVICE)
    _widen[(every.numel() // BLOCK,)](every, out, BLOCK=BLOCK)
    assert torch.equal(out.view(torch.int32), every.float().view(torch.int32))


def test_fp32_narrows_as_torch_rounds():
    """Random fp32 bits, every bf16 midpoint (ties to even), and the carries into the exponent and into
    inf; NaN narrows to 0x7FC0 on every backend (the GPU's own cvt gives 0x7FFF: the helper replaces it)."""
    generator = torch.Generator(device=DEVICE).manual_seed(0)
    random = torch.randint(-2**31, 2**31, (2**16,), generator=generator, device=DEVICE, dtype=torch.int64)
    midpoints = (torch.arange(2**16, device=DEVICE, dtype=torch.int64) << 16) | 0x8000
    edges = torch.tensor([0x7F7FFFFF, 0x7F7F8000, 0xFF7F8000, 0x3F80FFFF, 0x00008000, 0x00018000, 0x7F800000,
                          0xFFFFFFFF], device=DEVICE)
    bits = torch.cat([random, midpoints, edges])
    bits = torch.cat([bits, bits[:(-bits.numel()) % BLOCK]])
    values = bits.to(torch.int32).view(torch.float32)
    out = torch.empty(values.shape, dtype=torch.bfloat16, device=DEVICE)
    _narrow[(values.numel() // BLOCK,)](values, out, BLOCK=BLOCK)
    nan = values.isnan()
    assert torch.equal(out.view(torch.int16)[~nan], values.bfloat16().view(torch.int16)[~nan])
    assert (out.view(torch.int16)[nan] == 0x7FC0).all()


def test_float64_rounds_to_bf16_once():
    """Against the nearest of each result's two bf16 neighbours, on values spread over every binade."""
    generator = torch.Generator().manual_seed(1)
    values = torch.randn(2**18, generator=generator, dtype=torch.float64) * \
        torch.exp2(torch.randint(-140, 128, (2**18,), generator=generator).double())
    rounded = round_float64_to_bf16(values)
    finite = rounded.isfinite()
    as_bf16 = rounded[finite].float().bfloat16()
    assert torch.equal(as_bf16.double(), rounded[finite])   # every result is a bf16
    bits = as_bf16.view(torch.int16).int()
    for step in (-1, 1):
        neighbour = (bits + step).to(torch.int16).view(torch.bfloat16).double()
        usable = neighbour.isfinite()
        distance = (values[finite] - rounded[finite]).abs()
        assert (distance <= (values[finite] - neighbour).abs())[usable].all()
    # past the midpoint above the largest bf16: inf; torch's cast, rounding twice, gets 1 + 2**-8 + 2**-40 wrong
    assert round_float64_to_bf16(torch.tensor([3.3962e38, 1 + 2**-8 + 2**-40], dtype=torch.float64)).tolist() == \
        [torch.inf, 1.0078125]
