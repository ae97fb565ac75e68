"""How many kernels a call launches: the cost a fused kernel removes from a composed torch recipe.

- ``aten_launches`` (any device): the aten ops a call runs, views excluded — on a GPU each is one
  kernel launch (an op that launches several internally counts once: a lower bound).
- ``cuda_launches`` (CUDA): the kernels the CUDA profiler sees, Triton's included, copies and memsets
  excluded.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _AtenOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def aten_launches(fn: Callable, kwargs: dict) -> list[str]:
    """The non-view aten ops ``fn(**kwargs)`` runs, in order."""
    with _AtenOps() as recorded:
        fn(**kwargs)
    return recorded.ops


def cuda_launches(fn: Callable, kwargs: dict) -> list[str]:
    """The names of the CUDA kernels ``fn(**kwargs)`` launches (after a warm-up call that compiles)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn(**kwargs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        fn(**kwargs)
        torch.cuda.synchronize()
    return [event.name for event in profiler.events()
            if event.device_type == DeviceType.CUDA and not event.name.startswith(("Memcpy", "Memset"))]
