"""check_rows_unchanged (the pool judge of stateful properties) against changes it must see and
changes it must allow.  Op-agnostic: a toy pool of rows."""
from __future__ import annotations

import pytest
import torch

from oracles.failures import OracleFailure
from oracles.stateful import check_rows_unchanged

pytestmark = [pytest.mark.cpu, pytest.mark.sm90, pytest.mark.sm100, pytest.mark.sm103, pytest.mark.sm107]


def _pool(dtype=torch.float32):
    pool = torch.randn(5, 3, 4, generator=torch.Generator().manual_seed(0)).to(dtype)
    pool[4, 0, 0] = torch.nan
    return pool


def _owned(*rows):
    mask = torch.zeros(5, dtype=torch.bool)
    mask[list(rows)] = True
    return mask


def _next_bits(tensor, where):
    bits = {2: torch.int16, 4: torch.int32}[tensor.element_size()]
    tensor.view(bits)[where] += 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("change", ["one ulp", "sign of zero", "nan payload", "last row"])
def test_rejects_any_bit_changed_in_a_row_it_does_not_own(dtype, change):
    before = _pool(dtype)
    after = before.clone()
    if change == "one ulp":
        _next_bits(after, (2, 1, 3))
    elif change == "sign of zero":
        before[3, 2, 2] = 0.0
        after[3, 2, 2] = -0.0
    elif change == "nan payload":
        _next_bits(after, (4, 0, 0))
    else:  # a write "through -1" in torch
        after[-1] = after[-1] * 2
    with pytest.raises(OracleFailure, match=r"\[stateful\] control: 1 of \d rows"):
        check_rows_unchanged(before, after, _owned(0), "control")


def test_allows_the_rows_it_owns_to_change_and_equal_nan_to_stay():
    before = _pool()
    after = before.clone()
    after[1] = 7.0
    after[0, 0, 0] = torch.nan
    check_rows_unchanged(before, after, _owned(0, 1), "control")


def test_rejects_a_pool_that_changed_dtype():
    with pytest.raises(OracleFailure, match="shape or dtype"):
        check_rows_unchanged(_pool(), _pool().double(), _owned(), "control")
