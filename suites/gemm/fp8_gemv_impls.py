"""Other implementations of ``fp8_gemv`` for the battery to judge: one correct, many wrong.

Each wrong one is a bug an FP8 GEMV ships with: the scale forgotten, the weight read as E5M2, a
dropped K tail, bf16 accumulation, float16 activations, a summation order that changes between calls,
the weight's rows read as if they lay K apart, a missing refusal. ``test_fp8_gemv.py`` checks that the
battery rejects every one and accepts the correct one. Judge one yourself: ``tools/certify-cells --op fp8_gemv --impl suites.gemm.fp8_gemv_impls:NAME``.
"""
from __future__ import annotations

import torch

from references.gemm.fp8_gemv import validate
from suites.gemm import gemv_forms
from suites.strided_reads import last_dim_contiguous, read_as_dense


def _gemv(x, weight, w_scale, form=gemv_forms.float32_sum):
    return (form(x, weight) * w_scale.reshape(())).bfloat16()


def correct_via_float32_sums(x, w, w_scale):
    """Correct: float32 products summed in K order by PyTorch, then the scale, then bf16."""
    validate(x, w, w_scale)
    return _gemv(x, w.float(), w_scale)


def scale_forgotten(x, w, w_scale):
    validate(x, w, w_scale)
    return _gemv(x, w.float(), torch.ones_like(w_scale))


def read_as_e5m2(x, w, w_scale):
    """The weight bytes decoded as E5M2 (the other FP8 format)."""
    validate(x, w, w_scale)
    return _gemv(x, w.view(torch.uint8).view(torch.float8_e5m2).float().nan_to_num(), w_scale)


def tail_dropped(x, w, w_scale):
    """Right on whole 64-column tiles; the last K % 64 columns are never read."""
    validate(x, w, w_scale)
    weight = w.float()
    weight[:, x.shape[1] // 64 * 64:] = 0
    return _gemv(x, weight, w_scale)


def weight_rows_assumed_dense(x, w, w_scale):
    """The weight's storage read from its start as rows K elements apart, whatever its strides: right on a
    contiguous ``w`` only."""
    validate(x, w, w_scale)
    return _gemv(x, read_as_dense(w).float(), w_scale)


def x_rows_read_as_contiguous(x, w, w_scale):
    """x's row read element after element, whatever its column stride: right wherever ``stride(1) == 1``."""
    validate(x, w, w_scale)
    return _gemv(last_dim_contiguous(x), w.float(), w_scale)


def bf16_accumulation(x, w, w_scale):
    validate(x, w, w_scale)
    return _gemv(x, w.float(), w_scale, gemv_forms.bf16_partial_sums)


def float16_activations(x, w, w_scale):
    validate(x, w, w_scale)
    return _gemv(x, w.float(), w_scale, gemv_forms.float16_activations)


_arrival_order = gemv_forms.OrderVariesPerCall()


def summation_order_varies(x, w, w_scale):
    validate(x, w, w_scale)
    return _gemv(x, w.float(), w_scale, _arrival_order)


def missing_refusal(x, w, w_scale):
    """Checks nothing: 0 or 17 activation rows, float32 x, a two-element scale all go through."""
    x = torch.as_tensor(x).float()
    weight = torch.as_tensor(w).float()
    scale = torch.as_tensor(w_scale, dtype=torch.float32).reshape(-1)[:1]
    depth = min(x.shape[-1], weight.shape[-1])
    return _gemv(x.reshape(-1, x.shape[-1])[:, :depth], weight.reshape(-1, weight.shape[-1])[:, :depth],
                 scale if scale.numel() else torch.ones(1))
