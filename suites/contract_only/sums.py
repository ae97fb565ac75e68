"""Sums in an order fixed by the summed length alone, as a batch-invariant implementation needs.

torch's own reductions choose their order on CUDA by the tensor's layout, the alignment of each row and
the number of rows (a row summed alone, or one row further on in a batch, can differ in its last bit);
``einsum`` goes to cuBLAS, which chooses its kernel by the batch's size.  These add elementwise instead:
the values padded with -0.0 (which adds to anything, -0.0 included, exactly) to a power of two, halved
until one is left."""
from __future__ import annotations

import torch


def tree_sum(values: torch.Tensor, dim: int = -1, adjacent: bool = False) -> torch.Tensor:
    """``values.sum(dim, keepdim=True)`` by halves: the upper half onto the lower, or (``adjacent``) each
    even element with the odd one after it."""
    values = values.movedim(dim, -1)
    width = values.shape[-1]
    if width == 0:
        return torch.zeros(*values.shape[:-1], 1, dtype=values.dtype, device=values.device).movedim(-1, dim)
    padded = 1 << (width - 1).bit_length()
    if padded != width:
        values = torch.cat([values, values.new_full((*values.shape[:-1], padded - width), -0.0)], dim=-1)
    while values.shape[-1] > 1:
        if adjacent:
            values = values[..., 0::2] + values[..., 1::2]
        else:
            half = values.shape[-1] // 2
            values = values[..., :half] + values[..., half:]
    return values.movedim(-1, dim)
