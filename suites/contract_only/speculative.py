"""speculative/strict_accept from the contract."""
from __future__ import annotations

import torch

from suites.contract_only.checks import shape, tensor


def _validate(draft_tokens, target_tokens, num_drafts):
    tensor("draft_tokens", draft_tokens, (torch.int64,), ndim=2)
    tensor("target_tokens", target_tokens, (torch.int64,), ndim=2)
    tensor("num_drafts", num_drafts, (torch.int32,), ndim=1)
    batch, drafts = draft_tokens.shape
    if drafts > 16:
        raise ValueError(f"argument 'draft_tokens' has K = {drafts} > 16")
    shape("target_tokens", target_tokens, (batch, drafts + 1))
    shape("num_drafts", num_drafts, (batch,))


def strict_accept(draft_tokens, target_tokens, num_drafts):
    _validate(draft_tokens, target_tokens, num_drafts)
    drafts = draft_tokens.shape[1]
    column = torch.arange(drafts + 1, device=draft_tokens.device)
    proposed = num_drafts.long().clamp(0, drafts)
    agree = (draft_tokens == target_tokens[:, :drafts]) & (column[:drafts] < proposed[:, None])
    accepted = agree.long().cumprod(dim=1).sum(dim=1)
    return torch.where(column <= accepted[:, None], target_tokens, -1), (accepted + 1).to(torch.int32)


def strict_accept_by_row(draft_tokens, target_tokens, num_drafts):
    """The alternative: row by row on the host, as a reader of the contract might first write it."""
    _validate(draft_tokens, target_tokens, num_drafts)
    batch, drafts = draft_tokens.shape
    out = torch.full((batch, drafts + 1), -1, dtype=torch.int64)
    accepted = torch.zeros(batch, dtype=torch.int32)
    draft, target, counts = draft_tokens.cpu(), target_tokens.cpu(), num_drafts.cpu()
    for b in range(batch):
        n, a = min(max(int(counts[b]), 0), drafts), 0
        while a < n and draft[b, a] == target[b, a]:
            a += 1
        out[b, :a + 1] = target[b, :a + 1]
        accepted[b] = a + 1
    return out.to(draft_tokens.device), accepted.to(draft_tokens.device)
