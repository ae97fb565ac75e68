"""Refusing bad input to the format functions: messages name the argument, repeat the value, say the fix.

Stand-in for the platform spine's shared helper ``references/validation.py``, which is not on this
branch yet: the functions here have the same names, signatures and message shape
(``x: dtype float16 is not supported — pass one of bfloat16``), so merging the spine means pointing
the imports at ``references.validation`` and deleting this module. Checks read metadata only (shape,
dtype, device), never tensor values, which on a GPU would need a sync.
"""
from __future__ import annotations

from typing import Iterable

import torch


def _describe(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(dtype).replace("torch.", "") for dtype in dtypes)


def refuse(argument: str, problem: str, fix: str) -> ValueError:
    return ValueError(f"{argument}: {problem} — {fix}")


def require_tensor(argument: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{argument}: expected a torch.Tensor, got {type(value).__name__} — pass a tensor")
    return value


def require_dtype(argument: str, tensor: torch.Tensor, allowed: Iterable[torch.dtype]) -> None:
    allowed = tuple(allowed)
    if tensor.dtype not in allowed:
        raise TypeError(
            f"{argument}: dtype {str(tensor.dtype).replace('torch.', '')} is not supported — "
            f"pass one of {_describe(allowed)}"
        )


def require_ndim(argument: str, tensor: torch.Tensor, ndim: int, layout: str) -> None:
    if tensor.dim() != ndim:
        raise refuse(argument, f"expected a {ndim}-D tensor {layout}, got shape {tuple(tensor.shape)}",
                     f"pass a {ndim}-D tensor {layout}")


def require_shape(argument: str, tensor: torch.Tensor, shape: tuple, layout: str) -> None:
    if tuple(tensor.shape) != tuple(shape):
        raise refuse(argument, f"expected shape {tuple(shape)} {layout}, got {tuple(tensor.shape)}",
                     "pass a tensor of the shape the other arguments imply")


def require_same_device(tensors: dict[str, torch.Tensor]) -> None:
    devices = {name: t.device for name, t in tensors.items() if isinstance(t, torch.Tensor)}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {device}" for name, device in devices.items())
        first = next(iter(devices))
        raise refuse(first, f"tensors are on different devices ({listing})", "move them to one device")
