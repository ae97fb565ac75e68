"""sampling/greedy_argmax from the contract: first NaN, else the first maximum (CPU torch.argmax)."""
from __future__ import annotations

import torch

from suites.contract_only.checks import tensor

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _validate(logits):
    tensor("logits", logits, DTYPES, ndim=2)
    if logits.stride(1) != 1:
        raise ValueError("argument 'logits' must be unit-stride along the vocabulary")
    if logits.shape[1] == 0:
        raise ValueError("argument 'logits' has an empty vocabulary")


def greedy_argmax(logits):
    _validate(logits)
    return torch.argmax(logits.cpu(), dim=-1).to(logits.device)


def greedy_argmax_explicit(logits):
    """The alternative: the contract's two rules spelled out, other wording for its refusals."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError("logits is not a tensor")
    if logits.dim() != 2 or logits.dtype not in DTYPES or logits.stride(1) != 1 or logits.shape[1] == 0:
        error = TypeError if logits.dtype not in DTYPES and logits.dim() == 2 else ValueError
        raise error(f"logits {tuple(logits.shape)} {logits.dtype} strides {logits.stride()} are not accepted")
    values = logits.float()
    rows, vocab = values.shape
    index = torch.arange(vocab, device=values.device).expand(rows, vocab)
    nan = values.isnan()
    best = values.masked_fill(nan, -torch.inf).amax(dim=1, keepdim=True)
    first_best = torch.where(values == best, index, vocab).amin(dim=1)
    first_nan = torch.where(nan, index, vocab).amin(dim=1)
    return torch.where(first_nan < vocab, first_nan, first_best)
