"""The NVFP4 reference (``quant/nvfp4_quantize`` and its dequantization) against hand-worked examples.

The hand-worked examples are literals derived on paper (comments show the steps); the fp32 chain of
the contract is also replayed with numpy float32 scalars, an IEEE arithmetic independent of torch.
Each check is also run with one building block of the reference swapped for a wrong one (negative
controls), to prove it can fail.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import pytest
import torch

import references.formats.nvfp4 as nvfp4_module
from references.formats import (
    e2m1_decode,
    e2m1_encode,
    nvfp4_dequantize,
    nvfp4_global_scale,
    nvfp4_quantize,
    pack_nibbles,
    unpack_nibbles,
)
from suites.quant import wrong_encoders
from suites.quant.exact_rounding import random_float32

pytestmark = pytest.mark.cpu


# ---------------------------------------------------------------------------------------------------
# The premise: float32 arithmetic of the CPU backend is IEEE round-to-nearest-even, subnormals kept.


def _finite_pairs(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = random_float32(count, seed), random_float32(count, seed + 1)
    keep = a.isfinite() & b.isfinite() & (b != 0)
    return a[keep], b[keep]


IEEE_OPERATIONS = {
    # name: (float32 torch form used by the references, exact float64 form rounded once to float32)
    "tensor * tensor": (lambda a, b: a * b, lambda a, b: a * b),
    "tensor / tensor": (lambda a, b: a / b, lambda a, b: a / b),
    "tensor / 6": (lambda a, b: a / 6, lambda a, b: a / 6),
    "torch.reciprocal": (lambda a, b: torch.reciprocal(b), lambda a, b: 1 / b),
}


def ieee_mismatches(float32_op, exact_op, a: torch.Tensor, b: torch.Tensor) -> int:
    # float64 holds every product of two float32 exactly, and a quotient rounded to 53 bits then to
    # 24 is the correctly rounded quotient (53 >= 2 * 24 + 2): the float64 form is exact RNE.
    got = float32_op(a, b)
    expected = exact_op(a.double(), b.double()).float()
    same = (got.view(torch.int32) == expected.view(torch.int32)) | (got.isnan() & expected.isnan())
    return int((~same).sum())


@pytest.mark.parametrize("name", IEEE_OPERATIONS)
def test_cpu_float32_arithmetic_is_ieee_rne(name):
    a, b = _finite_pairs(2**18, seed=7)
    assert ieee_mismatches(*IEEE_OPERATIONS[name], a, b) == 0


def test_ieee_check_rejects_number_divided_by_tensor():
    # ``2688 / amax`` is ``amax.reciprocal() * 2688`` in PyTorch: two roundings (why
    # nvfp4_global_scale divides a tensor by a tensor). amax = 80 is one input where it shows.
    amax = torch.tensor([80.0, 93.5, 70.0])
    numerator = torch.full_like(amax, 2688.0)
    assert ieee_mismatches(lambda a, b: 2688 / b, lambda a, b: a / b, numerator, amax) > 0
    assert ieee_mismatches(lambda a, b: a / b, lambda a, b: a / b, numerator, amax) == 0


def test_global_scale_is_one_division_and_one_when_amax_is_zero():
    x = torch.tensor([[80.0, -2.0]], dtype=torch.bfloat16)
    assert nvfp4_global_scale(x).item() == float(np.float32(2688) / np.float32(80))
    assert nvfp4_global_scale(torch.zeros(2, 16, dtype=torch.bfloat16)).tolist() == [1.0]
    assert nvfp4_global_scale(x).dtype == torch.float32


# ---------------------------------------------------------------------------------------------------
# Hand-worked examples


@dataclasses.dataclass(frozen=True)
class HandWorked:
    x: list[list[float]]
    global_scale: float
    packed: list[list[int]]
    block_scales: list[list[float]]


def _row(*blocks: list[float]) -> list[float]:
    return [value for block in blocks for value in block + [0.0] * (16 - len(block))]


# global_scale = 1, so sf = e4m3(bmax / 6) and out_scale = 1 / sf.
EXAMPLE_UNIT_SCALE = HandWorked(
    x=[
        # block 0: bmax 12 -> sf 2 -> out_scale 0.5; scaled: 6 -6 .25 .75 1.25 1.75 2.5 3.5 5 -0 -.125 2 3 4
        # 4.5 5.5 -> codes 7 15 0 2 2 4 4 6 6 8 8 4 5 6 6 7 (every tie of the grid goes to the even index).
        # block 1: zeros, two of them -0.0 -> sf 0 -> out_scale 0 -> codes 0 8 0 ... 0 8 0.
        _row([12, -12, 0.5, 1.5, 2.5, 3.5, 5, 7, 10, -0.0, -0.25, 4, 6, 8, 9, 11],
             [0, -0.0] + [0] * 12 + [-0.0, 0]),
        # block 0: bmax 4096 -> 4096 / 6 = 682.7 saturates to sf 448 -> out_scale 1 / 448; scaled 9.14
        # -6.0 3.0 0.22 -0.22 -> codes 7 15 5 0 8.
        # block 1: all negative and tiny: bf16(0.01) = 0.010009765625, / 6 = 0.001668 -> the subnormal
        # sf 2**-9 (code 1) -> out_scale 512; scaled -5.125 -0.5117 -0.000512 -> codes 15 9 8 ... 8.
        _row([4096, -2688, 1344, 100, -100], [-0.01, -0.001] + [-1e-6] * 14),
    ],
    global_scale=1.0,
    packed=[
        [0xF7, 0x20, 0x42, 0x64, 0x86, 0x48, 0x65, 0x76, 0x80, 0, 0, 0, 0, 0, 0, 0x08],
        [0xF7, 0x05, 0x08, 0, 0, 0, 0, 0, 0x9F, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88],
    ],
    block_scales=[[2.0, 0.0], [448.0, 2.0**-9]],
)

# global_scale = fp32(2688 / 70) = 0x1.333334p+5. Block 1 (bmax 37.75): 37.75 / 6 = 0x1.92aaaap+2,
# times global_scale = 241.6000061 -> sf 240; 1 / global_scale = 0x1.aaaaaap-6; 240 * that = 6.25
# exactly; out_scale = 1 / 6.25 = 0x1.47ae14p-3. Then 1.5625, 7.8125, 15.625, 31.25 times out_scale land
# EXACTLY on the midpoints 0.25, 1.25, 2.5, 5 -> even codes 0, 2, 4, 6. Computing out_scale as
# global_scale / sf instead gives 0x1.47ae16p-3, one ulp more, and the odd codes 1, 3, 5, 7.
# Block 0: 70 / 6 * global_scale = 448.00003 -> saturates to 448; 70 * out_scale ~ 6 -> code 7.
EXAMPLE_TIES_AFTER_SCALING = HandWorked(
    x=[_row([70], [37.75, 1.5625, 7.8125, 15.625, 31.25, -1.5625, -7.8125])],
    global_scale=float(np.float32(2688) / np.float32(70)),
    packed=[[0x07, 0, 0, 0, 0, 0, 0, 0, 0x07, 0x42, 0x86, 0x0A, 0, 0, 0, 0]],
    block_scales=[[448.0, 240.0]],
)

# A block scale exactly on an E4M3 tie, reached only through the IEEE division bmax / 6:
# 1.015625 / 6 = 0x1.5aaaaap-3 and global_scale 0x1.91b91cp+2 times that = 1.0625 exactly, the tie of
# 1.0 (code 0x38, even) and 1.125 (0x39) -> sf 1.0. Multiplying by fp32(1 / 6) instead gives
# 0x1.5aaaacp-3, then 1.0625001 -> 1.125 (TensorRT-LLM's vecMax * rcp(6) has this form).
# out_scale = 1 / (1.0 * 0x1.464646p-3) = 0x1.91b91cp+2; codes 1.015625 -> 6.375 -> 7,
# -0.5 -> -3.138 -> 13, 0.25 -> 1.569 -> 1.5, code 3.
EXAMPLE_SCALE_TIE = HandWorked(
    x=[_row([1.015625, -0.5, 0.25])],
    global_scale=float.fromhex("0x1.91b91cp+2"),
    packed=[[0xD7, 0x03, 0, 0, 0, 0, 0, 0]],
    block_scales=[[1.0]],
)

HAND_WORKED = {"unit_scale": EXAMPLE_UNIT_SCALE, "ties_after_scaling": EXAMPLE_TIES_AFTER_SCALING,
               "scale_tie": EXAMPLE_SCALE_TIE}


def hand_worked_mismatches(quantize: Callable, example: HandWorked) -> list[str]:
    x = torch.tensor(example.x, dtype=torch.bfloat16)
    packed, block_scales = quantize(x, torch.tensor([example.global_scale], dtype=torch.float32))
    found = []
    if packed.tolist() != example.packed:
        found.append(f"packed {[[hex(b) for b in row] for row in packed.tolist()]}")
    if block_scales.dtype != torch.float8_e4m3fn or block_scales.float().tolist() != example.block_scales:
        found.append(f"block_scales {block_scales.float().tolist()} ({block_scales.dtype})")
    return found


@pytest.mark.parametrize("name", HAND_WORKED)
def test_quantize_hand_worked(name):
    assert hand_worked_mismatches(nvfp4_quantize, HAND_WORKED[name]) == []


def test_ties_after_scaling_replayed_in_numpy_float32():
    """The contract's fp32 chain for block 1 of EXAMPLE_TIES_AFTER_SCALING, in numpy's IEEE float32."""
    f32 = np.float32
    global_scale = f32(2688) / f32(70)
    assert float(global_scale).hex() == "0x1.3333340000000p+5"
    scale_before_cast = global_scale * (f32(37.75) / f32(6))
    assert 232 < scale_before_cast < 248  # nearest E4M3 neighbours are 224, 240, 256: sf = 240
    out_scale = f32(1) / (f32(240) * (f32(1) / global_scale))
    assert float(out_scale).hex() == "0x1.47ae140000000p-3"
    landed = [float(f32(x) * out_scale) for x in (1.5625, 7.8125, 15.625, 31.25)]
    assert landed == [0.25, 1.25, 2.5, 5.0]
    assert float(global_scale / f32(240)).hex() == "0x1.47ae160000000p-3"  # the form the contract avoids


# Each wrong building block, patched into the reference, and the example that must then fail.
NEGATIVE_CONTROLS = [
    ("e2m1_encode", wrong_encoders.e2m1_ties_away_from_zero, "unit_scale"),
    ("e2m1_encode", wrong_encoders.e2m1_ties_away_from_zero, "ties_after_scaling"),
    ("e2m1_encode", wrong_encoders.e2m1_no_saturation, "unit_scale"),
    ("e2m1_encode", wrong_encoders.e2m1_sign_from_comparison, "unit_scale"),
    ("pack_nibbles", wrong_encoders.pack_high_nibble_first, "unit_scale"),
    ("pack_nibbles", wrong_encoders.pack_high_nibble_first, "ties_after_scaling"),
    ("e4m3_satfinite_rne", wrong_encoders.e4m3_nan_on_overflow, "unit_scale"),
    ("e4m3_satfinite_rne", wrong_encoders.e4m3_flush_subnormals, "unit_scale"),
]


@pytest.mark.parametrize("block, wrong, example", NEGATIVE_CONTROLS,
                         ids=[f"{wrong.__name__}-{example}" for _, wrong, example in NEGATIVE_CONTROLS])
def test_hand_worked_check_rejects_wrong_building_block(monkeypatch, block, wrong, example):
    monkeypatch.setattr(nvfp4_module, block, wrong)
    assert hand_worked_mismatches(nvfp4_module.nvfp4_quantize, HAND_WORKED[example]) != []


# ---------------------------------------------------------------------------------------------------
# Dequantization


def test_dequantize_hand_worked():
    example = EXAMPLE_UNIT_SCALE
    packed = torch.tensor(example.packed, dtype=torch.uint8)
    block_scales = torch.tensor(example.block_scales).to(torch.float8_e4m3fn)
    w = nvfp4_dequantize(packed, block_scales, torch.tensor([example.global_scale]))
    # code value * sf * (1 / 1): block 0 of row 0 has sf 2, row 1 block 0 sf 448, block 1 sf 2**-9.
    assert w[0, :16].tolist() == [12, -12, 0, 2, 2, 4, 4, 8, 8, -0.0, -0.0, 4, 6, 8, 8, 12]
    assert w[0, 9].signbit() and w[0, 10].signbit()
    assert w[0, 16:].tolist() == [0.0] * 16 and w[0, 17].signbit() and w[0, 30].signbit()
    assert w[1, :5].tolist() == [6 * 448, -6 * 448, 3 * 448, 0, -0.0]
    assert w[1, 16:19].tolist() == [-6 * 2.0**-9, -0.5 * 2.0**-9, -0.0]


def test_dequantize_is_the_contract_formula_left_to_right():
    x = (torch.randn(8, 64, generator=torch.Generator().manual_seed(5)) * 3).bfloat16()
    global_scale = nvfp4_global_scale(x)
    packed, block_scales = nvfp4_quantize(x, global_scale)
    codes = unpack_nibbles(packed)
    decode_scale = np.float32(1) / np.float32(global_scale.item())
    expected = [[float(np.float32(e2m1_decode(codes[r, c:c + 1]).item())
                       * np.float32(block_scales[r, c // 16].float().item()) * decode_scale)
                 for c in range(64)] for r in range(8)]
    assert nvfp4_dequantize(packed, block_scales, global_scale).tolist() == expected


@pytest.mark.parametrize("global_scale", [1.0, 2.0**-5, 2.0**7])
def test_values_on_the_nvfp4_grid_survive_quantize_then_dequantize(global_scale):
    """x = code value * 2**e / global_scale with a ±6 in every block: quantize finds sf = 2**e and
    out_scale = global_scale / 2**e exactly, so every code, every scale and the dequantized x come back."""
    generator = torch.Generator().manual_seed(11)
    rows, blocks = 6, 5
    codes = torch.randint(0, 16, (rows, blocks, 16), generator=generator).to(torch.uint8)
    codes[..., 0] = torch.where(torch.rand(rows, blocks, generator=generator) < 0.5, 7, 15).to(torch.uint8)
    exponents = torch.randint(-6, 9, (rows, blocks, 1), generator=generator)  # E4M3 normals 2**-6 .. 2**8
    scales = torch.pow(2.0, exponents.double()).float()
    x = (e2m1_decode(codes) * scales / global_scale).reshape(rows, blocks * 16)
    assert torch.equal(x.bfloat16().float(), x)  # exact in bf16: at most 2 significant bits
    packed, block_scales = nvfp4_quantize(x.bfloat16(), torch.tensor([global_scale]))
    assert torch.equal(unpack_nibbles(packed), codes.reshape(rows, -1))
    assert torch.equal(block_scales.float(), scales.reshape(rows, blocks))
    w = nvfp4_dequantize(packed, block_scales, torch.tensor([global_scale]))
    assert torch.equal(w.view(torch.int32), x.view(torch.int32))  # -0.0 included


def test_quantize_accepts_empty_and_strided_inputs():
    packed, block_scales = nvfp4_quantize(torch.zeros(0, 32, dtype=torch.bfloat16), torch.tensor([1.0]))
    assert packed.shape == (0, 16) and block_scales.shape == (0, 2)
    wide = torch.randn(4, 64, generator=torch.Generator().manual_seed(2)).bfloat16()
    strided = wide[::2, :32]
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in
               zip(nvfp4_quantize(strided, torch.tensor([3.0])),
                   nvfp4_quantize(strided.contiguous(), torch.tensor([3.0]))))


def test_out_of_contract_global_scales_follow_the_formula_literally():
    """Not a requirement on kernels (global_scale is positive and finite in every cell): the pinned
    answer of the reference, so that it does not drift. inf: sf = 448, 1 / inf = 0, out_scale = 1 / 0
    = inf, every element saturates and zeros become 0 * inf = NaN -> code 7; an all-zero block has
    sf = e4m3(inf * 0) = NaN. 0: sf = 0 everywhere, codes ±0."""
    x = torch.tensor([[1.0, 0.0, -2.0] + [0.0] * 13 + [0.0] * 16], dtype=torch.bfloat16)
    packed, block_scales = nvfp4_quantize(x, torch.tensor([torch.inf]))
    assert unpack_nibbles(packed).tolist() == [[7, 7, 15] + [7] * 29]
    assert block_scales[0, 0].item() == 448.0 and block_scales[0, 1].float().isnan()
    packed, block_scales = nvfp4_quantize(x, torch.tensor([0.0]))
    assert unpack_nibbles(packed).tolist() == [[0, 0, 8] + [0] * 29]
    assert block_scales.float().tolist() == [[0.0, 0.0]]


def test_quantize_codes_are_e2m1_of_x_times_out_scale():
    """The block structure, separately from the hand-worked literals: on random data, every code is
    e2m1(x * out_scale) with out_scale from that block's own scale, never a neighbour's."""
    x = (torch.randn(16, 80, generator=torch.Generator().manual_seed(9))
         * torch.logspace(-4, 4, 80)).bfloat16()
    global_scale = nvfp4_global_scale(x)
    packed, block_scales = nvfp4_quantize(x, global_scale)
    decode_scale = torch.reciprocal(global_scale)
    out_scale = torch.where(block_scales.float() == 0, 0.0,
                            torch.reciprocal(block_scales.float() * decode_scale))
    expected = e2m1_encode(x.float() * out_scale.repeat_interleave(16, dim=1))
    assert torch.equal(unpack_nibbles(packed), expected)


# ---------------------------------------------------------------------------------------------------
# Refused inputs: one table per function, each row a call that must raise naming the argument.


def _x(shape=(4, 32), dtype=torch.bfloat16, device="cpu"):
    return torch.ones(shape, dtype=dtype, device=device)


def _scale(values=(1.0,), dtype=torch.float32, device="cpu"):
    return torch.tensor(values, dtype=dtype, device=device)


QUANTIZE_REFUSALS = [
    ("x-not-a-tensor", lambda: {"x": [[1.0] * 16], "global_scale": _scale()}, "x", TypeError),
    ("x-1d", lambda: {"x": _x((32,)), "global_scale": _scale()}, "x", ValueError),
    ("x-3d", lambda: {"x": _x((2, 4, 32)), "global_scale": _scale()}, "x", ValueError),
    ("x-float32", lambda: {"x": _x(dtype=torch.float32), "global_scale": _scale()}, "x", TypeError),
    ("x-float16", lambda: {"x": _x(dtype=torch.float16), "global_scale": _scale()}, "x", TypeError),
    ("x-K-24", lambda: {"x": _x((4, 24)), "global_scale": _scale()}, "x", ValueError),
    ("x-K-8", lambda: {"x": _x((4, 8)), "global_scale": _scale()}, "x", ValueError),
    ("scale-python-float", lambda: {"x": _x(), "global_scale": 1.0}, "global_scale", TypeError),
    ("scale-float64", lambda: {"x": _x(), "global_scale": _scale(dtype=torch.float64)}, "global_scale", TypeError),
    ("scale-bf16", lambda: {"x": _x(), "global_scale": _scale(dtype=torch.bfloat16)}, "global_scale", TypeError),
    ("scale-two-elements", lambda: {"x": _x(), "global_scale": _scale((1.0, 2.0))}, "global_scale", ValueError),
    ("scale-empty", lambda: {"x": _x(), "global_scale": _scale(())}, "global_scale", ValueError),
    ("scale-other-device", lambda: {"x": _x(), "global_scale": _scale(device="meta")}, "x", ValueError),
]

DEQUANTIZE_REFUSALS = [
    ("packed-int8", lambda: {"packed": _x((4, 16), torch.int8), "block_scales": _x((4, 2), torch.float8_e4m3fn),
                             "global_scale": _scale()}, "packed", TypeError),
    ("packed-1d", lambda: {"packed": _x((16,), torch.uint8), "block_scales": _x((4, 2), torch.float8_e4m3fn),
                           "global_scale": _scale()}, "packed", ValueError),
    ("packed-K-8", lambda: {"packed": _x((4, 4), torch.uint8), "block_scales": _x((4, 1), torch.float8_e4m3fn),
                            "global_scale": _scale()}, "packed", ValueError),
    ("scales-float32", lambda: {"packed": _x((4, 16), torch.uint8), "block_scales": _x((4, 2), torch.float32),
                                "global_scale": _scale()}, "block_scales", TypeError),
    ("scales-shape", lambda: {"packed": _x((4, 16), torch.uint8), "block_scales": _x((4, 4), torch.float8_e4m3fn),
                              "global_scale": _scale()}, "block_scales", ValueError),
    ("scale-two-elements", lambda: {"packed": _x((4, 16), torch.uint8),
                                    "block_scales": _x((4, 2), torch.float8_e4m3fn),
                                    "global_scale": _scale((1.0, 2.0))}, "global_scale", ValueError),
]


def _snapshot(arguments: dict) -> dict:
    return {name: value.clone() for name, value in arguments.items()
            if isinstance(value, torch.Tensor) and value.device.type != "meta"}


def _assert_refused(function, make, argument, error):
    arguments = make()
    before = _snapshot(arguments)
    with pytest.raises(error, match=f"^{argument}: .+ — .+") as refused:
        function(**arguments)
    for name, value in before.items():
        assert torch.equal(arguments[name].view(torch.uint8), value.view(torch.uint8)), f"{name} was mutated"


@pytest.mark.parametrize("make, argument, error", [row[1:] for row in QUANTIZE_REFUSALS],
                         ids=[row[0] for row in QUANTIZE_REFUSALS])
def test_quantize_refuses(make, argument, error):
    _assert_refused(nvfp4_quantize, make, argument, error)


@pytest.mark.parametrize("make, argument, error", [row[1:] for row in DEQUANTIZE_REFUSALS],
                         ids=[row[0] for row in DEQUANTIZE_REFUSALS])
def test_dequantize_refuses(make, argument, error):
    _assert_refused(nvfp4_dequantize, make, argument, error)


def test_pack_nibbles_is_what_quantize_packs_with():
    # The packing of the quantize contract is the one pinned in test_formats, not a local variant.
    assert nvfp4_module.pack_nibbles is pack_nibbles and nvfp4_module.e2m1_encode is e2m1_encode
