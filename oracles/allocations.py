"""Poisoned, canary-margined allocations: the memory half of the write guards (``write_guards.py``).

Every tensor an implementation allocates with ``torch.empty``/``empty_like``/``empty_strided``/
``new_empty`` is handed out poisoned, from inside a larger buffer whose margins hold canary bytes.

This module imports nothing but torch, on purpose: the implementation host (``tools/engine/impl_host.py``),
which must hold nothing of the judge, loads it by its file path to poison the allocations of the
implementation it serves, and the judge checks the margins of the buffers it sends back.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

MARGIN_BYTES = 512
CANARY = 0xC3


def pooled_bytes(nbytes: int) -> int:
    """The size of the reused buffer that holds ``nbytes`` in a pool of shared staging buffers (the judge's
    and the implementation host's): a power of two, so that draws of ever-new sizes reuse a few buffers."""
    return 1 << max(9, (nbytes - 1).bit_length()) if nbytes else 0


# What a process judging or serving on a shared GPU keeps cached of the memory it freed, at most: the judge
# and the implementation's host are processes apart, and neither can use what the other's caching allocator
# holds. A cell's largest example would otherwise stay reserved in the judge through every later example (73
# GB of an 80 GB H100 on a 2026-12-05 run, where the host then ran out of memory).
CACHE_KEPT_BYTES = 4 << 30


def give_back_cache() -> None:
    """Release this process's cached, unused CUDA memory once it exceeds :data:`CACHE_KEPT_BYTES` (a few
    examples of the same sizes keep their cache; a large one's cache goes back)."""
    if torch.cuda.is_initialized() and \
            torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > CACHE_KEPT_BYTES:
        torch.cuda.empty_cache()


def memory_held() -> str:
    """This process's CUDA memory in words, for a message about running out of it ("" where it uses none)."""
    if not torch.cuda.is_initialized():
        return ""
    return f"{torch.cuda.memory_allocated() / 2**30:.2f} GiB allocated, {torch.cuda.memory_reserved() / 2**30:.2f} " \
           f"GiB reserved"


def margin_bytes(itemsize: int) -> int:
    """The margin on each side of an allocation of elements of ``itemsize`` bytes (whole elements)."""
    return MARGIN_BYTES - MARGIN_BYTES % itemsize


def in_margined_buffer(shape, stride, dtype, device, fill: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A tensor of this layout inside a buffer: [margin | elements (filled) | margin] (margins CANARY)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    span = 1 + sum((size - 1) * step for size, step in zip(shape, stride)) if all(shape) else 0
    margin = margin_bytes(itemsize)
    buffer = torch.full((2 * margin + span * itemsize,), CANARY, dtype=torch.uint8, device=device)
    buffer[margin:margin + span * itemsize] = fill
    tensor = torch.empty(0, dtype=dtype, device=device).set_(
        buffer.untyped_storage(), margin // itemsize, tuple(shape), tuple(stride))
    return tensor, buffer


def margins_intact(buffer: torch.Tensor, margin: int) -> bool:
    """Both ``margin``-byte ends of a uint8 ``buffer`` still hold the canary."""
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
        tensor, buffer = in_margined_buffer(result.shape, result.stride(), result.dtype, result.device, self.poison)
        self.allocations.append((tensor, buffer))
        return tensor

    def buffer_of(self, tensor: torch.Tensor) -> tuple[torch.Tensor, int] | None:
        """The margined buffer ``tensor`` lies in, and its margin; None for memory not allocated here."""
        for allocated, buffer in self.allocations:
            if allocated.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr():
                return buffer, margin_bytes(allocated.element_size())
        return None

    def overwritten_margins(self) -> list[str]:
        return [f"an allocation of shape {tuple(t.shape)} {t.dtype}" for t, b in self.allocations
                if not margins_intact(b, margin_bytes(t.element_size()))]
