"""references/tensor_core.py: the Hopper tensor core's block FMA, as its model states it.

Checked against a second implementation of the same model written the way its authors wrote theirs
(integer significands shifted and truncated, the sum rounded toward zero with exact fractions), on blocks
that reach every branch: mixed signs, an accumulator above and below the products, significands in [2, 4),
subnormal operands, zeros; and by hand on the cases where the model parts from fp32 FMAs (truncated terms,
the final rounding toward zero, the extra bit).  Whether the model is the H200's arithmetic is the GPU's
test (``suites/test_tensor_core_on_gpu.py``).
"""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from references.tensor_core import K_STEP, block_fma, tensor_core_dot

pytestmark = [pytest.mark.cpu]
ZERO = torch.tensor(0.0, dtype=torch.float64)


def _split(x: float, emin: int) -> tuple[int, int]:
    """(exponent, significand as an integer of 23 fraction bits) of a nonzero value, as the model splits it."""
    exponent = max(math.frexp(abs(x))[1] - 1, emin)
    significand = Fraction(abs(x)) / Fraction(2) ** exponent * 2**23
    assert significand.denominator == 1
    return exponent, int(significand)


def _toward_zero_fp32(value: Fraction) -> float:
    if value == 0:
        return 0.0
    exponent = math.floor(math.log2(abs(value)))
    while Fraction(2) ** exponent > abs(value):
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= abs(value):
        exponent += 1
    quantum = Fraction(2) ** (max(exponent, -126) - 23)
    return float(int(value / quantum) * quantum)


def _block_fma_by_integers(a: list[float], b: list[float], c: float, emin: int) -> float:
    terms = []   # (exponent, significand, negative)
    raw_exponents, raw_significands = [], []
    for x, y in zip(a, b):
        if x == 0 or y == 0:
            continue
        (ex, sx), (ey, sy) = _split(x, emin), _split(y, emin)
        exponent, significand = ex + ey, sx * sy
        assert significand % 2**23 == 0
        significand //= 2**23
        raw_exponents.append(exponent)
        raw_significands.append(significand)
        if significand >= 2**24:                              # in [2, 4): one binade up, nothing lost
            assert significand % 2 == 0
            significand, exponent = significand // 2, exponent + 1
        terms.append((exponent, significand, (x < 0) != (y < 0)))
    extra = 2
    if raw_exponents:
        largest = max(raw_exponents)
        wide = max(s for e, s in zip(raw_exponents, raw_significands) if e == largest) >= 2**24
        c_exponent = _split(c, -126)[0] if c != 0 else None
        extra += wide and (c_exponent is None or largest >= c_exponent)
    if c != 0:
        terms.append((*_split(c, -126), c < 0))
    if not terms:
        return 0.0
    top = max(e for e, _, _ in terms)
    total = sum((-1 if negative else 1) * ((s << extra) >> (top - e)) for e, s, negative in terms)
    return _toward_zero_fp32(Fraction(total) * Fraction(2) ** (top - 23 - extra))


def _blocks(dtype: torch.dtype, count: int, seed: int):
    """Blocks of K_STEP operands over a wide range of exponents, signs mixed, some zeros and subnormals."""
    generator = torch.Generator().manual_seed(seed)
    tiny = torch.finfo(dtype).smallest_normal
    for index in range(count):
        spread = ((2, 8, 20) if dtype == torch.bfloat16 else (2, 5, 10))[index % 3]   # fp16 ends at 2^16
        exponents = torch.randint(-spread, spread + 1, (2, K_STEP), generator=generator).double()
        values = torch.randn(2, K_STEP, generator=generator, dtype=torch.float64) * torch.exp2(exponents)
        if index % 7 == 0:
            values[0, :3] = torch.tensor([0.0, tiny * 0.375, -tiny * 0.5])
        a, b = values.to(dtype).double()
        kind = index % 4
        c = (0.0 if kind == 0 else float(torch.randn((), generator=generator) * 2.0 ** (spread * (kind - 2))))
        yield a, b, float(torch.tensor(c).float())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_block_fma_equals_the_model_by_integers(dtype):
    emin = math.frexp(torch.finfo(dtype).smallest_normal)[1] - 1
    for a, b, c in _blocks(dtype, 300, seed=1 if dtype == torch.bfloat16 else 2):
        expected = _block_fma_by_integers(a.tolist(), b.tolist(), c, emin)
        got = block_fma(a, b, torch.tensor(c, dtype=torch.float64), dtype).item()
        assert got == expected, (a.tolist(), b.tolist(), c, got, expected)


def _block(*pairs) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.tensor([x for x, _ in pairs], dtype=torch.float64)
    b = torch.tensor([y for _, y in pairs], dtype=torch.float64)
    return a, b


def test_terms_below_the_alignment_window_are_dropped():
    """1 + 15 products of 2^-26: each below the window (2^-25 under a leading 1) is truncated to nothing,
    where fp32 FMAs keep them (1 + 15 * 2^-26 rounds to 1 + 2^-23)."""
    a, b = _block((1.0, 1.0), *[(2.0**-13, 2.0**-13)] * 15)
    assert block_fma(a, b, ZERO, torch.bfloat16).item() == 1.0
    assert torch.dot(a.float(), b.float()).item() == pytest.approx(1 + 2.0**-23, abs=2.0**-25)


def test_the_sum_is_rounded_toward_zero_once():
    """1 + 3 * 2^-25 is 0.75 ULP above 1: fp32's nearest is 1 + 2^-23, the tensor core's 1 (and -1)."""
    a, b = _block((1.0, 1.0), (2.0**-12, 2.0**-12), (2.0**-12, 2.0**-13))
    assert block_fma(a, b, ZERO, torch.bfloat16).item() == 1.0
    assert block_fma(-a, b, ZERO, torch.bfloat16).item() == -1.0
    assert torch.tensor(1 + 3 * 2.0**-25, dtype=torch.float64).float().item() == 1 + 2.0**-23


def test_a_significand_in_two_to_four_keeps_one_more_bit():
    """1.5 * 1.5 = 2.25 has its significand in [2, 4): the window keeps 2^-25, so eight such terms add
    2^-22; 2 * 1 = 2 does not, and the same eight terms fall out of its window (2^-24)."""
    small = [(2.0**-12, 2.0**-13)] * 8
    a, b = _block((1.5, 1.5), *small)
    assert block_fma(a, b, ZERO, torch.bfloat16).item() == 2.25 + 2.0**-22
    a, b = _block((2.0, 1.0), *small)
    assert block_fma(a, b, ZERO, torch.bfloat16).item() == 2.0


def test_the_accumulator_is_aligned_with_the_products():
    """c = 1 sets the window: 16 products of 2^-26 vanish beside it; c = 0 and no product gives 0."""
    a, b = _block(*[(2.0**-13, 2.0**-13)] * 16)
    assert block_fma(a, b, torch.tensor(1.0, dtype=torch.float64), torch.bfloat16).item() == 1.0
    assert block_fma(a, b, ZERO, torch.bfloat16).item() == 16 * 2.0**-26
    assert block_fma(a * 0, b, ZERO, torch.bfloat16).item() == 0.0


def test_a_dot_chains_block_fmas_over_its_k_steps_in_order():
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(5, 3 * K_STEP, generator=generator).to(torch.bfloat16)
    b = torch.randn(5, 3 * K_STEP, generator=generator).to(torch.bfloat16)
    accumulators = torch.randn(5, generator=generator).float().double()
    for start in (None, accumulators):   # from c = 0, and from an accumulator
        chained = ZERO.expand(5) if start is None else start
        for first in range(0, 3 * K_STEP, K_STEP):
            step = slice(first, first + K_STEP)
            chained = block_fma(a[:, step].double(), b[:, step].double(), chained, torch.bfloat16)
        got = tensor_core_dot(a, b, c=None if start is None else start.float())
        assert got.dtype == torch.float32 and torch.equal(got.double(), chained)


def test_a_dot_of_positive_terms_never_exceeds_the_exact_sum():
    """Both roundings are toward zero: a bias, not noise (what a band built from fp32 FMAs misses)."""
    generator = torch.Generator().manual_seed(4)
    a = torch.rand(200, 256, generator=generator).to(torch.bfloat16)
    b = torch.rand(200, 256, generator=generator).to(torch.bfloat16)
    exact = (a.double() * b.double()).sum(-1)
    got = tensor_core_dot(a, b).double()
    assert bool((got <= exact).all()) and bool((got < exact).any())


def test_operands_that_are_not_16_bit_numbers_are_refused():
    with pytest.raises(ValueError, match="b: holds values that are not finite bfloat16"):
        tensor_core_dot(torch.ones(16), torch.full((16,), 1 + 2.0**-10))
    with pytest.raises(ValueError, match="a: holds values that are not finite float16"):
        tensor_core_dot(torch.full((16,), 1e5), torch.ones(16), torch.float16)
    with pytest.raises(ValueError, match="operand_dtype"):
        tensor_core_dot(torch.ones(16), torch.ones(16), torch.float32)
    with pytest.raises(ValueError, match="b: last axis of 8 differs from a's 16"):
        tensor_core_dot(torch.ones(16), torch.ones(8))
