"""Contract ``quant/nvfp4_quantize`` (bitwise): validation, reference, stock op, refused inputs.

The semantics live in ``references/formats/nvfp4.py`` (every step IEEE float32 round-to-nearest-even,
E4M3 satfinite block scales, E2M1 codes with ties to the even code, element 2j in the low nibble);
this module is the contract's face towards the catalog and the battery.

There is no PyTorch op for NVFP4 quantization: what a user runs today is that same formula written
in eager PyTorch, a dozen kernels and several float32 copies of ``x``. So the stock op is the
reference itself, run eagerly; it is also what certified dispatch falls back to, and it is right.
"""
from __future__ import annotations

import torch

from references.formats import nvfp4 as formats
from references.validation import Refusal


def validate(x, global_scale) -> None:
    formats.validate_quantize(x, global_scale)


def nvfp4_quantize(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(packed uint8 [M, K/2], block_scales float8_e4m3fn [M, K/16])``, exactly as the contract says."""
    return formats.nvfp4_quantize(x, global_scale)


def stock(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula in eager PyTorch (the module docstring says why that is the stock op)."""
    return formats.nvfp4_quantize(x, global_scale)


def _x(device, shape=(4, 32), dtype=torch.bfloat16):
    return torch.ones(shape, dtype=dtype, device=device)


def _scale(device, values=(1.0,), dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=device)


REFUSALS = (
    Refusal("x not a tensor", lambda device: {"x": [[1.0] * 16], "global_scale": _scale(device)}, "x", TypeError),
    Refusal("1-D x", lambda device: {"x": _x(device, (32,)), "global_scale": _scale(device)}, "x"),
    Refusal("3-D x", lambda device: {"x": _x(device, (2, 4, 32)), "global_scale": _scale(device)}, "x"),
    Refusal("float32 x", lambda device: {"x": _x(device, dtype=torch.float32), "global_scale": _scale(device)},
            "x", TypeError),
    Refusal("float16 x", lambda device: {"x": _x(device, dtype=torch.float16), "global_scale": _scale(device)},
            "x", TypeError),
    Refusal("K = 24, not a multiple of 16", lambda device: {"x": _x(device, (4, 24)), "global_scale": _scale(device)},
            "x"),
    Refusal("K = 8", lambda device: {"x": _x(device, (4, 8)), "global_scale": _scale(device)}, "x"),
    Refusal("global_scale a Python float", lambda device: {"x": _x(device), "global_scale": 1.0}, "global_scale",
            TypeError),
    Refusal("float64 global_scale",
            lambda device: {"x": _x(device), "global_scale": _scale(device, dtype=torch.float64)},
            "global_scale", TypeError),
    Refusal("bf16 global_scale",
            lambda device: {"x": _x(device), "global_scale": _scale(device, dtype=torch.bfloat16)},
            "global_scale", TypeError),
    Refusal("two-element global_scale", lambda device: {"x": _x(device), "global_scale": _scale(device, (1.0, 2.0))},
            "global_scale"),
    Refusal("empty global_scale", lambda device: {"x": _x(device), "global_scale": _scale(device, ())}, "global_scale"),
)
