"""NVFP4 inputs built to reach the hard cases on purpose, not by luck.

Random normal data almost never puts ``x * out_scale`` on an E2M1 midpoint, never makes a block scale
underflow, never lands a block scale on an E4M3 tie, and rarely saturates. These builders do, block
by block (16 elements), on any device, from a seeded ``torch.Generator``:

- ``ties``: block max ``6 * F * 2**p`` and the other elements every E2M1 midpoint times ``F * 2**p``,
  both signs, and a ``-0.0``, with F = 1 or another E4M3 mantissa. With a power-of-two global scale
  ``x * out_scale`` lands exactly on the midpoints (F = 1) or one float32 ulp above (F > 1, where
  ``fl(1 / F) * F`` rounds up); with ``pow2_ulp_above``/``pow2_ulp_below`` global scales, one or two
  ulps above or below.
- ``zeros``: ``+0.0`` and ``-0.0``.
- ``negative_tiny``: every element negative, block scale ``3 * 2**-9`` (an E4M3 subnormal), some
  elements rounding to ``-0``.
- ``scale_underflow``: ``global_scale * bmax / 6`` below ``2**-10``: block scale 0, codes ``±0``.
- ``saturating``: ``global_scale * bmax / 6`` far above 448: scale 448, large elements beyond 6.
- ``random``: log-uniform magnitudes over six decades.
- ``midpoint_landing``: a random block max and elements ``bf16(±midpoint / out_scale)`` for that
  block's own contract scale: within a float32 ulp or two of a midpoint, for any global scale.
- ``scale_ties``: block max such that ``global_scale * (bmax / 6)`` is exactly an E4M3 tie (found by
  trying every bf16 value), preferring those where ``bmax * fl(1/6)`` lands off the tie: only the
  IEEE division gets those blocks right. A ``scale_tie`` global scale is built to have some.

Global scales (``GLOBAL_SCALE_MODES``): the contract's ``448 * 6 / amax`` of the data (``from_amax``,
and ``tiny_amax``/``huge_amax`` whose data sit near the ends of the float32 range, so that ``out_scale``
overflows or subnormal products appear), or a scale chosen first with the data built around it.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from references.formats import (
    E2M1_MIDPOINTS,
    E2M1_VALUES,
    E4M3_MAX,
    NVFP4_BLOCK,
    e4m3_satfinite_rne,
    nvfp4_global_scale,
)

BLOCKS_PER_ROW = 5  # K = 80 in the fixed-shape builders: not a multiple of 64
BLOCK_KINDS = ("ties", "zeros", "negative_tiny", "scale_underflow", "saturating", "random")
HARD_BLOCK_KINDS = BLOCK_KINDS + ("midpoint_landing", "scale_ties")
GLOBAL_SCALE_MODES = ("from_amax", "tiny_amax", "huge_amax", "pow2", "pow2_ulp_above", "pow2_ulp_below",
                      "scale_tie")
# The data of each mode is built around a global scale 2**exponent; the *_amax modes then replace it
# by the contract's scale of the data. 2**126: data near 1e-33, decode scales near the float32 normal
# limit; 2**-100: data near 1e34.
_NOMINAL_EXPONENT = {"tiny_amax": (126, 127), "huge_amax": (-100, -96)}
_EXPONENT_RANGE = (-12, 12)


def _randint(low: int, high: int, shape, generator) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=generator, device=generator.device)


def _rand(shape, generator) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=generator.device)


def _shuffled(pattern: Sequence[float], shape, generator) -> torch.Tensor:
    """``pattern`` (16 values) in a random order in every block of ``shape`` ``[..., 16]``."""
    values = torch.tensor(pattern, dtype=torch.float32, device=generator.device)
    return values[_rand(shape, generator).argsort(dim=-1)]


# -- one builder per block kind: float32 [rows, blocks, 16] (rounded to bf16 by the caller) --------
def _ties(shape, global_scale, generator):
    exponent = round(math.log2(global_scale))
    power = torch.exp2(_randint(-9, 9, shape[:-1] + (1,), generator).float() - exponent)
    # Half the blocks get a block scale mantissa F other than 1 (an E4M3 mantissa, so sf = F * 2**e
    # exactly): out_scale = fl(1 / F) * 2**-e is then a rounded value and the elements m * F land on
    # m * F * fl(1 / F), one float32 ulp above the midpoint, or one below with pow2_ulp_below scales.
    mantissa = 1 + _randint(1, 8, power.shape, generator) / 8
    power = power * torch.where(_rand(power.shape, generator) < 0.5, 1.0, mantissa)
    pattern = (6.0, *E2M1_MIDPOINTS, *(-m for m in E2M1_MIDPOINTS), -0.0)
    return _shuffled(pattern, shape, generator) * power


def _zeros(shape, global_scale, generator):
    return torch.where(_rand(shape, generator) < 0.3, -0.0, 0.0)


def _negative_tiny(shape, global_scale, generator):
    pattern = E2M1_VALUES + E2M1_MIDPOINTS + (6.0,)
    return -_shuffled(pattern, shape, generator) * (3 * 2.0**-9 / global_scale)


def _scale_underflow(shape, global_scale, generator):
    return (_rand(shape, generator) - 0.5) * (6 * 2.0**-11 / global_scale)


def _saturating(shape, global_scale, generator):
    normal = torch.randn(shape, generator=generator, device=generator.device)
    return normal * (E4M3_MAX * 6 * 4 / global_scale)


def _random(shape, global_scale, generator):
    magnitude = torch.pow(10.0, _rand(shape, generator) * 6 - 3) * (100 / global_scale)
    return torch.randn(shape, generator=generator, device=generator.device) * magnitude


def _contract_out_scale(block_max: torch.Tensor, global_scale: float) -> torch.Tensor:
    """The contract's out_scale of blocks with this bf16 max, in float32, on block_max's device.

    Computed on the CPU, where torch's float32 division is IEEE; on CUDA ``block_max / 6`` is
    ``block_max * fl(1/6)``, an ulp off on some blocks.
    """
    scale = torch.tensor(global_scale, dtype=torch.float32)
    block_max_cpu = block_max.cpu()
    block_scale = e4m3_satfinite_rne(scale * (block_max_cpu / 6)).float()
    out_scale = torch.reciprocal(block_scale * torch.reciprocal(scale))
    return torch.where(block_scale == 0, 0.0, out_scale).to(block_max.device)


def _with_block_max(others: torch.Tensor, block_max: torch.Tensor, generator) -> torch.Tensor:
    """Blocks of ``others`` (each |value| <= its block max) with ``±block_max`` at a random position."""
    position = _randint(0, NVFP4_BLOCK, block_max.shape, generator)
    sign = torch.where(_rand(block_max.shape, generator) < 0.5, -1.0, 1.0)
    at_position = torch.arange(NVFP4_BLOCK, device=others.device) == position
    return torch.where(at_position, sign * block_max, others)


def _midpoint_landing(shape, global_scale, generator):
    full_scale = E4M3_MAX * 6 / global_scale
    block_max = (_rand(shape[:-1] + (1,), generator) * full_scale).bfloat16().float()
    out_scale = _contract_out_scale(block_max, global_scale)
    which = _randint(0, len(E2M1_MIDPOINTS), shape, generator)
    midpoints = torch.tensor(E2M1_MIDPOINTS, device=generator.device)[which]
    signs = torch.where(_rand(shape, generator) < 0.5, -1.0, 1.0)
    landing = torch.where(out_scale > 0, signs * midpoints / out_scale, 0.0)
    # bf16 rounding may carry a landing value past the block max: keep the block max the maximum
    landing = landing.bfloat16().float().clamp(-block_max, block_max)
    return _with_block_max(landing, block_max, generator)


def _bf16_positive_finite() -> torch.Tensor:
    bits = torch.arange(1, 0x7F80, dtype=torch.int32).to(torch.int16)
    return bits.view(torch.bfloat16).float()


def _e4m3_ties() -> torch.Tensor:
    """Every value halfway between two neighbouring finite E4M3 magnitudes (all exact in float32)."""
    grid = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    return (grid[:-1] + grid[1:]) / 2


def scale_tie_block_maxima(global_scale: float) -> torch.Tensor:
    """bf16 block maxima whose ``global_scale * (bmax / 6)`` is exactly an E4M3 tie (float32, CPU).

    Those where ``bmax * fl(1/6)`` lands off the tie come first choice: when there are any, only they
    are returned.
    """
    scale = torch.tensor(global_scale, dtype=torch.float32)
    candidates = _bf16_positive_finite()
    landed = scale * (candidates / 6)
    on_tie = torch.isin(landed, _e4m3_ties())
    by_reciprocal = scale * (candidates * torch.reciprocal(torch.tensor(6.0)))
    telling = on_tie & (e4m3_satfinite_rne(by_reciprocal).view(torch.uint8)
                        != e4m3_satfinite_rne(landed).view(torch.uint8))
    return candidates[telling] if telling.any() else candidates[on_tie]


def _scale_ties(shape, global_scale, generator):
    maxima = scale_tie_block_maxima(global_scale).to(generator.device)
    if maxima.numel() == 0:
        return _ties(shape, global_scale, generator)
    block_max = maxima[_randint(0, maxima.numel(), shape[:-1] + (1,), generator)]
    others = ((_rand(shape, generator) * 2 - 1) * block_max).bfloat16().float()
    return _with_block_max(others, block_max, generator)


_BUILDERS = {"ties": _ties, "zeros": _zeros, "negative_tiny": _negative_tiny, "scale_underflow": _scale_underflow,
             "saturating": _saturating, "random": _random, "midpoint_landing": _midpoint_landing,
             "scale_ties": _scale_ties}


def nvfp4_hard_blocks(rows: int, cols: int, global_scale: float, kinds: Sequence[str],
                      generator: torch.Generator) -> torch.Tensor:
    """bf16 ``[rows, cols]`` on the generator's device, each 16-element block one of ``kinds`` (drawn
    uniformly), built around ``global_scale`` (a Python float, the encode scale given to the quantizer).

    :param cols: a multiple of 16.
    """
    if cols % NVFP4_BLOCK:
        raise ValueError(f"cols: {cols} is not a multiple of {NVFP4_BLOCK}")
    shape = (rows, cols // NVFP4_BLOCK, NVFP4_BLOCK)
    kind = _randint(0, len(kinds), shape[:-1] + (1,), generator)
    x = torch.zeros(shape, device=generator.device)
    for index, name in enumerate(kinds):
        x = torch.where(kind == index, _BUILDERS[name](shape, global_scale, generator), x)
    return x.reshape(rows, cols).bfloat16()


# -- global scales --------------------------------------------------------------------------------
def _scale_tie_global_scale(generator: torch.Generator) -> float:
    """A global scale with an E4M3-tie block max that the reciprocal form ``bmax * fl(1/6)`` misses.

    Tries random (bmax, tie) pairs: ``gs = fl(tie / fl(bmax / 6))``, kept when ``gs * fl(bmax / 6)``
    is exactly the tie and the reciprocal form rounds to the other E4M3 neighbour (as in the
    hand-worked EXAMPLE_SCALE_TIE of test_nvfp4_reference). Float32 scalars on the CPU: IEEE.
    """
    ties = _e4m3_ties()
    ties = ties[(ties > 2.0**-6) & (ties < E4M3_MAX)]
    for _ in range(1000):
        block_max = torch.exp2(torch.rand((), generator=generator) * 16 - 8).bfloat16().float()
        tie = ties[torch.randint(0, len(ties), (), generator=generator)]
        global_scale = tie / (block_max / 6)
        on_tie = global_scale * (block_max / 6) == tie
        by_reciprocal = global_scale * (block_max * torch.reciprocal(torch.tensor(6.0)))
        misses = e4m3_satfinite_rne(by_reciprocal).view(torch.uint8) != e4m3_satfinite_rne(tie).view(torch.uint8)
        if on_tie and misses and 2.0**-12 < global_scale < 2.0**12:
            return global_scale.item()
    raise RuntimeError("no scale-tie global scale in 1000 tries")


def hard_input(rows: int, cols: int, mode: str, kinds: Sequence[str], seed: int,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x bf16 [rows, cols], global_scale float32 [1])`` on ``device`` for a ``GLOBAL_SCALE_MODES`` mode.

    The scale is chosen on a CPU generator (a few scalar draws), the data drawn on the device.
    """
    if mode not in GLOBAL_SCALE_MODES:
        raise ValueError(f"mode: {mode!r} is not one of {GLOBAL_SCALE_MODES}")
    choice = torch.Generator().manual_seed(seed)
    low, high = _NOMINAL_EXPONENT.get(mode, _EXPONENT_RANGE)
    power = 2.0 ** int(torch.randint(low, high + 1, (), generator=choice))
    if mode == "pow2_ulp_above":  # the next float32 up (exact: 1 + 2**-23 has 24 bits)
        global_scale = power * (1 + 2.0**-23)
    elif mode == "pow2_ulp_below":  # the next float32 down
        global_scale = power * (1 - 2.0**-24)
    elif mode == "scale_tie":
        global_scale = _scale_tie_global_scale(choice)
    else:
        global_scale = power
    generator = torch.Generator(device=device).manual_seed(seed)
    x = nvfp4_hard_blocks(rows, cols, global_scale, kinds, generator)
    if mode in ("from_amax", "tiny_amax", "huge_amax"):
        return x, nvfp4_global_scale(x)
    return x, torch.tensor([global_scale], dtype=torch.float32, device=device)


# -- fixed-shape rows of the format tests (K = 80) ------------------------------------------------
def nvfp4_hard_rows(global_scale: float, rows: int, seed: int) -> torch.Tensor:
    """bf16 ``[rows, 80]`` on the CPU whose blocks are drawn from ``BLOCK_KINDS``, around ``global_scale``.

    Meant for a ``global_scale`` given to the quantizer as is (not recomputed from the data), and
    exact (ties exactly on midpoints) when ``global_scale`` is a power of two.
    """
    generator = torch.Generator().manual_seed(seed)
    return nvfp4_hard_blocks(rows, BLOCKS_PER_ROW * NVFP4_BLOCK, global_scale, BLOCK_KINDS, generator)


def midpoint_landing_rows(amax: float, rows: int, seed: int) -> torch.Tensor:
    """bf16 ``[rows, 80]`` on the CPU with amax ``amax``, whose elements land near E2M1 midpoints.

    Every block is ``midpoint_landing`` for the contract's scale ``2688 / amax``: for most global
    scales within a float32 ulp or two of a midpoint, exactly where two correct-looking ways of
    computing ``out_scale`` part ways.
    """
    generator = torch.Generator().manual_seed(seed)
    global_scale = nvfp4_global_scale(torch.tensor([[amax]])).item()
    x = nvfp4_hard_blocks(rows, BLOCKS_PER_ROW * NVFP4_BLOCK, global_scale, ("midpoint_landing",), generator)
    x = x.clamp(-amax, amax)  # a block max drawn up to 2688 / global_scale may round just past amax
    x[0, 0] = amax
    return x
