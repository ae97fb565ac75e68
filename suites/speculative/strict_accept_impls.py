"""Other implementations of ``strict_accept`` for the battery to judge: one correct, many wrong.

Each wrong one breaks the contract the way a real verification kernel does; ``test_strict_accept.py``
checks that the battery rejects every one (and through which oracle) and accepts the correct one.
Judge one yourself: ``tools/certify-cells --op strict_accept --impl suites.speculative.strict_accept_impls:NAME``.
"""
from __future__ import annotations

import torch

from references.speculative.strict_accept import strict_accept as reference
from references.speculative.strict_accept import validate


def _accept_prefix(draft_tokens, target_tokens, proposed):
    """Out tokens and num_accepted, given each row's draft count (not clamped here)."""
    batch, drafts = draft_tokens.shape
    accepted = torch.zeros(batch, dtype=torch.int64, device=draft_tokens.device)
    alive = torch.ones(batch, dtype=torch.bool, device=draft_tokens.device)
    for column in range(drafts):
        alive &= (column < proposed) & (draft_tokens[:, column] == target_tokens[:, column])
        accepted += alive
    keep = torch.arange(drafts + 1, device=draft_tokens.device) <= accepted[:, None]
    return target_tokens.masked_fill(~keep, -1), (accepted + 1).to(torch.int32)


def correct_column_loop(draft_tokens, target_tokens, num_drafts):
    """Correct: walks the columns, a row stays alive while it proposed the column and agrees."""
    validate(draft_tokens, target_tokens, num_drafts)
    return _accept_prefix(draft_tokens, target_tokens, num_drafts.to(torch.int64))


def reads_past_num_drafts(draft_tokens, target_tokens, num_drafts):
    """Ignores the draft count: stale drafts past it that happen to match are accepted."""
    validate(draft_tokens, target_tokens, num_drafts)
    return _accept_prefix(draft_tokens, target_tokens, torch.full_like(num_drafts, draft_tokens.shape[1]))


def counts_agreements_not_prefix(draft_tokens, target_tokens, num_drafts):
    """Counts every proposed draft that agrees, also those after the first disagreement."""
    validate(draft_tokens, target_tokens, num_drafts)
    batch, drafts = draft_tokens.shape
    column = torch.arange(drafts, device=draft_tokens.device)
    agree = (draft_tokens == target_tokens[:, :drafts]) & (column < num_drafts[:, None])
    accepted = agree.sum(dim=1)
    keep = torch.arange(drafts + 1, device=draft_tokens.device) <= accepted[:, None]
    return target_tokens.masked_fill(~keep, -1), (accepted + 1).to(torch.int32)


def negative_count_unclamped(draft_tokens, target_tokens, num_drafts):
    """Clamps the draft count to K from above only: a negative count gives num_accepted <= 0."""
    validate(draft_tokens, target_tokens, num_drafts)
    out_tokens, num_accepted = _accept_prefix(draft_tokens, target_tokens, num_drafts.to(torch.int64))
    negative = num_drafts < 0
    num_accepted = torch.where(negative, num_drafts.clamp(min=-1) + 1, num_accepted)
    return out_tokens.masked_fill(negative[:, None], -1), num_accepted


def no_correction_token(draft_tokens, target_tokens, num_drafts):
    """Keeps only the accepted drafts: the target's token at column a_b (correction or bonus) is lost."""
    out_tokens, num_accepted = reference(draft_tokens, target_tokens, num_drafts)
    column = torch.arange(out_tokens.shape[1], device=out_tokens.device)
    return out_tokens.masked_fill(column == (num_accepted[:, None] - 1), -1), num_accepted


def int64_num_accepted(draft_tokens, target_tokens, num_drafts):
    out_tokens, num_accepted = reference(draft_tokens, target_tokens, num_drafts)
    return out_tokens, num_accepted.to(torch.int64)


def large_batch_bug(draft_tokens, target_tokens, num_drafts):
    """Right up to 64 rows; from 65 rows (the multi-row path) the last row repeats the one before it."""
    out_tokens, num_accepted = reference(draft_tokens, target_tokens, num_drafts)
    if out_tokens.shape[0] > 64:
        out_tokens[-1], num_accepted[-1] = out_tokens[-2], num_accepted[-2]
    return out_tokens, num_accepted


def missing_refusal(draft_tokens, target_tokens, num_drafts):
    """Checks nothing: K = 17, a target without its bonus column or int32 tokens are silently taken."""
    drafts = min(draft_tokens.shape[-1], target_tokens.shape[-1] - 1)
    return _accept_prefix(torch.as_tensor(draft_tokens)[..., :drafts], torch.as_tensor(target_tokens),
                          torch.as_tensor(num_drafts).to(torch.int64))
