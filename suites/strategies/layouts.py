"""Row layouts a 2-D ``[rows, cols]`` argument may legally have, with garbage in what is not its own.

- ``contiguous``: a plain tensor.
- ``padded_rows``: ``buf[:, :cols]`` of a wider buffer (row stride > cols).
- ``every_other_row``: ``buf[::2]`` (rows two strides apart).
- ``column_offset``: ``buf[:, k:k + cols]`` (a non-zero storage offset, rows padded both sides).
Memory between and around rows is filled with NaN and huge values: an op that reads outside its
rows turns them into wrong answers.
"""
from __future__ import annotations

import torch

LAYOUTS = ("contiguous", "padded_rows", "every_other_row", "column_offset")


def _garbage(shape, dtype, device) -> torch.Tensor:
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
    raise ValueError(f"layout: {layout!r} is not one of {LAYOUTS}")
