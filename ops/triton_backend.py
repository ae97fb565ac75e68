"""What Triton kernels share: the device facts their launch plans are made from.

On a machine without CUDA, ``ops/__init__`` has set ``TRITON_INTERPRET=1`` before Triton was imported,
so ``triton.jit`` kernels run under the interpreter on CPU tensors (the ``cpu-interp`` arch).
Interpreter caveats (bf16 arithmetic, NaN inside reductions): kernels upcast to fp32 after loading and
keep NaN out of ``tl.max``/``tl.min``.
"""
from __future__ import annotations

import os

import torch

# The interpreter runs the launch plan an H200 would (132 SMs), so CPU certification walks the same
# split/no-split paths as the GPU.
INTERPRETER_SM_COUNT = 132


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_SM_COUNT
