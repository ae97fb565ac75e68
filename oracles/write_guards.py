"""Write guards: outputs fully written, nothing written outside, immutable inputs untouched.

- Every tensor the implementation allocates with ``torch.empty``/``empty_like``/``empty_strided``/
  ``new_empty`` (outputs and scratch) is handed out poisoned, from inside a larger buffer whose
  margins hold canary bytes.  The call runs twice, poisoned with two different byte patterns: an
  output element that the op does not write shows the poison, so the two runs differ there.
- Mutable (in-place) arguments are moved into canary-margined buffers of the same layout.
- Canary margins must be intact after the call: a write just past either end of an allocation is
  caught there.
- Every other tensor argument's whole storage (view padding included) must be bitwise unchanged.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from oracles.bitwise import check_bitwise
from oracles.failures import OracleFailure
from oracles.tensors import as_outputs, changed_storages, clone_inputs, snapshot_storages

MARGIN_BYTES = 512
POISON_PATTERNS = (0xFF, 0x5A)   # 0xFF: NaN for every float width, -1 for ints
CANARY = 0xC3


def _in_margined_buffer(shape, stride, dtype, device, fill: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A tensor of this layout inside a buffer: [margin | elements (filled) | margin] (margins CANARY)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    span = 1 + sum((size - 1) * step for size, step in zip(shape, stride)) if all(shape) else 0
    margin = MARGIN_BYTES - MARGIN_BYTES % itemsize
    buffer = torch.full((2 * margin + span * itemsize,), CANARY, dtype=torch.uint8, device=device)
    buffer[margin:margin + span * itemsize] = fill
    tensor = torch.empty(0, dtype=dtype, device=device).set_(
        buffer.untyped_storage(), margin // itemsize, tuple(shape), tuple(stride))
    return tensor, buffer


def _margins_intact(tensor: torch.Tensor, buffer: torch.Tensor) -> bool:
    margin = tensor.storage_offset() * tensor.element_size()  # the same on both sides
    return bool((buffer[:margin] == CANARY).all() and (buffer[buffer.numel() - margin:] == CANARY).all())


class PoisonedAllocations(TorchFunctionMode):
    """Hand out every ``empty``-family allocation poisoned and canary-margined."""

    FACTORIES = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty,
                 torch.Tensor.new_empty_strided}

    def __init__(self, poison: int):
        super().__init__()
        self.poison = poison
        self.allocations: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func not in self.FACTORIES or not isinstance(result, torch.Tensor) or result.layout != torch.strided:
            return result
        tensor, buffer = _in_margined_buffer(result.shape, result.stride(), result.dtype, result.device,
                                             self.poison)
        self.allocations.append((tensor, buffer))
        return tensor

    def overwritten_margins(self) -> list[str]:
        return [f"an allocation of shape {tuple(t.shape)} {t.dtype}" for t, b in self.allocations
                if not _margins_intact(t, b)]


def _guarded_run(fn: Callable, kwargs: dict, in_place: tuple[str, ...], poison: int) -> tuple:
    guarded = clone_inputs(kwargs)
    margins = {}
    for name in in_place:
        original = guarded[name]
        tensor, buffer = _in_margined_buffer(original.shape, original.stride(), original.dtype,
                                             original.device, 0)
        tensor.copy_(original)
        guarded[name], margins[name] = tensor, buffer
    immutable = snapshot_storages(guarded, skip=in_place)
    with PoisonedAllocations(poison) as allocations:
        result = as_outputs(fn(**guarded))
    outside = allocations.overwritten_margins()
    outside += [f"in-place argument {name!r}" for name, buffer in margins.items()
                if not _margins_intact(guarded[name], buffer)]
    if outside:
        raise OracleFailure("write_guards", f"wrote outside the bounds of {'; '.join(outside)}")
    changed = changed_storages(guarded, immutable)
    if changed:
        raise OracleFailure("write_guards", f"modified inputs the contract does not let it write: "
                                            f"{', '.join(changed)}")
    return result + tuple(guarded[name] for name in in_place)


def check_write_guards(fn: Callable, kwargs: dict, in_place: tuple[str, ...] = ()) -> None:
    first = _guarded_run(fn, kwargs, in_place, POISON_PATTERNS[0])
    second = _guarded_run(fn, kwargs, in_place, POISON_PATTERNS[1])
    check_bitwise(second, first, "outputs under two different allocation poisons (an element the op "
                                 "does not write shows the poison)", oracle="write_guards")
