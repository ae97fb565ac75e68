"""NVFP4 inputs built to reach the hard cases on purpose, not by luck.

Random normal data almost never puts ``x * out_scale`` on an E2M1 midpoint, never makes a block scale
underflow, and rarely saturates. These builders do, block by block (16 elements), with K = 80: five
blocks, not a multiple of 64 (the swizzled layout's and most kernels' tile).
"""
from __future__ import annotations

import torch

from references.formats import E2M1_MIDPOINTS, E2M1_VALUES, NVFP4_BLOCK, e4m3_satfinite_rne, nvfp4_global_scale

BLOCKS_PER_ROW = 5
BLOCK_KINDS = ("ties", "zeros", "negative_tiny", "scale_underflow", "saturating", "random")


def _block(kind: str, decode_scale: float, generator: torch.Generator) -> torch.Tensor:
    """One float64 block; every value is exact in bf16 when decode_scale is a power of two."""
    if kind == "ties":
        # sf = 2**e exactly; x * out_scale = 6 and every midpoint of the grid, both signs, and a -0.0.
        scale = 2.0 ** torch.randint(-6, 8, (), generator=generator).item() * decode_scale
        midpoints = torch.tensor(E2M1_MIDPOINTS, dtype=torch.float64)
        return torch.cat([torch.tensor([6.0]), midpoints, -midpoints, torch.tensor([-0.0])]) * scale
    if kind == "zeros":
        signs = torch.rand(NVFP4_BLOCK, generator=generator) < 0.3
        return torch.where(signs, -0.0, 0.0).double()
    if kind == "negative_tiny":
        # sf = 3 * 2**-9, an E4M3 subnormal; every element negative, some of them rounding to -0.
        scale = 3 * 2.0**-9 * decode_scale
        grid = torch.tensor(E2M1_VALUES + E2M1_MIDPOINTS + (6.0,), dtype=torch.float64)
        return -grid * scale
    if kind == "scale_underflow":
        # global_scale * bmax / 6 below 2**-10, half the smallest E4M3 subnormal: sf = 0, codes ±0.
        return (torch.rand(NVFP4_BLOCK, generator=generator, dtype=torch.float64) - 0.5) * 6 * 2.0**-11 * decode_scale
    if kind == "saturating":
        # global_scale * bmax / 6 far above 448: sf = 448 and x * out_scale beyond 6 for the large elements.
        return torch.randn(NVFP4_BLOCK, generator=generator, dtype=torch.float64) * 448 * 6 * 4 * decode_scale
    magnitude = 10.0 ** (torch.rand(NVFP4_BLOCK, generator=generator, dtype=torch.float64) * 6 - 3)
    return torch.randn(NVFP4_BLOCK, generator=generator, dtype=torch.float64) * magnitude * 100 * decode_scale


def nvfp4_hard_rows(global_scale: float, rows: int, seed: int) -> torch.Tensor:
    """bf16 ``[rows, 80]`` whose blocks are drawn from ``BLOCK_KINDS``, relative to ``1 / global_scale``.

    Meant for a ``global_scale`` given to the quantizer as is (not recomputed from the data), and
    exact (ties exactly on midpoints) when ``global_scale`` is a power of two.
    """
    generator = torch.Generator().manual_seed(seed)
    decode_scale = 1.0 / global_scale
    kinds = torch.randint(0, len(BLOCK_KINDS), (rows, BLOCKS_PER_ROW), generator=generator)
    return torch.stack([
        torch.cat([_block(BLOCK_KINDS[kind], decode_scale, generator) for kind in row.tolist()])
        for row in kinds
    ]).bfloat16()


def midpoint_landing_rows(amax: float, rows: int, seed: int) -> torch.Tensor:
    """bf16 ``[rows, 80]`` with amax ``amax``, whose elements land near E2M1 midpoints after scaling.

    Each block gets a random bmax, its contract scale (``global_scale = 2688 / amax``) and elements
    ``bf16(±midpoint / out_scale)``: for most global scales they land within a float32 ulp or two of
    a midpoint, exactly where two correct-looking ways of computing ``out_scale`` part ways.
    """
    generator = torch.Generator().manual_seed(seed)
    global_scale = nvfp4_global_scale(torch.tensor([[amax]]))
    bmax = (torch.rand(rows, BLOCKS_PER_ROW, 1, generator=generator) * amax).bfloat16().float()
    bmax[0, 0, 0] = amax
    block_scales = e4m3_satfinite_rne(global_scale * (bmax / 6)).float()
    out_scale = torch.reciprocal(block_scales * torch.reciprocal(global_scale))
    midpoints = torch.tensor(E2M1_MIDPOINTS)[
        torch.randint(0, len(E2M1_MIDPOINTS), (rows, BLOCKS_PER_ROW, NVFP4_BLOCK - 1), generator=generator)]
    signs = torch.where(torch.rand(midpoints.shape, generator=generator) < 0.5, -1.0, 1.0)
    landing = signs * midpoints / out_scale
    return torch.cat([bmax, landing], dim=-1).reshape(rows, BLOCKS_PER_ROW * NVFP4_BLOCK).bfloat16()
