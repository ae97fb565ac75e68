"""The few argument checks every contract-only module makes, in its own words (not the references')."""
from __future__ import annotations

import numbers

import torch


def tensor(name: str, value, dtypes=None, ndim: int | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"argument '{name}' must be a torch.Tensor, not {type(value).__name__}")
    if dtypes is not None and value.dtype not in dtypes:
        raise TypeError(f"argument '{name}' has unsupported dtype {value.dtype}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"argument '{name}' must have {ndim} dims, has {value.dim()}")
    return value


def shape(name: str, value: torch.Tensor, expected: tuple) -> None:
    if tuple(value.shape) != tuple(expected):
        raise ValueError(f"argument '{name}' has shape {tuple(value.shape)}, expected {tuple(expected)}")


def number(name: str, value) -> float:
    """A host number, or a one-element tensor read on the host."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"argument '{name}' must be a number, not {type(value).__name__}")
    return float(value)


def one_fp32(name: str, value) -> torch.Tensor:
    tensor(name, value, (torch.float32,))
    if value.numel() != 1:
        raise ValueError(f"argument '{name}' must hold exactly one element, holds {value.numel()}")
    return value


SAME_WIDTH_INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(value: torch.Tensor) -> torch.Tensor:
    """Same-width integers (a view), so copies move bits whatever the dtype."""
    width = SAME_WIDTH_INTS.get(value.element_size())
    return value if width is None else value.view(width)
