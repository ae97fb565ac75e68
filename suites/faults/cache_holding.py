"""Implementations for the host's cache test (``test_cached_memory_on_gpu.py``): each allocates a temporary of a
given size on the input's device, frees it and answers a copy of its input, leaving the freed memory in the
caching allocator of whatever process ran it."""
from __future__ import annotations

import torch

from oracles.allocations import CACHE_KEPT_BYTES

GIB = 1 << 30


def _with_temporary(x: torch.Tensor, size: int) -> torch.Tensor:
    # the fill writes every byte (eager: nothing leaves it out); no reduction over it, whose int64 upcast would
    # hold eight times the temporary (a sum made the 2 GiB one 18 GiB, past the limit)
    temporary = torch.ones(size, dtype=torch.uint8, device=x.device)
    del temporary
    return x.clone()


def within_the_limit(x: torch.Tensor) -> torch.Tensor:
    """A temporary of 2 GiB: below ``CACHE_KEPT_BYTES``, so its cache stays."""
    return _with_temporary(x, 2 * GIB)


def past_the_limit(x: torch.Tensor) -> torch.Tensor:
    """A temporary of ``CACHE_KEPT_BYTES`` + 1 GiB: past the limit, so the host's whole cache goes back."""
    return _with_temporary(x, CACHE_KEPT_BYTES + GIB)


def memory_held(x: torch.Tensor) -> torch.Tensor:
    """What the process running it holds, as it runs: [bytes reserved by its caching allocator, bytes allocated]
    (int64, on the input's device).  Called in a message after another, it shows what that message left."""
    return torch.tensor([torch.cuda.memory_reserved(), torch.cuda.memory_allocated()], dtype=torch.int64,
                        device=x.device)
