"""What a kernel reads when it ignores a tensor's own strides: the wrong implementations that share one stride
set between arguments (V with K's, the mask with the positions'), or read a last dim as contiguous, read
through these."""
from __future__ import annotations

import torch


def in_strides_of(tensor: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``tensor`` read with ``other``'s strides where they stay inside its storage; as it is otherwise (such a
    kernel would fault there, not misread)."""
    last = tensor.storage_offset() + sum((size - 1) * stride for size, stride in zip(tensor.shape, other.stride()))
    if tensor.numel() == 0 or last >= tensor.untyped_storage().nbytes() // tensor.element_size():
        return tensor
    return tensor.as_strided(tensor.shape, other.stride())


def last_dim_contiguous(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` read as if ``stride(-1) == 1``, its other strides kept."""
    return tensor.as_strided(tensor.shape, (*tensor.stride()[:-1], 1))
