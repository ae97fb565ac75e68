"""Ways to compute ``x @ W^T`` once a GEMV has its float32 weight: one right, several wrong.

Shared by ``nvfp4_gemv_impls`` and ``fp8_gemv_impls``, which pair them with a right or wrong
dequantization. Each wrong form is a bug a GEMV kernel ships with: the band oracle (or determinism)
must catch it on the inputs the strategies build. Products are formed K-chunk by K-chunk, so the
largest cells (16 x 32768 x 16384) fit in a GPU's memory.
"""
from __future__ import annotations

import torch

CHUNK = 256


def _chunk_sum(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """float32 [M, N]: sum over this chunk of K of the exact-in-float32 products x[m, k] * w[n, k]."""
    return (x.float().unsqueeze(1) * weight.unsqueeze(0)).sum(dim=-1)


def float32_sum(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Right: float32 products and float32 sums (no TF32, no matmul library), K in order."""
    total = torch.zeros(x.shape[0], weight.shape[0], device=x.device)
    for start in range(0, x.shape[1], CHUNK):
        total += _chunk_sum(x[:, start:start + CHUNK], weight[:, start:start + CHUNK])
    return total


def bf16_partial_sums(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Accumulates in bf16: every 16-element partial sum, and the running total, rounded to bf16."""
    total = torch.zeros(x.shape[0], weight.shape[0], dtype=torch.bfloat16, device=x.device)
    for start in range(0, x.shape[1], 16):
        total = total + _chunk_sum(x[:, start:start + 16], weight[:, start:start + 16]).bfloat16()
    return total.float()


def float16_activations(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Feeds x through float16 (a kernel written for fp16 activations): large rows overflow, small flush."""
    return float32_sum(x.half(), weight)


class OrderVariesPerCall:
    """Split-K partials summed in the order they arrive (atomics): here forward on odd calls, backward on
    even ones, so the first call is right and the second, on the same input, rounds differently."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        starts = list(range(0, x.shape[1], 16))
        total = torch.zeros(x.shape[0], weight.shape[0], device=x.device)
        for start in starts if self.calls % 2 else reversed(starts):
            total += _chunk_sum(x[:, start:start + 16], weight[:, start:start + 16])
        return total
