"""The in-place step oracle against toy steps: a row restore on a strided view of a buffer.

The state is ``buf[:, :, :5]`` of a ``[6, 4, 7]`` buffer (two padding columns per row); the contract
of the toy step names rows 1 and 4, which must get back the values of ``expected``.  Each wrong step
breaks one of the oracle's three checks: named elements, other elements, bytes outside the view.
"""
from __future__ import annotations

import pytest
import torch

from oracles.failures import OracleFailure
from oracles.in_place import check_in_place_step
from suites.certification import machine_device

pytestmark = [pytest.mark.cpu, pytest.mark.sm90, pytest.mark.sm100, pytest.mark.sm103, pytest.mark.sm107]
DEVICE = machine_device()
NAMED_ROWS = [1, 4]


def _state(dtype=torch.bfloat16):
    generator = torch.Generator(device=DEVICE).manual_seed(0)
    buffer = torch.randn(6, 4, 7, generator=generator, device=DEVICE).to(dtype)
    return buffer[:, :, :5]


def _case(dtype=torch.bfloat16):
    state = _state(dtype)
    expected = torch.full(state.shape, -0.0, dtype=dtype, device=DEVICE)   # -0.0: restored bits, not values
    named = torch.zeros(6, dtype=torch.bool, device=DEVICE)
    named[NAMED_ROWS] = True
    return state, named, expected


def _restore(state, expected, rows):
    state[rows] = expected[rows]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.uint8])
def test_accepts_a_step_that_writes_exactly_the_named_elements(dtype):
    state, named, expected = _case(dtype)
    check_in_place_step(state, lambda: _restore(state, expected, NAMED_ROWS), named, expected, "toy restore")


@pytest.mark.parametrize("wrong, finding", [
    (lambda state, expected: _restore(state, expected, slice(None)), "elements the contract does not name"),
    (lambda state, expected: _restore(state, expected, [1]), "named elements"),
    (lambda state, expected: _restore(state, expected.abs(), NAMED_ROWS), "named elements"),   # +0.0, not -0.0
    (lambda state, expected: (_restore(state, expected, NAMED_ROWS),
                              state.as_strided((1,), (1,), state.storage_offset() + 5).fill_(0)),
     "outside the tensor's elements"),
])
def test_rejects(wrong, finding):
    state, named, expected = _case()
    with pytest.raises(OracleFailure, match=finding) as raised:
        check_in_place_step(state, lambda: wrong(state, expected), named, expected, "toy restore")
    assert raised.value.oracle == "stateful"


def test_refuses_a_mask_that_is_not_over_leading_dims():
    state, named, expected = _case()
    with pytest.raises(ValueError, match="named"):
        check_in_place_step(state, lambda: None, named[:5], expected, "toy restore")
