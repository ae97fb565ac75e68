"""The 128x4 swizzled block-scale layout, pinned against its public definition, element by element.

Public definition (cuBLAS documentation, "1D Block Scaling Factors Layout"; TensorRT-LLM
``get_sf_out_offset_128x4`` in ``cpp/tensorrt_llm/kernels/quantization.cuh`` and the flat form in the
comment of ``block_scale_interleave_kernel``, ``cpp/tensorrt_llm/kernels/quantization.cu``):

    offset(m, k) = ((m // 128) * ceil(S / 4) + k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4

with zeros in the padding (rows up to a multiple of 128, scale columns up to a multiple of 4).
"""
from __future__ import annotations

import pytest
import torch

from references.formats import from_swizzled_128x4, to_swizzled_128x4
from references.formats.scale_layout import swizzled_128x4_numel
from suites.quant import wrong_encoders

pytestmark = pytest.mark.cpu

# (rows, scale columns): one element; a partial tile both ways; whole tiles; several tiles with
# partial edges (K = 16 * 9 = 144 is not a multiple of 64); DeepSeek-like K = 7168 -> 448 columns.
SHAPES = [(1, 1), (5, 3), (128, 4), (129, 5), (300, 9), (256, 8), (3, 448)]


def public_offset(m: int, k: int, cols: int) -> int:
    """The offset of scale (m, k), written exactly as TensorRT-LLM's flat form states it."""
    num_sf_tiles_k = (cols + 4 - 1) // 4
    tile_offset = ((m // 128) * num_sf_tiles_k + k // 4) * 512
    return tile_offset + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4


def _distinct_nonzero_scales(rows: int, cols: int) -> torch.Tensor:
    # 1..250, never 0, so a scale can't be mistaken for padding; as e4m3 these are positive finite codes.
    codes = (torch.arange(rows * cols) % 250 + 1).to(torch.uint8).reshape(rows, cols)
    return codes.view(torch.float8_e4m3fn)


def layout_mismatches(swizzle, rows: int, cols: int) -> list[str]:
    scales = _distinct_nonzero_scales(rows, cols)
    swizzled = swizzle(scales).view(torch.uint8)
    found = []
    if swizzled.numel() != swizzled_128x4_numel(rows, cols):
        return [f"{swizzled.numel()} elements, expected {swizzled_128x4_numel(rows, cols)}"]
    written = torch.zeros(swizzled.numel(), dtype=torch.bool)
    source = scales.view(torch.uint8)
    for m in range(rows):
        for k in range(cols):
            offset = public_offset(m, k, cols)
            written[offset] = True
            if swizzled[offset] != source[m, k]:
                found.append(f"scale ({m}, {k}) not at offset {offset}")
    if swizzled[~written].any():
        found.append("padding is not zero")
    return found


@pytest.mark.parametrize("rows, cols", SHAPES)
def test_swizzle_matches_the_public_offset_formula(rows, cols):
    assert layout_mismatches(to_swizzled_128x4, rows, cols) == []


@pytest.mark.parametrize("wrong_swizzle", [wrong_encoders.swizzle_without_lane_interleave,
                                           wrong_encoders.swizzle_column_tiles_outer],
                         ids=lambda f: f.__name__)
def test_layout_check_rejects_wrong_swizzle(wrong_swizzle):
    assert layout_mismatches(wrong_swizzle, 300, 9) != []


@pytest.mark.parametrize("rows, cols", SHAPES)
def test_swizzle_round_trip(rows, cols):
    scales = _distinct_nonzero_scales(rows, cols)
    back = from_swizzled_128x4(to_swizzled_128x4(scales), rows, cols)
    assert back.dtype == torch.float8_e4m3fn and back.shape == (rows, cols)
    assert torch.equal(back.view(torch.uint8), scales.view(torch.uint8))


def test_swizzle_reads_strided_views_and_keeps_the_dtype():
    scales = _distinct_nonzero_scales(130, 12)[:, ::2]  # a strided 130 x 6 view
    assert torch.equal(to_swizzled_128x4(scales).view(torch.uint8),
                       to_swizzled_128x4(scales.contiguous()).view(torch.uint8))
    assert to_swizzled_128x4(scales.contiguous().view(torch.uint8)).dtype == torch.uint8
    every_other = to_swizzled_128x4(scales).repeat_interleave(2)[::2]  # a strided 1-D buffer
    assert torch.equal(from_swizzled_128x4(every_other, 130, 6).view(torch.uint8), scales.view(torch.uint8))


@pytest.mark.parametrize("call, argument, error", [
    (lambda: to_swizzled_128x4(torch.zeros(4, 4, dtype=torch.float32)), "block_scales", TypeError),
    (lambda: to_swizzled_128x4(torch.zeros(16, dtype=torch.uint8)), "block_scales", ValueError),
    (lambda: from_swizzled_128x4(torch.zeros(512, dtype=torch.uint8), 129, 4), "swizzled", ValueError),
    (lambda: from_swizzled_128x4(torch.zeros(512, dtype=torch.uint8), -1, 4), "rows", ValueError),
    (lambda: from_swizzled_128x4(torch.zeros(4, 128, dtype=torch.uint8), 128, 4), "swizzled", ValueError),
], ids=["float32-scales", "1d-scales", "wrong-length", "negative-rows", "2d-buffer"])
def test_layout_refuses_with_the_argument_named(call, argument, error):
    with pytest.raises(error, match=f"^{argument}: .+ — .+"):
        call()
