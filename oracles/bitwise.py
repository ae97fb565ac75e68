"""Bitwise parity: exactly a torch.Tensor of the same dtype, shape and device, and every element the
same bit pattern.

NaN positions and payloads, and the sign of zero, count: -0.0 is not +0.0 here.
"""
from __future__ import annotations

import torch

from oracles.failures import OracleFailure
from oracles.tensors import check_contract_outputs

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_pattern(tensor: torch.Tensor) -> torch.Tensor:
    """The elements reinterpreted as same-width integers (bool as uint8)."""
    if tensor.dtype == torch.bool:
        return tensor.to(torch.uint8)
    return tensor.contiguous().view(_BITS[tensor.element_size()])


def first_difference(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """None when bitwise equal; otherwise a one-line description of what differs."""
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.numel() == 0:
        return None
    differs = bit_pattern(actual) != bit_pattern(expected)
    if not differs.any():
        return None
    where = tuple(int(i) for i in differs.nonzero()[0])
    return (f"{int(differs.sum())} of {actual.numel()} elements differ; first at {where}: "
            f"got {_element(actual, where)}, expected {_element(expected, where)}")


def _element(tensor: torch.Tensor, where: tuple) -> str:
    """An element's value, and for a float its bit pattern too: NaNs of two payloads, or of two signs, print
    alike ("nan"), and so would any two values whose difference is only in the bits a repr rounds away."""
    value = tensor[where].item()
    if not tensor.dtype.is_floating_point:
        return repr(value)
    bits = int(bit_pattern(tensor[where].reshape(1))[0]) & ((1 << (8 * tensor.element_size())) - 1)
    return f"{value!r} (bits 0x{bits:0{2 * tensor.element_size()}x})"


def check_bitwise(actual, expected, what: str, oracle: str = "parity") -> None:
    """Raise OracleFailure unless ``actual`` and ``expected`` (op results) are bitwise equal."""
    actual, expected = check_contract_outputs(actual, expected, what, oracle)
    for position, (a, e) in enumerate(zip(actual, expected)):
        problem = first_difference(a, e)
        if problem:
            raise OracleFailure(oracle, f"{what}: output {position}: {problem}")
