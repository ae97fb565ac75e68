"""E2M1, E4M3 and nibble packing against an independent exact oracle, exhaustively where it is finite.

Each check is a function returning its mismatches, so that the same check is run on the reference
(must find none) and on each deliberately wrong encoder of ``wrong_encoders`` (must find the bug).
"""
from __future__ import annotations

import doctest
import math

import pytest
import torch

from references.formats import (
    E2M1_MIDPOINTS,
    E2M1_VALUES,
    E4M3_MAX,
    e2m1_decode,
    e2m1_encode,
    e4m3_satfinite_rne,
    pack_nibbles,
    unpack_nibbles,
)
import references.formats.e2m1
import references.formats.e4m3
import references.formats.nvfp4
import references.formats.scale_layout
from suites.quant import wrong_encoders
from suites.quant.exact_rounding import float32_neighbours, nearest_even_index, random_float32

pytestmark = pytest.mark.cpu

E2M1_GRID = torch.tensor(E2M1_VALUES, dtype=torch.float64)
FLOAT32_MAX = torch.finfo(torch.float32).max
FLOAT32_TINY = 2.0**-149  # smallest float32 subnormal


def _signed(values: torch.Tensor) -> torch.Tensor:
    return torch.cat([values, -values])


# ---------------------------------------------------------------------------------------------------
# E2M1


def e2m1_hard_values() -> torch.Tensor:
    """Every midpoint and every grid value of E2M1, one float32 ulp either side, both signs, and the
    values past the ends: zeros, subnormals, the saturation region, the largest float32, infinities."""
    landmarks = list(E2M1_MIDPOINTS) + list(E2M1_VALUES) + [7.0, 8.0, 12.0, 1e30, FLOAT32_MAX, FLOAT32_TINY]
    return _signed(float32_neighbours(landmarks))  # the neighbour above FLOAT32_MAX is inf


def e2m1_expected(values: torch.Tensor) -> torch.Tensor:
    index = nearest_even_index(values, E2M1_GRID)
    index = torch.where(values.isnan(), 7, index)  # the reference's pinned NaN choice (see e2m1)
    return (index | (values.signbit() & ~values.isnan()).long() << 3).to(torch.uint8)


def e2m1_mismatches(encode, values: torch.Tensor) -> list[tuple[float, int, int]]:
    got, expected = encode(values), e2m1_expected(values)
    wrong = (got != expected).nonzero().flatten().tolist()
    return [(values[i].item(), got[i].item(), expected[i].item()) for i in wrong]


def test_e2m1_encode_every_midpoint_and_grid_value_one_ulp_either_side():
    assert e2m1_mismatches(e2m1_encode, e2m1_hard_values()) == []


def test_e2m1_encode_random_bit_patterns():
    # 2**20 patterns: every binade, subnormals, NaN (-> code 7) and inf, at ~0.3 s on 2 cores.
    assert e2m1_mismatches(e2m1_encode, random_float32(2**20, seed=20)) == []


def test_e2m1_encode_pins_the_contract_ties_and_signs():
    # Written out by hand, independent of both the reference and the oracle.
    values = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.5, math.inf, -0.0, -1e-30, -0.25, -5.0,
                           math.nan])
    assert e2m1_encode(values).tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 7, 8, 8, 8, 14, 7]


@pytest.mark.parametrize("wrong_encode, caught_at", [
    (wrong_encoders.e2m1_ties_away_from_zero, 0.25),
    (wrong_encoders.e2m1_no_saturation, 8.0),
    (wrong_encoders.e2m1_sign_from_comparison, -0.0),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_e2m1_check_rejects_wrong_encoder(wrong_encode, caught_at):
    mismatches = e2m1_mismatches(wrong_encode, e2m1_hard_values())
    assert any(value == caught_at and math.copysign(1, value) == math.copysign(1, caught_at)
               for value, _, _ in mismatches), mismatches


def test_e2m1_decode_table():
    decoded = e2m1_decode(torch.arange(256, dtype=torch.int32).to(torch.uint8))
    expected = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    assert decoded[:16].tolist() == expected
    assert decoded[:16].signbit().tolist() == [False] * 8 + [True] * 8  # code 8 is -0.0, not +0.0
    assert decoded[16:].isnan().all(), "bytes that are not E2M1 codes must not decode to numbers"


def test_e2m1_encode_of_decode_is_identity():
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(e2m1_encode(e2m1_decode(codes)), codes)


# ---------------------------------------------------------------------------------------------------
# Nibble packing


def packing_mismatches(pack) -> list[tuple[int, int, int]]:
    """Every (low, high) pair of codes: byte must be ``low | high << 4`` (element 2j low)."""
    low, high = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
    pairs = torch.stack([low.flatten(), high.flatten()], dim=-1).to(torch.uint8)  # [256, 2]
    got = pack(pairs).flatten()
    expected = (pairs[:, 0] | pairs[:, 1] << 4).flatten()
    return [(pairs[i, 0].item(), pairs[i, 1].item(), got[i].item()) for i in (got != expected).nonzero().flatten()]


def test_pack_puts_element_2j_in_the_low_nibble():
    assert packing_mismatches(pack_nibbles) == []
    assert pack_nibbles(torch.tensor([[0x1, 0xA, 0xF, 0x0]], dtype=torch.uint8)).tolist() == [[0xA1, 0x0F]]


def test_pack_check_rejects_high_nibble_first():
    assert packing_mismatches(wrong_encoders.pack_high_nibble_first) != []


def test_pack_unpack_round_trip():
    every_byte = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(4, 64)
    assert torch.equal(pack_nibbles(unpack_nibbles(every_byte)), every_byte)
    codes = torch.randint(0, 16, (5, 48), generator=torch.Generator().manual_seed(1)).to(torch.uint8)
    assert torch.equal(unpack_nibbles(pack_nibbles(codes)), codes)


# ---------------------------------------------------------------------------------------------------
# E4M3


def e4m3_value_of_code(code: int) -> float:
    """E4M3 (fn) from its bits, as the OCP FP8 spec defines it: bias 7, no inf, NaN only at S.1111.111."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    if exponent == 0:
        return sign * mantissa * 2.0**-9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


E4M3_GRID = torch.tensor([e4m3_value_of_code(code) for code in range(0x7F)], dtype=torch.float64)  # +0 .. 448


def test_e4m3_decode_every_code():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    decoded = codes.view(torch.float8_e4m3fn).float()
    expected = torch.tensor([e4m3_value_of_code(code) for code in range(256)], dtype=torch.float32)
    assert torch.equal(decoded.isnan(), expected.isnan())
    finite = ~expected.isnan()
    assert torch.equal(decoded[finite], expected[finite])
    assert torch.equal(decoded[finite].signbit(), expected[finite].signbit())


def test_e4m3_every_code_round_trips():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    back = e4m3_satfinite_rne(codes.view(torch.float8_e4m3fn).float()).view(torch.uint8)
    is_nan = (codes & 0x7F) == 0x7F
    assert torch.equal(back[~is_nan], codes[~is_nan])  # -0.0 (0x80) included
    assert ((back[is_nan] & 0x7F) == 0x7F).all()


def e4m3_hard_values() -> torch.Tensor:
    """Every E4M3 value and every midpoint between neighbours (subnormals included), one float32 ulp
    either side, both signs; the overflow region around 448 and 464 (where old torch went NaN); 1e30,
    the largest float32, inf; values far below the smallest subnormal."""
    grid = E4M3_GRID.tolist()
    midpoints = [(low + high) / 2 for low, high in zip(grid, grid[1:])]
    landmarks = grid + midpoints + [464.0, 480.0, 1e30, FLOAT32_MAX, FLOAT32_TINY, 2.0**-12]
    return _signed(float32_neighbours(landmarks))  # the neighbour above FLOAT32_MAX is inf


def e4m3_mismatches(encode, values: torch.Tensor) -> list[tuple[float, float, float]]:
    got = encode(values).view(torch.uint8).long()
    index = nearest_even_index(values, E4M3_GRID)  # the code of a non-negative E4M3 is its grid index
    expected = index | values.signbit().long() << 7
    nan = values.isnan()
    wrong = torch.where(nan, (got & 0x7F) != 0x7F, got != expected)
    return [(values[i].item(), e4m3_value_of_code(got[i].item()), e4m3_value_of_code(expected[i].item()))
            for i in wrong.nonzero().flatten()]


def test_e4m3_satfinite_every_code_and_midpoint_one_ulp_either_side():
    assert e4m3_mismatches(e4m3_satfinite_rne, e4m3_hard_values()) == []


def test_e4m3_satfinite_random_bit_patterns():
    assert e4m3_mismatches(e4m3_satfinite_rne, random_float32(2**20, seed=43)) == []


def test_torch_cast_is_rne_with_subnormals_below_the_overflow_threshold():
    """The premise of ``e4m3_satfinite_rne``: torch's own cast is RNE wherever no saturation decides."""
    values = e4m3_hard_values()
    in_range = values[values.abs() < 464.0]
    assert e4m3_mismatches(lambda v: v.to(torch.float8_e4m3fn), in_range) == []


def test_e4m3_satfinite_pins_saturation_and_signs():
    values = torch.tensor([448.0, 464.0, 465.0, 1e30, math.inf, -math.inf, -0.0, -1e-30, 2.0**-10,
                           3 * 2.0**-10, math.nan])
    got = e4m3_satfinite_rne(values).view(torch.uint8).tolist()
    # 2**-10 is the tie between 0 and 2**-9: even code 0. 3 * 2**-10 ties 2**-9 / 2**-8: even code 2.
    assert got[:10] == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x80, 0x80, 0x00, 0x02]
    assert got[10] & 0x7F == 0x7F
    assert E4M3_MAX == 448.0


@pytest.mark.parametrize("wrong_encode, caught_at", [
    (wrong_encoders.e4m3_nan_on_overflow, 464.0),
    (wrong_encoders.e4m3_flush_subnormals, 2.0**-9),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_e4m3_check_rejects_wrong_encoder(wrong_encode, caught_at):
    mismatches = e4m3_mismatches(wrong_encode, e4m3_hard_values())
    assert any(value == caught_at for value, _, _ in mismatches), mismatches


# ---------------------------------------------------------------------------------------------------
# Refusals of the building blocks


@pytest.mark.parametrize("call, argument, error", [
    (lambda: e2m1_encode(torch.zeros(4, dtype=torch.float64)), "values", TypeError),
    (lambda: e2m1_encode([0.5]), "values", TypeError),
    (lambda: e2m1_decode(torch.zeros(4, dtype=torch.int32)), "codes", TypeError),
    (lambda: pack_nibbles(torch.zeros(2, 3, dtype=torch.uint8)), "codes", ValueError),
    (lambda: pack_nibbles(torch.zeros(4, dtype=torch.int64)), "codes", TypeError),
    (lambda: unpack_nibbles(torch.tensor(3, dtype=torch.uint8)), "packed", ValueError),
    (lambda: e4m3_satfinite_rne(torch.zeros(4, dtype=torch.bfloat16)), "values", TypeError),
], ids=["e2m1_encode-float64", "e2m1_encode-list", "e2m1_decode-int32", "pack-odd-K", "pack-int64",
        "unpack-0d", "e4m3-bf16"])
def test_building_blocks_refuse_with_the_argument_named(call, argument, error):
    with pytest.raises(error, match=f"^{argument}: .* — "):
        call()


@pytest.mark.parametrize("module", [references.formats.e2m1, references.formats.e4m3, references.formats.nvfp4,
                                    references.formats.scale_layout], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
