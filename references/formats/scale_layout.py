"""The 128x4 swizzled block-scale layout that block-scaled GEMMs read (cuBLASLt, CUTLASS, TRT-LLM).

Scales are kept row-major (``[M, K/16]``, "linear") by the contracts; vendor NVFP4 GEMMs instead read
them in tiles of 128 rows x 4 scale columns (128 x 64 elements), each tile 512 contiguous bytes,
tiles in row-major order of (row tile, column tile). Inside a tile, scale ``(m, k)`` sits at

    (m % 32) * 16 + ((m % 128) // 32) * 4 + (k % 4)

so that the 32 lanes of a warp each read 16 contiguous bytes: the scales of rows m, m+32, m+64, m+96
for 4 consecutive blocks. The whole offset is

    ((m // 128) * ceil(S / 4) + k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4

with S the number of scale columns. Sources: the cuBLAS documentation, "1D Block Scaling Factors
Layout", and TensorRT-LLM ``get_sf_out_offset_128x4`` (``cpp/tensorrt_llm/kernels/quantization.cuh``)
whose ``block_scale_interleave_kernel`` writes exactly this and zeros into the padding. The tests pin
this module against that formula, evaluated element by element.

Rows are padded up to a multiple of 128 and scale columns up to a multiple of 4 (K up to a multiple
of 64); padding holds zeros, as TensorRT-LLM writes it: a GEMM reads whole tiles, and a zero scale
makes the padded elements contribute 0.
"""
from __future__ import annotations

import torch

from references.validation import refuse, require_ndim, require_tensor

TILE_ROWS = 128
TILE_COLS = 4
# A tile is stored as [32 rows][4 row groups][4 columns]: row m of the tile is group m // 32, lane m % 32.
LANES = 32
ROW_GROUPS = TILE_ROWS // LANES


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _require_one_byte(argument: str, tensor: torch.Tensor) -> None:
    if tensor.element_size() != 1:
        raise TypeError(f"{argument}: dtype {str(tensor.dtype).replace('torch.', '')} has "
                        f"{tensor.element_size()} bytes per element — pass the 1-byte scales "
                        "(float8_e4m3fn, or their uint8 view)")


def swizzled_128x4_numel(rows: int, cols: int) -> int:
    """Elements of the swizzled buffer for ``rows x cols`` scales (both padded to whole tiles)."""
    return _ceil_div(rows, TILE_ROWS) * TILE_ROWS * _ceil_div(cols, TILE_COLS) * TILE_COLS


def to_swizzled_128x4(block_scales: torch.Tensor) -> torch.Tensor:
    """Row-major ``[rows, cols]`` scales -> the 1-D swizzled buffer (same dtype, zero padding).

    :param block_scales: 2-D tensor of a 1-byte dtype, ``[M, K/16]`` for NVFP4.

    >>> to_swizzled_128x4(torch.arange(2 * 5, dtype=torch.uint8).reshape(2, 5))[:20].tolist()
    [0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 6, 7, 8]
    """
    require_tensor("block_scales", block_scales)
    require_ndim("block_scales", block_scales, 2, "[rows, cols]")
    _require_one_byte("block_scales", block_scales)
    rows, cols = block_scales.shape
    row_tiles, col_tiles = _ceil_div(rows, TILE_ROWS), _ceil_div(cols, TILE_COLS)
    # Permute bytes: float8 tensors' copy kernels are not needed, and the layout is dtype-blind.
    padded = torch.zeros(row_tiles * TILE_ROWS, col_tiles * TILE_COLS, dtype=torch.uint8,
                         device=block_scales.device)
    padded[:rows, :cols] = block_scales.view(torch.uint8)
    # padded row = tile * 128 + group * 32 + lane; column = col_tile * 4 + k.
    tiles = padded.view(row_tiles, ROW_GROUPS, LANES, col_tiles, TILE_COLS)
    swizzled = tiles.permute(0, 3, 2, 1, 4)  # [row tile, col tile, lane, group, k]
    return swizzled.reshape(-1).view(block_scales.dtype)


def from_swizzled_128x4(swizzled: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of ``to_swizzled_128x4``: the 1-D swizzled buffer -> row-major ``[rows, cols]``.

    :param swizzled: 1-D tensor of a 1-byte dtype with ``swizzled_128x4_numel(rows, cols)`` elements.
    :param rows: M, the number of rows of the unpadded scales.
    :param cols: the number of scale columns (K/16 for NVFP4) of the unpadded scales.
    """
    require_tensor("swizzled", swizzled)
    require_ndim("swizzled", swizzled, 1, "[padded rows * padded cols]")
    _require_one_byte("swizzled", swizzled)
    for name, value in (("rows", rows), ("cols", cols)):
        if not isinstance(value, int) or value < 0:
            raise refuse(name, f"is {value!r}", "pass a non-negative int, the unpadded scale shape")
    expected = swizzled_128x4_numel(rows, cols)
    if swizzled.numel() != expected:
        raise refuse("swizzled", f"has {swizzled.numel()} elements, {rows} x {cols} scales swizzle to {expected}",
                     "pass the buffer from to_swizzled_128x4 and the unpadded rows, cols it was made from")
    row_tiles, col_tiles = _ceil_div(rows, TILE_ROWS), _ceil_div(cols, TILE_COLS)
    tiles = swizzled.view(torch.uint8).reshape(row_tiles, col_tiles, LANES, ROW_GROUPS, TILE_COLS)
    padded = tiles.permute(0, 3, 2, 1, 4).reshape(row_tiles * TILE_ROWS, col_tiles * TILE_COLS)
    return padded[:rows, :cols].contiguous().view(swizzled.dtype)
