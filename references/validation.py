"""The one shared helper for refusing bad input (every contract's ``validate`` goes through it).

Messages name the argument, repeat the offending value and say what to do, in the manner of
Hypothesis' ``InvalidArgument``: ``logits: expected a 2-D tensor, got shape (7,) — pass [R, V]``.
Checks look only at metadata (shape, dtype, strides, device): never at device values, which would
need a sync.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Callable, Iterable

import torch


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One row of a contract's table of refused inputs.

    ``make(device)`` returns the keyword arguments of the refused call; the implementation must raise
    ``error`` whose message names ``argument`` (or, for two arguments that disagree, any one of the
    tuple's names), and mutate nothing.  ``clause`` quotes the item of the contract's Refuse line the
    row enforces (``"non-tensor"`` for a non-tensor where a tensor is expected);
    ``suites/test_contract_refusals.py`` checks the rows against ``CONTRACTS.md`` both ways.
    """

    what: str
    make: Callable[[torch.device], dict]
    argument: str | tuple[str, ...]
    error: type[Exception] = ValueError
    clause: str = ""

    @property
    def arguments(self) -> tuple[str, ...]:
        """The argument names any one of which the refusal's message may name."""
        return (self.argument,) if isinstance(self.argument, str) else tuple(self.argument)


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


def require_range(argument: str, value: int, lo: int, hi: int | None, what: str) -> None:
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise refuse(argument, f"{what} is {value}", f"{what} must be {bound}")


def require_number(argument: str, value: object) -> float:
    """A plain real number (a Python or NumPy scalar, not a bool or a tensor): host metadata, no sync."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argument}: expected a real number, got {type(value).__name__} — pass a Python float")
    return float(value)


def require_within_limits(reason: str | None) -> None:
    """A kernel's own limits (``Entry.limits``), refused clearly: ``reason`` names the argument."""
    if reason is not None:
        raise ValueError(f"{reason} — beyond this kernel's limits; certified dispatch runs the stock op")


def require_same_device(tensors: dict[str, torch.Tensor]) -> None:
    devices = {name: t.device for name, t in tensors.items() if isinstance(t, torch.Tensor)}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {device}" for name, device in devices.items())
        first = next(iter(devices))
        raise refuse(first, f"tensors are on different devices ({listing})", "move them to one device")
