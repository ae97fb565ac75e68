"""Contract ``quant/nvfp4_quantize`` (bitwise): validation, reference, stock op, refused inputs.

The semantics live in ``references/formats/nvfp4.py`` (every step IEEE float32 round-to-nearest-even,
E4M3 satfinite block scales, E2M1 codes with ties to the even code, element 2j in the low nibble);
this module is the contract's face towards the catalog and the battery.

There is no PyTorch op for NVFP4 quantization: what a user runs today is that same formula written
in eager PyTorch on the inputs' device, a dozen kernels and several float32 copies of ``x``; that is the
stock op, and what certified dispatch falls back to.

The reference computes on the CPU, whose float32 arithmetic is IEEE round-to-nearest-even: on the H200
the same torch ops on CUDA tensors disagreed with it on 1981 of 8192 block scales of one input
(2026-11-29, ``torch 2.11``), while the Triton kernel, with ``div_rn``, agreed on every byte.  So the
stock op on a GPU is not exact, and each certificate's ``stock_disagreements`` counts where.

Refused: the contract's Refuse line (K not a multiple of 16, non-bf16 x, global_scale not one fp32
element) and non-tensors.  An ``x`` that is not 2-D is outside the signature: refused here, demanded
of no implementation.  A NaN ``x * out_scale`` is code 7 (``references/formats/e2m1.py``).
"""
from __future__ import annotations

import torch

from references.formats import nvfp4 as formats
from references.validation import Refusal


def validate(x, global_scale) -> None:
    formats.validate_quantize(x, global_scale)


def nvfp4_quantize(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(packed uint8 [M, K/2], block_scales float8_e4m3fn [M, K/16])``, exactly as the contract says
    (computed on the CPU: the module docstring says why), on the inputs' device."""
    validate(x, global_scale)
    packed, block_scales = formats.nvfp4_quantize(x.cpu(), global_scale.cpu())
    return packed.to(x.device), block_scales.to(x.device)


def stock(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula in eager PyTorch on the inputs' device (the module docstring says why that is the stock op)."""
    return formats.nvfp4_quantize(x, global_scale)


def _x(device, shape=(4, 32), dtype=torch.bfloat16):
    return torch.ones(shape, dtype=dtype, device=device)


def _scale(device, values=(1.0,), dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=device)


# the Refuse-line items of CONTRACTS.md the rows enforce
K_BLOCKS, X_DTYPE, SCALE = "K not a multiple of 16", "non-bf16 x", "global_scale not one fp32 element"

REFUSALS = (
    Refusal("x not a tensor", lambda device: {"x": [[1.0] * 16], "global_scale": _scale(device)}, "x", TypeError,
            clause="non-tensor"),
    Refusal("float32 x", lambda device: {"x": _x(device, dtype=torch.float32), "global_scale": _scale(device)},
            "x", TypeError, clause=X_DTYPE),
    Refusal("float16 x", lambda device: {"x": _x(device, dtype=torch.float16), "global_scale": _scale(device)},
            "x", TypeError, clause=X_DTYPE),
    Refusal("K = 24, not a multiple of 16", lambda device: {"x": _x(device, (4, 24)), "global_scale": _scale(device)},
            "x", clause=K_BLOCKS),
    Refusal("K = 8", lambda device: {"x": _x(device, (4, 8)), "global_scale": _scale(device)}, "x", clause=K_BLOCKS),
    Refusal("global_scale a Python float", lambda device: {"x": _x(device), "global_scale": 1.0}, "global_scale",
            TypeError, clause=SCALE),
    Refusal("float64 global_scale",
            lambda device: {"x": _x(device), "global_scale": _scale(device, dtype=torch.float64)},
            "global_scale", TypeError, clause=SCALE),
    Refusal("bf16 global_scale",
            lambda device: {"x": _x(device), "global_scale": _scale(device, dtype=torch.bfloat16)},
            "global_scale", TypeError, clause=SCALE),
    Refusal("two-element global_scale", lambda device: {"x": _x(device), "global_scale": _scale(device, (1.0, 2.0))},
            "global_scale", clause=SCALE),
    Refusal("empty global_scale", lambda device: {"x": _x(device), "global_scale": _scale(device, ())}, "global_scale",
            clause=SCALE),
)
