"""What Triton kernels share: the device facts their launch plans are made from.

On a machine without CUDA, ``ops/__init__`` has set ``TRITON_INTERPRET=1`` before Triton was imported,
so ``triton.jit`` kernels run under the interpreter on CPU tensors (the ``cpu-interp`` arch).
Interpreter caveats (bf16 arithmetic, NaN inside reductions): kernels upcast to fp32 after loading and
keep NaN out of ``tl.max``/``tl.min``.
"""
from __future__ import annotations

import os

import torch

# The interpreter costs milliseconds per program whatever its size, so it plans for a small GPU of 4 SMs:
# small batches still take the split path, without the hundreds of programs an H200's plan launches.
INTERPRETER_SM_COUNT = 4


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_SM_COUNT
