"""nvfp4_quantize: every cell through the whole battery, and the battery against wrong quantizers."""
from __future__ import annotations

import dataclasses
import inspect
from fractions import Fraction

import pytest
import torch
import triton
import triton.language as tl

import numpy as np

from ops.quant import nvfp4_quantize as kernel_module
from ops.quant.nvfp4_quantize import (
    ENTRY,
    ONE_SIXTH,
    _e2m1_index_at_bit_22,
    _e2m1_satfinite_rne,
    _e4m3_satfinite_rne,
    _e4m3_satfinite_rne_cvt,
    _block_max_bf16x2,
    _nibble_at_bit_28,
)
from ops.triton_backend import interpreting
from references.formats import (
    E2M1_MAX,
    E2M1_MIDPOINTS,
    E2M1_VALUES,
    E4M3_MAX,
    NVFP4_BLOCK,
    e2m1_encode,
    e4m3_satfinite_rne,
    nvfp4_global_scale,
    nvfp4_quantize,
)
from references.quant.hard_cases import GLOBAL_SCALE_MODES, HARD_BLOCK_KINDS, hard_input
from suites.certification import arch_marks, cell_params, machine_device
from suites.op_suite import OpSuite
from suites.quant import nvfp4_quantize_impls as impls
from suites.quant import wrong_encoders
from suites.quant.exact_rounding import float32_nearest, random_float32

pytestmark = arch_marks(ENTRY.archs)


# (wrong implementation, the cell whose corners reach its bug, the oracle that must catch it); the
# corners of decode_activations reach every global-scale mode, hence every bug below, without a draw.
WRONG = [
    ("approximate_division_emulated", "decode_activations", "parity"),
    ("torch_one_division", "decode_activations", "parity"),
    ("trtllm_block_max_test", "decode_activations", "parity"),
    ("torchao_scale_clamp", "decode_activations", "parity"),
    ("ties_away_from_zero", "decode_activations", "parity"),
    ("sign_from_comparison", "decode_activations", "parity"),
    ("high_nibble_first", "decode_activations", "parity"),
    ("flushed_subnormal_scales", "decode_activations", "parity"),
    ("flushed_subnormal_inputs", "decode_activations", "parity"),
    ("tail_left_zero", "decode_activations", "parity"),
    ("rows_read_as_contiguous", "decode_activations", "parity"),
    ("missing_refusal", "decode_activations", "refusals"),
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_via_grid_search")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test()
test_battery_accepts_another_correct_implementation = SUITE.accepts_test()


# -- the strategy reaches the hard cases on purpose -------------------------------------------------
HARD_CASES = ([f"{m}_{where}" for m in E2M1_MIDPOINTS for where in ("on_midpoint", "one_ulp_above", "one_ulp_below")]
              + ["zero_block", "all_negative_tiny_block", "saturating_block", "scale_underflow", "out_scale_overflow",
                 "scale_tie_only_ieee_division_reaches", "K_not_a_multiple_of_64"])


def hard_cases_in(x: torch.Tensor, global_scale: torch.Tensor) -> set[str]:
    """Which of HARD_CASES one input reaches, measured on the contract's own intermediate values.

    Measured on the CPU: on CUDA, torch divides a tensor by a Python number as a multiplication by its
    float32 reciprocal, so the formula run there is the reciprocal form this census tells apart.
    """
    x, global_scale = x.cpu(), global_scale.cpu()
    rows, cols = x.shape
    blocks = x.float().reshape(rows, cols // NVFP4_BLOCK, NVFP4_BLOCK)
    _, block_scales = nvfp4_quantize(x, global_scale)
    sf = block_scales.float()
    out_scale = torch.where(sf == 0, 0.0, torch.reciprocal(sf * torch.reciprocal(global_scale)))
    scaled = (blocks * out_scale[..., None]).abs()
    found = set()
    for m in E2M1_MIDPOINTS:
        midpoint = torch.tensor(m, device=x.device)
        for where, value in (("on_midpoint", midpoint), ("one_ulp_above", torch.nextafter(midpoint, midpoint + 1)),
                             ("one_ulp_below", torch.nextafter(midpoint, midpoint - 1))):
            if (scaled == value).any():
                found.add(f"{m}_{where}")
    nonzero = (blocks != 0).any(dim=-1)
    block_max = blocks.abs().amax(dim=-1)
    by_reciprocal = global_scale * (block_max * torch.reciprocal(torch.tensor(6.0, device=x.device)))
    cases = {
        "zero_block": ~nonzero,
        "all_negative_tiny_block": blocks.signbit().all(dim=-1) & nonzero & (sf > 0) & (sf < 2.0**-6),
        "saturating_block": (sf == E4M3_MAX) & (scaled > E2M1_MAX).any(dim=-1),
        "scale_underflow": (sf == 0) & nonzero,
        "out_scale_overflow": (sf != 0) & out_scale.isinf(),
        "scale_tie_only_ieee_division_reaches":
            e4m3_satfinite_rne(by_reciprocal).view(torch.uint8) != block_scales.view(torch.uint8),
    }
    found |= {name for name, where in cases.items() if where.any()}
    if cols % 64:
        found.add("K_not_a_multiple_of_64")
    return found


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_corners_reach_every_hard_case(cell):
    device = machine_device()
    strategy = ENTRY.strategy_module
    corners = strategy.corners(cell, device)
    reached = set().union(*(hard_cases_in(**strategy.build(recipe, device)) for recipe in corners))
    assert reached == set(HARD_CASES), f"not reached: {sorted(set(HARD_CASES) - reached)}"


def test_hard_case_census_can_miss():
    """The census is not vacuous: plain Gaussian data reaches almost none of it."""
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0)).bfloat16()
    assert len(hard_cases_in(x, nvfp4_global_scale(x))) < len(HARD_CASES) // 2


# -- the kernel's block quotient on a GPU, proved for every input -------------------------------------
def test_fused_quotient_is_the_ieee_quotient_for_every_bf16_block_max():
    """On a GPU the kernel computes bmax / 6 as q = fl(bmax * c), q + fl(fl(bmax - 6 q) * c) with
    c = fl(1/6), each step one float32 rounding (two FMAs): exact rational arithmetic shows that is the
    IEEE quotient for every positive finite bf16 bmax, subnormals included (0 gives 0)."""
    one_sixth = Fraction(float(ONE_SIXTH.value))
    assert one_sixth == float32_nearest(Fraction(1, 6))
    bits = torch.arange(1, 0x7F80, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float().tolist()
    wrong = []
    for block_max in map(Fraction, bits):
        quotient = float32_nearest(block_max * one_sixth)
        residual = float32_nearest(block_max - 6 * quotient)
        if float32_nearest(quotient + residual * one_sixth) != float32_nearest(block_max / 6):
            wrong.append(float(block_max))
    assert not wrong, f"{len(wrong)} block maxima, e.g. {wrong[:3]}"


def test_the_quotient_proof_can_fail():
    """The uncorrected product fl(bmax * fl(1/6)) is not the IEEE quotient for some bf16 bmax."""
    one_sixth = float32_nearest(Fraction(1, 6))
    assert any(float32_nearest(Fraction(b) * one_sixth) != float32_nearest(Fraction(b) / 6)
               for b in (1.0, 3.0, 5.0, 7.0, 11.0, 13.0, 100.0, 1000.0, 12345.0))


# -- the kernel's rounding helpers, value by value, against the format references ----------------------
@triton.jit
def _round_elementwise(values_ptr, e2m1_ptr, e4m3_code_ptr, e4m3_value_ptr, count, BLOCK: tl.constexpr,
                       FLOOR: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < count
    values = tl.load(values_ptr + offsets, mask=live, other=0.0)
    tl.store(e2m1_ptr + offsets, _e2m1_satfinite_rne(values, FLOOR).to(tl.uint8), mask=live)
    code, value = _e4m3_satfinite_rne(values)
    tl.store(e4m3_code_ptr + offsets, code.to(tl.uint8), mask=live)
    tl.store(e4m3_value_ptr + offsets, value, mask=live)


def _with_neighbours(centres: torch.Tensor, ulps: int = 3) -> torch.Tensor:
    """Each value, both signs, and the ``ulps`` float32 neighbours on either side of each."""
    found = [centres]
    for direction in (torch.inf, -torch.inf):
        step = centres
        for _ in range(ulps):
            step = torch.nextafter(step, torch.full_like(step, direction))
            found.append(step)
    values = torch.cat(found)
    return torch.cat([values, -values])


def _kernel_rounding(values: torch.Tensor, e2m1_floor: float = 0.0):
    values = values.to(machine_device())
    e2m1 = torch.empty(values.shape, dtype=torch.uint8, device=values.device)
    e4m3_code, e4m3_value = torch.empty_like(e2m1), torch.empty_like(values)
    block = 4096
    _round_elementwise[(triton.cdiv(values.numel(), block),)](values, e2m1, e4m3_code, e4m3_value, values.numel(),
                                                               BLOCK=block, FLOOR=e2m1_floor)
    return values, e2m1, e4m3_code, e4m3_value


def _e2m1_probe_values() -> torch.Tensor:
    """Not NaN: the kernel never rounds one (blocks whose out_scale overflows are floored at 6 instead)."""
    grid = torch.tensor(E2M1_VALUES + E2M1_MIDPOINTS + (7.0, 8.0, 1e30, 2.0**-126, 2.0**-149, torch.inf))
    random = random_float32(2**16, seed=3)
    return torch.cat([_with_neighbours(grid), random[~random.isnan()]])


def _e4m3_probe_values() -> torch.Tensor:
    codes = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    ties = (codes[:-1] + codes[1:]) / 2
    finite = random_float32(2**16, seed=4)
    return torch.cat([_with_neighbours(torch.cat([codes, ties, torch.tensor([464.0, 1e30, torch.inf])])),
                      finite[finite.isfinite()]])


def test_kernel_e2m1_rounding_is_the_reference_on_every_midpoint_its_neighbours_and_random_bits():
    values, codes, _, _ = _kernel_rounding(_e2m1_probe_values())
    expected = e2m1_encode(values)
    assert torch.equal(codes, expected), f"{int((codes != expected).sum())} codes differ"


def test_kernel_e2m1_rounding_floored_at_6_is_6_with_the_sign():
    """The floor of blocks whose out_scale overflows: every magnitude, zero included, saturates."""
    values, codes, _, _ = _kernel_rounding(_e2m1_probe_values(), e2m1_floor=6.0)
    expected = (7 | (values.signbit().to(torch.uint8) << 3)).cpu()
    assert torch.equal(codes.cpu(), expected), f"{int((codes.cpu() != expected).sum())} codes differ"


def test_kernel_e4m3_rounding_is_the_reference_on_every_code_every_tie_and_random_bits():
    values, _, code, value = _kernel_rounding(_e4m3_probe_values())
    expected = e4m3_satfinite_rne(values)
    assert torch.equal(code, expected.view(torch.uint8)), f"{int((code != expected.view(torch.uint8)).sum())} differ"
    assert torch.equal(value, expected.float())


@pytest.mark.parametrize("probe, reference, wrong", [
    (_e2m1_probe_values, e2m1_encode, wrong_encoders.e2m1_ties_away_from_zero),
    (_e2m1_probe_values, e2m1_encode, wrong_encoders.e2m1_no_saturation),
    (_e2m1_probe_values, e2m1_encode, wrong_encoders.e2m1_sign_from_comparison),
    (_e4m3_probe_values, lambda v: e4m3_satfinite_rne(v).view(torch.uint8),
     lambda v: wrong_encoders.e4m3_flush_subnormals(v).view(torch.uint8)),
    (_e4m3_probe_values, lambda v: e4m3_satfinite_rne(v).view(torch.uint8),
     lambda v: wrong_encoders.e4m3_nan_on_overflow(v).view(torch.uint8)),
], ids=["e2m1_ties_away", "e2m1_no_saturation", "e2m1_sign_from_comparison", "e4m3_flush_subnormals",
        "e4m3_nan_on_overflow"])
def test_kernel_rounding_probes_tell_a_wrong_rounding(probe, reference, wrong):
    """The probe values reach what a wrong rounding gets wrong: the value-by-value checks can fail."""
    values = probe()
    finite = values.isfinite() if reference is e2m1_encode else torch.ones_like(values, dtype=torch.bool)
    assert not torch.equal(reference(values[finite]), wrong(values[finite]))


# -- the lean E2M1 path (E2M1Path.lean_rounding) ------------------------------------------------------
@triton.jit
def _lean_codes(values_ptr, codes_ptr, count, BLOCK: tl.constexpr, FMA_ROUNDS_ONCE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < count
    values = tl.load(values_ptr + offsets, mask=live, other=0.0)
    nibble = _nibble_at_bit_28(_e2m1_index_at_bit_22(tl.minimum(tl.abs(values), 6.0), FMA_ROUNDS_ONCE), values)
    tl.store(codes_ptr + offsets, (nibble >> 28).to(tl.uint8), mask=live)


def test_lean_e2m1_rounding_is_the_reference_on_every_midpoint_its_neighbours_and_random_bits():
    """The lean path's rounding, value by value (on the CPU its interpreter twin, on a GPU the FMA)."""
    values = _e2m1_probe_values().to(machine_device())
    codes = torch.empty(values.shape, dtype=torch.uint8, device=values.device)
    block = 4096
    _lean_codes[(triton.cdiv(values.numel(), block),)](values, codes, values.numel(), BLOCK=block,
                                                        FMA_ROUNDS_ONCE=not interpreting())
    expected = e2m1_encode(values.cpu())
    assert torch.equal(codes.cpu(), expected), f"{int((codes.cpu() != expected).sum())} codes differ"


def _lean_index_single_rounding_fma(magnitude: np.ndarray) -> np.ndarray:
    """``_e2m1_index_at_bit_22`` as the GPU computes it (FMA_ROUNDS_ONCE): the FMA's one rounding is the
    float64 sum (exact: at most 47 significant bits here) rounded to float32."""
    scaled_bits = (magnitude * np.float32(2.0**-104)).view(np.uint32)
    scaled_power = np.maximum(scaled_bits & np.uint32(0x7F800000), np.uint32(0x0B800000)).view(np.float32)
    rounded = (magnitude.astype(np.float64) * 2.0**-126 + scaled_power.astype(np.float64)).astype(np.float32)
    return (rounded - scaled_power).view(np.uint32)


def test_lean_e2m1_rounding_with_one_fma_rounding_is_the_reference_near_every_value_and_midpoint():
    """The GPU form of the lean rounding (the interpreter cannot run it: its tl.fma rounds twice), modelled
    in numpy on every float32 within 2**16 ulps of each E2M1 value and midpoint, the subnormals' ends and
    2**20 random magnitudes in [0, 6]. (Every float32 in [0, 6], 1.09e9 of them, was checked the same way
    once: none differed, 75 s.)"""
    centres = np.array(E2M1_VALUES + E2M1_MIDPOINTS + (2.0**-126, 2.0**-149), dtype=np.float32).view(np.uint32)
    offsets = np.arange(-(2**16), 2**16 + 1, dtype=np.int64)
    bits = (centres.astype(np.int64)[:, None] + offsets[None, :]).ravel()
    random_bits = np.random.default_rng(5).integers(0, int(np.float32(6.0).view(np.uint32)) + 1, 2**20)
    bits = np.concatenate([bits, random_bits])
    bits = bits[(bits >= 0) & (bits <= int(np.float32(6.0).view(np.uint32)))].astype(np.uint32)
    magnitude = bits.view(np.float32)
    got = torch.from_numpy((_lean_index_single_rounding_fma(magnitude) >> 22).astype(np.uint8))
    expected = e2m1_encode(torch.from_numpy(magnitude.copy()))
    assert torch.equal(got, expected), f"{int((got != expected).sum())} of {len(bits)} differ"


def test_lean_single_rounding_model_can_fail():
    """The model above tells a wrong rounding: an FMA that rounded the subnormal product first (the
    interpreter's) moves codes at the midpoints' neighbours."""
    magnitude = np.nextafter(np.array(E2M1_MIDPOINTS, dtype=np.float32), np.float32(7.0))
    scaled_bits = (magnitude * np.float32(2.0**-104)).view(np.uint32)
    scaled_power = np.maximum(scaled_bits & np.uint32(0x7F800000), np.uint32(0x0B800000)).view(np.float32)
    twice = (magnitude * np.float32(2.0**-126) + scaled_power - scaled_power).view(np.uint32) >> 22
    assert not np.array_equal(twice, _lean_index_single_rounding_fma(magnitude) >> 22)


@pytest.mark.parametrize("mode", GLOBAL_SCALE_MODES)
def test_every_bench_variant_is_bitwise_the_default(mode):
    """Every plan of ``bench_variants`` (tiles, warps, E2M1 paths) gives the default plan's bytes, on
    hard blocks under every global-scale mode; the default gives the reference's."""
    x, global_scale = hard_input(12, 400, mode, HARD_BLOCK_KINDS, seed=11, device=machine_device())
    packed, scales = kernel_module.nvfp4_quantize(x, global_scale)
    reference_packed, reference_scales = nvfp4_quantize(x.cpu(), global_scale.cpu())
    assert torch.equal(packed.cpu(), reference_packed)
    assert torch.equal(scales.cpu().view(torch.uint8), reference_scales.view(torch.uint8))
    variants = kernel_module.bench_variants(x, global_scale)
    plans = {}  # the interpreter ignores num_warps: one run per tile and E2M1 path
    for label, variant in variants.items():
        plan = variant.__defaults__[0]
        plans.setdefault(dataclasses.replace(plan, num_warps=4) if interpreting() else plan, (label, variant))
    for label, variant in plans.values():
        variant_packed, variant_scales = variant(x, global_scale)
        assert torch.equal(variant_packed, packed), label
        assert torch.equal(variant_scales.view(torch.uint8), scales.view(torch.uint8)), label


@triton.jit
def _e4m3_by_cvt(values_ptr, code_ptr, value_ptr, count, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < count
    code, value = _e4m3_satfinite_rne_cvt(tl.load(values_ptr + offsets, mask=live, other=0.0))
    tl.store(code_ptr + offsets, code.to(tl.uint8), mask=live)
    tl.store(value_ptr + offsets, value, mask=live)


@pytest.mark.skipif(interpreting(), reason="inline PTX (cvt.rn.satfinite.e4m3x2.f32) runs on a GPU only")
def test_kernel_e4m3_by_cvt_is_the_reference_on_every_code_every_tie_and_random_bits():
    """The block scales by cvt (scales_by_cvt): the instruction against the reference, value by value."""
    values = _e4m3_probe_values().to(machine_device())
    code = torch.empty(values.shape, dtype=torch.uint8, device=values.device)
    value = torch.empty_like(values)
    block = 4096
    _e4m3_by_cvt[(triton.cdiv(values.numel(), block),)](values, code, value, values.numel(), BLOCK=block)
    expected = e4m3_satfinite_rne(values.cpu())
    differ = int((code.cpu() != expected.view(torch.uint8)).sum())
    assert differ == 0, f"{differ} codes differ"
    assert torch.equal(value.cpu(), expected.float())


def _prmt(a: np.ndarray, b: np.ndarray, selector: int) -> np.ndarray:
    """PTX ``prmt.b32`` generic mode (PTX ISA): bytes {b, a} numbered 0..7, a nibble per result byte, its
    msb replicating the selected byte's sign bit."""
    source = (b.astype(np.uint64) << np.uint64(32)) | a.astype(np.uint64)
    result = np.zeros(a.shape, dtype=np.uint64)
    for k in range(4):
        control = (selector >> (4 * k)) & 0xF
        byte = (source >> np.uint64(8 * (control & 7))) & np.uint64(0xFF)
        if control & 8:
            byte = np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0))
        result |= byte << np.uint64(8 * k)
    return result.astype(np.uint32)


def test_prmt_sign_gather_selectors_put_each_sign_on_its_nibble():
    """The PRMT signs' ``_sign_bytes`` (a GPU-only PTX block) modelled in numpy, with the two LOP3 masks after it,
    against the interpreter twin's sign bits: bit 8j + 3 from element 2j, 8j + 7 from 2j + 1."""
    source = inspect.getsource(kernel_module._sign_bytes.fn)
    assert "0x00FB" in source and "0xFB00" in source and "0x7610" in source
    bits = np.random.default_rng(6).integers(0, 2**32, (4096, 2, 4), dtype=np.uint64).astype(np.uint32)
    low, high = bits[:, 0], bits[:, 1]  # [n, 4]: y of elements 2j and 2j + 1

    def sign_bytes(y):
        return _prmt(_prmt(y[:, 0], y[:, 1], 0x00FB), _prmt(y[:, 2], y[:, 3], 0xFB00), 0x7610)

    got = (sign_bytes(low) & np.uint32(0x08080808)) | (sign_bytes(high) & np.uint32(0x80808080))
    j = np.arange(4, dtype=np.uint32)
    expected = np.bitwise_or.reduce(((low >> 31) << (8 * j + 3)) | ((high >> 31) << (8 * j + 7)), axis=1)
    assert np.array_equal(got, expected.astype(np.uint32))


@triton.jit
def _block_max_by_bf16x2(words_ptr, max_ptr, BLOCKS: tl.constexpr):
    block = tl.arange(0, BLOCKS)[:, None, None, None]
    word = block * 8 + tl.arange(0, 2)[None, None, :, None] * 4 + tl.arange(0, 4)[None, None, None, :]
    tl.store(max_ptr + tl.arange(0, BLOCKS)[:, None], _block_max_bf16x2(tl.load(words_ptr + word)))


@pytest.mark.skipif(interpreting(), reason="inline PTX (max.xorsign.abs.bf16x2) runs on a GPU only")
def test_block_max_by_bf16x2_is_the_float32_max_of_magnitudes():
    """The bf16x2 block max (block_max_by_bf16x2) against torch on random bf16 bit patterns (subnormals,
    both zeros, no NaN/inf)."""
    bits = torch.randint(-(2**15), 2**15, (64, 16), dtype=torch.int16, generator=torch.Generator().manual_seed(7))
    bits[(bits & 0x7F80) == 0x7F80] = 0x0001  # the contract's x is finite
    bits[3] = -(2**15)  # a block of -0.0
    x = bits.view(torch.bfloat16)
    words = x.contiguous().view(torch.int32).to(machine_device())
    block_max = torch.empty(64, 1, dtype=torch.float32, device=words.device)
    _block_max_by_bf16x2[(1,)](words, block_max, BLOCKS=64)
    assert torch.equal(block_max.cpu()[:, 0], x.float().abs().amax(dim=1))
