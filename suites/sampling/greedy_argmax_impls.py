"""Other implementations of ``greedy_argmax`` for the battery to judge: one correct, many wrong.

Each wrong one breaks the contract in one way a real kernel does; ``test_greedy_argmax.py`` checks
that the battery (and ``tools/certify-cells --impl``) rejects every one and accepts the correct one.
Judge one yourself: ``tools/certify-cells --op greedy_argmax --impl suites.sampling.greedy_argmax_impls:NAME``.
"""
from __future__ import annotations

import torch

from references.sampling.greedy_argmax import greedy_argmax as reference
from references.sampling.greedy_argmax import validate
from suites.strided_reads import read_as_dense


def _first_nan_or_max(values: torch.Tensor) -> torch.Tensor:
    is_nan = values.isnan()
    # masked_fill, not nan_to_num: nan_to_num also turns +inf into the largest finite value, a bug the
    # battery found in an earlier version of this function (a row [finite, +inf] answered 0)
    best = values.masked_fill(is_nan, -torch.inf).max(dim=1, keepdim=True).values
    hit = torch.where(is_nan.any(dim=1, keepdim=True), is_nan, values == best)
    return hit.int().argmax(dim=1)  # the first True: argmax of 0/1 ties at the first one


def correct_via_max(logits):
    """Correct: a different formulation (row max, then the first column equal to it; NaN first)."""
    validate(logits)
    return _first_nan_or_max(logits.float())


def last_index_on_ties(logits):
    validate(logits)
    flipped = reference(logits.flip(1))
    return logits.shape[1] - 1 - flipped


def nan_ignored(logits):
    validate(logits)
    values = logits.float()
    return reference(values.masked_fill(values.isnan(), -torch.inf))


def strided_rows_read_as_contiguous(logits):
    validate(logits)
    return reference(read_as_dense(logits))


def int32_output(logits):
    return reference(logits).to(torch.int32)


def dropped_tail(logits):
    """Only whole 64-column blocks are reduced: the last V % 64 columns are never seen."""
    validate(logits)
    whole = logits.shape[1] // 64 * 64 or logits.shape[1]
    return reference(logits[:, :whole])


def negative_zero_below_positive(logits):
    """Orders -0.0 below +0.0 (a max on a total order of bit patterns), so +0.0 wins a zero tie."""
    validate(logits)
    values = logits.float()
    nudged = torch.where((values == 0) & ~values.signbit(), torch.full_like(values, 1e-45), values)
    return reference(nudged)


def large_batch_bug(logits):
    """Right up to 255 rows; from 256 rows (a large-batch path) the last row is the one before it."""
    out = reference(logits)
    if logits.shape[0] >= 256:
        out[-1] = out[-2]
    return out


def missing_refusal(logits):
    """Checks nothing: column-strided, transposed or 1-D logits are silently reduced."""
    values = torch.as_tensor(logits).float()
    if values.dim() != 2 or values.shape[1] == 0:
        return torch.zeros(values.shape[0] if values.dim() else 0, dtype=torch.int64)
    return _first_nan_or_max(values)


def bug_between_1000_and_4000_columns(logits):
    """Right except for 1000 < V < 4000 (a mid-size launch plan), where columns past 1000 are never seen:
    a bug only draws that land in that band find (the default number of draws is chosen to find it)."""
    validate(logits)
    vocab = logits.shape[1]
    return reference(logits[:, :1000]) if 1000 < vocab < 4000 else reference(logits)


TIE_BLOCK = 2048  # columns per split of a row in later_block_wins_ties


def later_block_wins_ties(logits):
    """Splits each row into blocks of 2048 columns, takes each block's first maximum, and merges the
    blocks keeping the later one on a tie: a tie across blocks goes to the later index (NaN still first)."""
    validate(logits)
    values = logits.float()
    best_index = reference(logits[:, :TIE_BLOCK])
    best_value = values.gather(1, best_index[:, None])[:, 0] if values.shape[0] else values[:, 0]
    for start in range(TIE_BLOCK, values.shape[1], TIE_BLOCK):
        index = reference(logits[:, start:start + TIE_BLOCK]) + start
        value = values.gather(1, index[:, None])[:, 0]
        later = ((value >= best_value) & ~best_value.isnan()) | (value.isnan() & ~best_value.isnan())
        best_index, best_value = torch.where(later, index, best_index), torch.where(later, value, best_value)
    return best_index
