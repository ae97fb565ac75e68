"""Other implementations of ``nvfp4_quantize`` for the battery to judge: one correct, many wrong.

Each wrong one breaks the contract in one way a real quantizer does (TensorRT-LLM's reciprocal forms,
torchao's scale conventions, fast-math division, flushed subnormals, an unwritten tail...);
``test_nvfp4_quantize.py`` checks that the battery rejects every one and accepts the correct one.
Judge one yourself: ``tools/certify-cells --op nvfp4_quantize --impl suites.quant.nvfp4_quantize_impls:NAME``.
"""
from __future__ import annotations

import functools

import torch

from ops.quant import nvfp4_quantize as kernel_module
from references.formats import E2M1_VALUES, NVFP4_BLOCK, e2m1_encode, e4m3_satfinite_rne, pack_nibbles
from references.quant.nvfp4_quantize import validate
from suites.quant import wrong_encoders
from suites.quant.exact_rounding import nearest_even_index
from suites.strided_reads import read_as_dense


# -- a correct, independent formulation -----------------------------------------------------------
def _divided_by_six(values: torch.Tensor) -> torch.Tensor:
    # A tensor divisor: on CUDA, torch divides by a Python number as a multiplication by its reciprocal.
    return values / torch.tensor(6.0, dtype=values.dtype, device=values.device)


def _float32_of_exact(value: torch.Tensor) -> torch.Tensor:
    # float64 holds float32 products exactly, and a float64 quotient rounded again to float32 is the
    # correctly rounded float32 quotient (53 >= 2 * 24 + 2): one IEEE float32 operation, emulated.
    return value.float().double()


def _e4m3_by_grid_search(values: torch.Tensor) -> torch.Tensor:
    grid = torch.arange(0, 0x7F, dtype=torch.uint8, device=values.device).view(torch.float8_e4m3fn).double()
    return grid[nearest_even_index(values, grid)]  # values are >= 0 here; beyond 448 saturates


def correct_via_grid_search(x, global_scale):
    """Correct: each float32 step emulated in float64 and rounded once, E4M3 and E2M1 by searching their
    grids for the nearest value (ties to the even code); nothing shared with the reference's rounding."""
    validate(x, global_scale)
    rows, cols = x.shape
    blocks = x.double().reshape(rows, cols // NVFP4_BLOCK, NVFP4_BLOCK)
    encode_scale = global_scale.double().reshape(())
    block_max = blocks.abs().amax(dim=-1)
    block_scale = _e4m3_by_grid_search(_float32_of_exact(encode_scale * _float32_of_exact(_divided_by_six(block_max))))
    decode_scale = _float32_of_exact(1 / encode_scale)
    out_scale = torch.where(block_scale == 0, 0.0, _float32_of_exact(1 / _float32_of_exact(block_scale * decode_scale)))
    scaled = _float32_of_exact(blocks * out_scale[..., None])
    grid = torch.tensor(E2M1_VALUES, dtype=torch.float64, device=x.device)
    codes = nearest_even_index(scaled, grid) + 8 * scaled.signbit()
    # 0 * inf, where a block's out_scale overflows (tiny amax): the contract's NaN code is 7
    codes = torch.where(scaled.isnan(), 7, codes).reshape(rows, cols).to(torch.uint8)
    return codes[:, 0::2] + 16 * codes[:, 1::2], block_scale.float().to(torch.float8_e4m3fn)


# -- the contract's chain with one step swapped (the rest is the reference's building blocks) ------
def _block_quotient_ieee(block_max):
    return _divided_by_six(block_max)


def _out_scale_contract(block_scale, encode_scale):
    return torch.reciprocal(block_scale * torch.reciprocal(encode_scale))


def _chain(x, global_scale, *, block_quotient=_block_quotient_ieee, out_scale_of=_out_scale_contract,
           zero_scale_test="scale", cast=e4m3_satfinite_rne, encode=e2m1_encode, pack=pack_nibbles,
           flush_subnormal_inputs=False):
    validate(x, global_scale)
    rows, cols = x.shape
    blocks = x.float().reshape(rows, cols // NVFP4_BLOCK, NVFP4_BLOCK)
    if flush_subnormal_inputs:
        blocks = torch.where(blocks.abs() < torch.finfo(torch.float32).tiny, 0.0 * blocks, blocks)
    encode_scale = global_scale.reshape(())
    block_max = blocks.abs().amax(dim=-1)
    block_scales = cast(encode_scale * block_quotient(block_max))
    is_zero = (block_scales.float() if zero_scale_test == "scale" else block_max) == 0
    out_scale = torch.where(is_zero, 0.0, out_scale_of(block_scales.float(), encode_scale))
    codes = encode(blocks * out_scale[..., None]).reshape(rows, cols)
    return pack(codes), block_scales


approximate_division_emulated = functools.partial(
    _chain, block_quotient=lambda block_max: block_max * torch.reciprocal(torch.tensor(6.0, device=block_max.device)))
approximate_division_emulated.__doc__ = (
    "``bmax / 6`` as ``bmax * fl(1/6)``: what fast-math division (Triton's plain ``/`` on NVIDIA, "
    "``div.full.f32``) and TensorRT-LLM's ``vecMax * rcp(6)`` compute; off on E4M3-tie block scales.")
torch_one_division = functools.partial(
    _chain, out_scale_of=lambda block_scale, encode_scale: encode_scale / block_scale)
torch_one_division.__doc__ = "out_scale = global_scale / sf: one rounding, not the contract's two (an ulp off)."
trtllm_block_max_test = functools.partial(_chain, zero_scale_test="block_max")
trtllm_block_max_test.__doc__ = ("Tests bmax != 0 instead of sf != 0: a block whose scale underflows gets "
                                 "out_scale = inf and saturated codes instead of ±0.")
torchao_scale_clamp = functools.partial(
    _chain, cast=lambda scale: e4m3_satfinite_rne(scale.clamp(min=2.0**-6)))
torchao_scale_clamp.__doc__ = "Clamps the block scale to the smallest normal E4M3 (2**-6) before the cast."
ties_away_from_zero = functools.partial(_chain, encode=wrong_encoders.e2m1_ties_away_from_zero)
sign_from_comparison = functools.partial(_chain, encode=wrong_encoders.e2m1_sign_from_comparison)
high_nibble_first = functools.partial(_chain, pack=wrong_encoders.pack_high_nibble_first)
flushed_subnormal_scales = functools.partial(_chain, cast=wrong_encoders.e4m3_flush_subnormals)
flushed_subnormal_inputs = functools.partial(_chain, flush_subnormal_inputs=True)
flushed_subnormal_inputs.__doc__ = ("Reads bf16 subnormals as zero (a flush-to-zero load or conversion, "
                                    "as the Triton interpreter's bf16 cast nearly does).")


# -- kernel-shaped bugs ---------------------------------------------------------------------------
def tail_left_zero(x, global_scale):
    """Right on whole 64-column tiles; the codes and scales of a last partial tile stay zero."""
    packed, block_scales = kernel_module.nvfp4_quantize(x, global_scale)
    whole = x.shape[1] // 64 * 64
    packed[:, whole // 2:] = 0
    block_scales.view(torch.uint8)[:, whole // NVFP4_BLOCK:] = 0
    return packed, block_scales


def rows_read_as_contiguous(x, global_scale):
    validate(x, global_scale)
    return kernel_module.nvfp4_quantize(read_as_dense(x), global_scale)


def missing_refusal(x, global_scale):
    """Checks nothing: K not a multiple of 16 is zero-padded, other dtypes cast, a scale of many elements read at 0."""
    x = torch.as_tensor(x)
    if x.dim() != 2:
        x = x.reshape(-1, x.shape[-1] if x.dim() else 1)
    padded = torch.nn.functional.pad(x.to(torch.bfloat16), (0, -x.shape[1] % NVFP4_BLOCK))
    scale = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device).reshape(-1)[:1]
    if scale.numel() == 0:
        scale = torch.ones(1, device=x.device)
    return kernel_module.nvfp4_quantize(padded, scale)


def approximate_division_kernel(x, global_scale):
    """The catalog kernel built with Triton's plain ``/`` (``IEEE_DIVISION=False``): approximate on
    NVIDIA GPUs; under the interpreter numpy divides, IEEE, so only a GPU can reject it."""
    validate(x, global_scale)
    plan = kernel_module.launch_plan(x.shape[0], x.shape[1] // NVFP4_BLOCK, kernel_module.interpreting())
    return kernel_module.run_plan(x, global_scale, plan, ieee_division=False)
