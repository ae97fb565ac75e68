"""Trust the oracle: our NVFP4 reference against torchao's, an independent public implementation.

torchao (``torchao.prototype.mx_formats.nvfp4_tensor.nvfp4_quantize``, version pinned in
``references/formats/TEST_DEPS.txt``, a test-only dependency) quantizes with a per-tensor scale too,
but differs from the contract by design in exactly three ways, each pinned below:

1. It clamps the block scale to at least the smallest normal E4M3, 2**-6, before the cast; the
   contract does not (subnormal scales and 0, as the hardware cast gives).
2. Its per-tensor scale is the DECODE scale ``amax / (448 * 6)`` and it divides by it; the
   contract's ``global_scale`` is the ENCODE scale ``448 * 6 / amax`` and multiplies. One division each,
   so the two scales are not exact reciprocals: a block scale near an E4M3 tie can round the other way.
3. It scales elements by ``(1 / decode_scale) / sf``; the contract by ``1 / (sf * (1 / global_scale))``.
   Off by an ulp on some blocks, which moves an element sitting on an E2M1 midpoint by one code.

Everything else (E2M1 round-to-nearest-even with sign kept, saturation, the E4M3 cast, nibble order)
agrees bitwise, which is what the first test shows; torchao's ``to_blocked`` (the cuBLAS scale layout)
is also our 128x4 swizzle, byte for byte.
"""
from __future__ import annotations

import pytest
import torch

import references.formats.nvfp4 as nvfp4_module
from references.formats import (
    E2M1_MIDPOINTS,
    e2m1_encode,
    nvfp4_global_scale,
    nvfp4_quantize,
    to_swizzled_128x4,
    unpack_nibbles,
)
from suites.quant import wrong_encoders
from references.quant.hard_cases import BLOCKS_PER_ROW, midpoint_landing_rows, nvfp4_hard_rows

pytestmark = pytest.mark.cpu

torchao_nvfp4 = pytest.importorskip(
    "torchao.prototype.mx_formats.nvfp4_tensor",
    reason="torchao is a test-only dependency: pip install --no-deps -r references/formats/TEST_DEPS.txt")

SMALLEST_NORMAL_E4M3 = 2.0**-6


def _both(x: torch.Tensor, global_scale: torch.Tensor, decode_scale: torch.Tensor, quantize=nvfp4_quantize):
    """(our codes, our scales, torchao codes, torchao scales), codes unpacked to [M, K/16, 16]."""
    packed, scales = quantize(x, global_scale)
    theirs_scales, theirs_packed = torchao_nvfp4.nvfp4_quantize(x, 16, per_tensor_scale=decode_scale)
    blocks = (x.shape[0], x.shape[1] // 16, 16)
    return (unpack_nibbles(packed).reshape(blocks), scales,
            unpack_nibbles(theirs_packed).reshape(blocks), theirs_scales)


def _bits(scales: torch.Tensor) -> torch.Tensor:
    return scales.view(torch.uint8)


def exact_reciprocal_mismatches(quantize, global_scale: float) -> list[str]:
    """With a power-of-two global scale, 1 / global_scale is exact and differences 2 and 3 vanish:
    what is left is torchao's clamp, pinned exactly, on data that reaches it."""
    x = nvfp4_hard_rows(global_scale, rows=64, seed=int(global_scale * 64))
    ours, ours_scales, theirs, theirs_scales = _both(
        x, torch.tensor([global_scale]), torch.tensor([1 / global_scale]), quantize)
    clamped = ours_scales.float() < SMALLEST_NORMAL_E4M3
    blocks = x.float().reshape(ours.shape)
    found = []
    # Where our block scale is a normal E4M3, the two agree on every bit.
    if not torch.equal(_bits(theirs_scales)[~clamped], _bits(ours_scales)[~clamped]):
        found.append("normal block scales differ")
    if not torch.equal(theirs[~clamped], ours[~clamped]):
        found.append("codes differ in blocks with a normal scale")
    # Elsewhere torchao uses 2**-6, so it scales by global_scale / 2**-6 (exact).
    if not (theirs_scales.float()[clamped] == SMALLEST_NORMAL_E4M3).all():
        found.append("torchao's scale of a clamped block is not 2**-6")
    if not torch.equal(theirs[clamped], e2m1_encode(blocks[clamped] * (global_scale / SMALLEST_NORMAL_E4M3))):
        found.append("torchao's codes of a clamped block are not e2m1(x * global_scale / 2**-6)")
    # The difference is real on this data: subnormal and zero scales, and codes that differ.
    if not ((ours_scales.float()[clamped] > 0).any() and (ours_scales.float()[clamped] == 0).any()):
        found.append("the data reaches no subnormal or no zero block scale")
    if torch.equal(theirs[clamped], ours[clamped]):
        found.append("the clamp changes no code on this data")
    return found


@pytest.mark.parametrize("global_scale", [2.0**-3, 1.0, 2.0**5])
def test_torchao_agrees_up_to_its_scale_clamp_when_the_scales_are_exact_reciprocals(global_scale):
    assert exact_reciprocal_mismatches(nvfp4_quantize, global_scale) == []


@pytest.mark.parametrize("block, wrong", [
    ("e2m1_encode", wrong_encoders.e2m1_ties_away_from_zero),
    ("e2m1_encode", wrong_encoders.e2m1_no_saturation),
    ("e2m1_encode", wrong_encoders.e2m1_sign_from_comparison),
    ("pack_nibbles", wrong_encoders.pack_high_nibble_first),
    ("e4m3_satfinite_rne", wrong_encoders.e4m3_flush_subnormals),
    ("e4m3_satfinite_rne", wrong_encoders.e4m3_nan_on_overflow),
], ids=lambda v: getattr(v, "__name__", v))
def test_crosscheck_rejects_reference_with_wrong_building_block(monkeypatch, block, wrong):
    monkeypatch.setattr(nvfp4_module, block, wrong)
    assert exact_reciprocal_mismatches(nvfp4_module.nvfp4_quantize, 1.0) != []


def test_torchao_decode_scale_convention_rounds_a_block_scale_the_other_way():
    """amax 56: global_scale = 2688 / 56 = 48 exactly. Block bmax 46: 46 / 6 = 7.6666665 (fp32), times
    48 = 368.0 (fp32), the exact tie between E4M3 352 and 384 -> even code, 384. torchao: decode scale
    fp32(56 / 2688) = 0.020833334, and 7.6666665 / 0.020833334 = 367.99997 -> 352."""
    x = torch.tensor([[56.0] + [0.0] * 15 + [46.0] + [0.0] * 15], dtype=torch.bfloat16)
    amax = torch.tensor(56.0)
    _, ours_scales, _, theirs_scales = _both(
        x, nvfp4_global_scale(x), torchao_nvfp4.per_tensor_amax_to_scale(amax))
    assert ours_scales.float().tolist() == [[448.0, 384.0]]
    assert theirs_scales.float().tolist() == [[448.0, 352.0]]


def test_torchao_element_scale_moves_elements_on_midpoints_by_one_code():
    """amax 87.5, block bmax 72.5: both get sf 384, but our out_scale puts 3.125, 9.375, 15.625,
    31.25, 62.5 one float32 ulp BELOW the midpoints 0.25, 0.75, 1.25, 2.5, 5 and torchao's puts them
    one ulp ABOVE: torchao's codes are one higher on exactly those five elements."""
    landing = [3.125, 9.375, 15.625, 31.25, 62.5]
    x = torch.tensor([[87.5] + [0.0] * 15 + [72.5] + landing + [0.0] * 10], dtype=torch.bfloat16)
    ours, ours_scales, theirs, theirs_scales = _both(
        x, nvfp4_global_scale(x), torchao_nvfp4.per_tensor_amax_to_scale(torch.tensor(87.5)))
    assert torch.equal(_bits(ours_scales), _bits(theirs_scales)) and ours_scales[0, 1].item() == 384.0
    assert ours[0, 1, 1:6].tolist() == [0, 1, 2, 4, 6]
    assert (theirs[0, 1, 1:6] - ours[0, 1, 1:6]).tolist() == [1] * 5
    assert torch.equal(theirs[0, 1, 6:], ours[0, 1, 6:]) and torch.equal(theirs[0, 0], ours[0, 0])


def _near_a_midpoint(values: torch.Tensor, ulps: int) -> torch.Tensor:
    magnitude = values.abs()
    near = torch.zeros_like(magnitude, dtype=torch.bool)
    for midpoint in E2M1_MIDPOINTS:
        ulp = torch.nextafter(torch.tensor(midpoint), torch.tensor(float("inf"))) - midpoint
        near |= (magnitude - midpoint).abs() <= ulps * ulp
    return near


def test_torchao_differs_only_in_the_three_pinned_ways_on_midpoint_landing_data():
    """With each side's own scale convention, on data built to sit on midpoints: every difference is
    (1) our scale below 2**-6, (2) scales one E4M3 step apart, or (3) equal scales and one E2M1 step
    on an element within 2 float32 ulps of a midpoint. Nothing else. (1) and (2) have their own
    tests above; this data is built to reach (3), and must."""
    codes_moved = 0
    for amax in (70.0, 87.5, 93.5, 56.0, 0.30078125, 1234.0):
        x = midpoint_landing_rows(amax, rows=48, seed=int(amax * 8))
        decode_scale = torchao_nvfp4.per_tensor_amax_to_scale(x.float().abs().amax())
        global_scale = nvfp4_global_scale(x)
        ours, ours_scales, theirs, theirs_scales = _both(x, global_scale, decode_scale)
        assert ours.shape[1] == BLOCKS_PER_ROW

        clamped = ours_scales.float() < SMALLEST_NORMAL_E4M3
        scale_step = (_bits(theirs_scales).int() - _bits(ours_scales).int()).abs()
        assert (scale_step[~clamped] <= 1).all(), f"amax {amax}: block scales more than one E4M3 step apart"

        code_differs = (theirs != ours) & ((scale_step == 0) & ~clamped)[..., None]
        sign_kept = (theirs & 0x8) == (ours & 0x8)
        one_step = ((theirs & 0x7).int() - (ours & 0x7).int()).abs() == 1
        out_scale = torch.reciprocal(ours_scales.float() * torch.reciprocal(global_scale))
        scaled = x.float().reshape(ours.shape) * out_scale[..., None]
        explained = sign_kept & one_step & _near_a_midpoint(scaled, ulps=2)
        assert (explained | ~code_differs).all(), f"amax {amax}: a code differs away from a midpoint"
        codes_moved += int(code_differs.sum())
    assert codes_moved > 0, "the data no longer reaches the rounding difference it was built for"


@pytest.mark.parametrize("rows, cols", [(1, 1), (129, 5), (300, 9), (256, 448)])
def test_torchao_to_blocked_is_our_128x4_swizzle(rows, cols):
    to_blocked = pytest.importorskip("torchao.prototype.mx_formats.utils").to_blocked
    scales = torch.randint(1, 256, (rows, cols), generator=torch.Generator().manual_seed(rows), dtype=torch.int32)
    scales = scales.to(torch.uint8)
    assert torch.equal(to_blocked(scales), to_swizzled_128x4(scales))
