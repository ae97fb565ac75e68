"""Inputs for ``paged_decode_nvfp4kv``: ``paged_decode``'s recipes and metadata, with K and V in NVFP4.

A recipe is ``paged_decode``'s (``references/attention/paged_decode_strategy.py``: shapes, lengths, holes,
selections, value modes, layouts, seed; drawn for a bf16 cache of the same cell bounds) plus three
NVFP4 fields.  ``build`` builds ``paged_decode``'s call for the bf16 cache — the same tables, lengths,
selections and query, NaN in every slot no row attends — then quantizes the attended K and V with
``nvfp4_quantize`` under one global (encode) scale and plants the NVFP4 hard cases inside them:

- ``codes``: ``quantized`` (the values as they come); ``midpoints`` (every element of an attended
  block on an E2M1 midpoint, or at the block's maximum 6, times a power of two before quantization:
  under the global scale ``one`` every code is an encoder tie resolved to the even index, under
  ``amax`` they sit next to ties); ``every_code`` (codes uniform over all 16 nibbles, -0
  and ±6 included, both nibbles of a byte independent);
- ``block_scales``: ``quantized``, or ``zero_and_subnormal`` (about a third of the attended blocks
  get scale 0 over nonzero codes — they decode to 0 — and a third one of the e4m3 subnormals
  2^-9 .. 7 * 2^-9);
- ``global_scale``: ``amax`` (the contract's ``448 * 6 / amax`` over K and V) or ``one``.

Slots no row attends hold garbage in both codes and scales: random code bytes, and scales that are
NaN (e4m3 0x7F / 0xFF) or 448 (finite garbage, so a kernel that only filters NaN still shows).  The
codes and scales follow the recipe's layouts (``references/strategies/layouts.nd_view``): K's as q does, V's its
own (``v_layout``).
"""
from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st

from references.bounds import OneOf, stable_seed
from references.formats.e2m1 import E2M1_MAX, E2M1_MIDPOINTS
from references.formats.nvfp4 import NVFP4_BLOCK, nvfp4_global_scale, nvfp4_quantize
from references.attention import paged_decode_strategy as dense
from references.attention.paged_decode_nvfp4kv import decode_cache
from references.strategies.layouts import nd_view

CODES = ("quantized", "midpoints", "every_code")
BLOCK_SCALES = ("quantized", "zero_and_subnormal")
GLOBAL_SCALES = ("amax", "one")
E4M3_NAN = (0x7F, 0xFF)
E4M3_MAX_BITS = 0x7E       # 448
E4M3_SUBNORMAL_BITS = range(1, 8)


def _dense_cell(cell):
    """The cell as ``paged_decode``'s strategy reads it: the same bounds and seeds, a bf16 cache."""
    return dataclasses.replace(cell, bounds={**cell.bounds, "kv_dtype": OneOf((torch.bfloat16,))})


def _nvfp4_fields(recipe: dict, codes: str, block_scales: str, global_scale: str) -> dict:
    return {**recipe, "kv_dtype": "nvfp4", "kv_scale": 1.0, "codes": codes, "block_scales": block_scales,
            "global_scale": global_scale}


def recipes(cell, device) -> st.SearchStrategy[dict]:
    @st.composite
    def draw_recipe(draw):
        recipe = draw(dense.recipes(_dense_cell(cell), device))
        return _nvfp4_fields(recipe, draw(st.sampled_from(CODES)), draw(st.sampled_from(BLOCK_SCALES)),
                             draw(st.sampled_from(GLOBAL_SCALES)))

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """``paged_decode``'s corners (empty batch and table, long rows beside empty ones with holes and GQA,
    overflow-sized scores, the largest group, head dim and page, ragged edges), each given an NVFP4 hard
    case: exact encoder ties with zero and subnormal scales on the long rows beside empty ones, every
    code on the largest shape, quantized codes where the scores must overflow an unguarded exp."""
    found = dense.corners(_dense_cell(cell), device)
    return [_nvfp4_fields(recipe, *CORNER_CASES[i % len(CORNER_CASES)]) for i, recipe in enumerate(found)]


# (codes, block_scales, global_scale) of each of paged_decode's corners, in its order
CORNER_CASES = (
    ("quantized", "quantized", "amax"),                  # empty batch
    ("midpoints", "zero_and_subnormal", "one"),          # long rows beside empty ones, holes, GQA, interleaved
    ("quantized", "quantized", "amax"),                  # overflow-sized scores
    ("every_code", "zero_and_subnormal", "amax"),        # group 16, largest D and page, padded rows
    ("every_code", "quantized", "one"),                  # group 3 on ragged edges, holes
    ("midpoints", "quantized", "amax"),                  # a table of no pages
    ("quantized", "zero_and_subnormal", "one"),          # sparse: a selection of no entries
)


# -- build ----------------------------------------------------------------------------------------
def _midpoint_values(shape, generator, device) -> torch.Tensor:
    """Blocks of ``sign * unit * m`` with m an E2M1 midpoint or 6 (one per block at 6), unit = 2^k."""
    choices = torch.tensor((*E2M1_MIDPOINTS, E2M1_MAX), device=device)
    blocks = (*shape[:-1], shape[-1] // NVFP4_BLOCK, NVFP4_BLOCK)
    magnitude = choices[torch.randint(0, choices.numel(), blocks, generator=generator, device=device)]
    magnitude[..., 0] = E2M1_MAX
    sign = torch.randint(0, 2, blocks, generator=generator, device=device) * 2.0 - 1.0
    unit = torch.exp2(torch.randint(-3, 3, (*blocks[:-1], 1), generator=generator, device=device).float())
    return (sign * magnitude * unit).reshape(shape)


def _quantized(values: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    head_dim = values.shape[-1]
    packed, scales = nvfp4_quantize(values.reshape(-1, head_dim).to(torch.bfloat16), global_scale)
    return (packed.reshape(*values.shape[:-1], head_dim // 2),
            scales.reshape(*values.shape[:-1], head_dim // NVFP4_BLOCK))


def _planted(recipe, packed, scales, live, generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The recipe's code and scale modes in the attended slots, garbage in the others (``live``: [P, S])."""
    def random_bytes(like):
        return torch.randint(0, 256, like.shape, generator=generator, device=device, dtype=torch.uint8)

    if recipe["codes"] == "every_code":
        packed = random_bytes(packed)
    scale_bits = scales.view(torch.uint8)
    if recipe["block_scales"] == "zero_and_subnormal":
        kind = torch.randint(0, 3, scale_bits.shape, generator=generator, device=device)
        subnormal = torch.randint(min(E4M3_SUBNORMAL_BITS), max(E4M3_SUBNORMAL_BITS) + 1, scale_bits.shape,
                                  generator=generator, device=device).to(torch.uint8)
        scale_bits = torch.where(kind == 0, 0, torch.where(kind == 1, subnormal, scale_bits)).to(torch.uint8)
        # a zeroed block keeps nonzero codes: it must still decode to 0
        packed = torch.where(packed == 0, torch.full_like(packed, 0x75), packed)
    garbage_scales = torch.tensor((*E4M3_NAN, E4M3_MAX_BITS), dtype=torch.uint8, device=device)
    garbage_scales = garbage_scales[torch.randint(0, 3, scale_bits.shape, generator=generator, device=device)]
    attended = live[:, :, None, None]
    packed = torch.where(attended, packed, random_bytes(packed))
    scale_bits = torch.where(attended, scale_bits, garbage_scales)
    return packed, scale_bits.view(torch.float8_e4m3fn)


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    call = dense.build({**recipe, "kv_dtype": "bfloat16"}, device)
    k, v = call.pop("k_cache"), call.pop("v_cache")
    call.pop("kv_scale")
    generator = torch.Generator(device=device).manual_seed(stable_seed(recipe["seed"], "nvfp4"))
    live = ~k.isnan().flatten(2).any(dim=2)                                   # [P, S]: slots some row attends
    keys, values = k.float(), v.float()
    if recipe["codes"] == "midpoints":
        keys = _midpoint_values(keys.shape, generator, device)
        values = _midpoint_values(values.shape, generator, device)
    attended = live[:, :, None, None]
    keys, values = torch.where(attended, keys, 0.0), torch.where(attended, values, 0.0)
    if recipe["global_scale"] == "amax":
        global_scale = nvfp4_global_scale(torch.stack([keys, values]).to(torch.bfloat16))
    else:
        global_scale = torch.ones(1, device=device)
    for name, cache, layout in (("k", keys, recipe["layout"]), ("v", values, dense.v_layout(recipe))):
        packed, scales = _planted(recipe, *_quantized(cache, global_scale), live, generator, device)
        for suffix, tensor in (("packed", packed), ("scales", scales)):
            call[f"{name}_{suffix}"] = nd_view(tuple(tensor.shape), tensor.dtype, layout, device)
            call[f"{name}_{suffix}"].copy_(tensor)
    call["kv_global_scale"] = global_scale
    # the dense build's check again, on the keys as they now decode (every_code and midpoints replace them,
    # large-score rows included)
    decoded = decode_cache(call["k_packed"], call["k_scales"], global_scale)
    call["q"].copy_(dense.clear_of_cancellation(call["q"], decoded, call, recipe["sm_scale"], recipe["seed"]))
    return call
