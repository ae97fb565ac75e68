"""Row layouts a 2-D ``[rows, cols]`` argument may legally have, with garbage in what is not its own.

- ``contiguous``: a plain tensor.
- ``padded_rows``: ``buf[:, :cols]`` of a wider buffer (row stride > cols).
- ``every_other_row``: ``buf[::2]`` (rows two strides apart).
- ``column_offset``: ``buf[:, k:k + cols]`` (a non-zero storage offset, rows padded both sides).
- ``column_strided``: ``buf[:, ::2]`` of a buffer twice as wide (``stride(1) == 2``: a kernel that reads a
  row as contiguous reads the garbage between its elements; an op that cannot take it refuses it clearly).
Memory between and around rows is filled with NaN and huge values (bytes: 0xA5): an op that reads outside
its rows turns them into wrong answers.

Layouts an N-D ``[n0, ..., last]`` argument (a paged cache plane, a stack of slots) may have:
- ``contiguous``: a plain tensor.
- ``interleaved``: ``buf[:, 0]`` of ``[n0, 2, ...]`` — the K half of a fused KV cache: dim 0 strides
  over twice the rest, and the other half (garbage) lies between every two of its entries.
- ``padded_last``: ``buf[..., :last]`` of a last dim 3 wider: the trailing dims are not dense.
- ``strided_last``: ``buf[..., ::2]`` of a last dim twice as wide (``stride(-1) == 2``): a kernel that reads
  the last dim as contiguous reads the garbage between its elements.
Their garbage is the byte 0xA5 (a NaN in no float width; -91 in int8): the caller fills the view.
"""
from __future__ import annotations

import math

import torch

ROW_LAYOUTS = ("contiguous", "padded_rows", "every_other_row", "column_offset")   # stride(1) == 1
LAYOUTS = (*ROW_LAYOUTS, "column_strided")
ND_LAYOUTS = ("contiguous", "interleaved", "padded_last", "strided_last")
ND_GARBAGE = 0xA5


def _garbage(shape, dtype, device) -> torch.Tensor:
    if dtype in (torch.uint8, torch.int8):  # NaN cast to a byte is 0, a real value (an E2M1 pair of zeros)
        return torch.full(shape, ND_GARBAGE, dtype=torch.uint8, device=device).view(dtype)
    garbage = torch.full(shape, float("nan"), device=device)
    garbage[..., 1::2] = 3e38  # finite and larger than anything a well-behaved row holds
    return garbage.to(dtype)


def row_view(rows: int, cols: int, dtype: torch.dtype, layout: str, device: torch.device) -> torch.Tensor:
    """An uninitialised-looking ``[rows, cols]`` view in ``layout``; its rows are for the caller to fill."""
    if layout == "contiguous":
        return _garbage((rows, cols), dtype, device)
    if layout == "padded_rows":
        return _garbage((rows, cols + 7), dtype, device)[:, :cols]
    if layout == "every_other_row":
        return _garbage((2 * rows, cols), dtype, device)[::2]
    if layout == "column_offset":
        return _garbage((rows, cols + 12), dtype, device)[:, 5:5 + cols]
    if layout == "column_strided":
        return _garbage((rows, 2 * cols), dtype, device)[:, ::2]
    raise ValueError(f"layout: {layout!r} is not one of {LAYOUTS}")


def rows_in_layout(values: torch.Tensor, layout: str) -> torch.Tensor:
    """``values`` (``[rows, cols]``) copied into a ``row_view`` in ``layout``."""
    view = row_view(values.shape[0], values.shape[1], values.dtype, layout, values.device)
    view.copy_(values)
    return view


def nd_view(shape: tuple[int, ...], dtype: torch.dtype, layout: str, device: torch.device) -> torch.Tensor:
    """A ``shape`` view (at least 2-D) in ``layout``, garbage everywhere; its elements are for the caller to fill."""
    shape = tuple(shape)
    if layout == "contiguous":
        buffer_shape = shape
    elif layout == "interleaved":
        buffer_shape = (shape[0], 2, *shape[1:])
    elif layout == "padded_last":
        buffer_shape = (*shape[:-1], shape[-1] + 3)
    elif layout == "strided_last":
        buffer_shape = (*shape[:-1], 2 * shape[-1])
    else:
        raise ValueError(f"layout: {layout!r} is not one of {ND_LAYOUTS}")
    elements = math.prod(buffer_shape)
    buffer = torch.full((elements * dtype.itemsize,), ND_GARBAGE, dtype=torch.uint8, device=device)
    buffer = buffer.view(dtype).view(buffer_shape)
    if layout == "interleaved":
        return buffer[:, 0]
    if layout == "padded_last":
        return buffer[..., :shape[-1]]
    if layout == "strided_last":
        return buffer[..., ::2]
    return buffer
