"""What a kernel reads when it ignores a tensor's own strides: the wrong implementations that read a view as
dense, share one stride set between arguments (V with K's, the mask with the positions'), or read a last dim as
contiguous, read through these."""
from __future__ import annotations

import torch


def read_as_dense(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` read from its first element as if it were contiguous, whatever its strides (a view of a wider
    buffer, rows apart, a column of a metadata table); an empty one as it is."""
    if tensor.numel() == 0:
        return tensor
    strides = [1] * tensor.dim()
    for dim in range(tensor.dim() - 2, -1, -1):
        strides[dim] = strides[dim + 1] * tensor.shape[dim + 1]
    return tensor.as_strided(tensor.shape, strides)


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
