"""Contract ``speculative/strict_accept`` (bitwise), in executable form.

``strict_accept(draft_tokens[B, K], target_tokens[B, K+1], num_drafts[B]) -> (out_tokens int64[B, K+1],
num_accepted int32[B])``: greedy verification of a speculative step.  Row b proposed
``n_b = clamp(num_drafts[b], 0, K)`` draft tokens; it accepts the longest prefix of them that the
target model agrees with (``a_b`` tokens), then takes the target's own token at position ``a_b`` (the
correction, or the bonus token when every draft was accepted).  ``out_tokens[b, :a_b + 1]`` are the
target's tokens, the rest ``-1``; ``num_accepted[b] = a_b + 1``.  Draft entries at ``i >= n_b`` are
ignored whatever they hold — a row's buffer past its draft count is stale memory.
"""
from __future__ import annotations

import torch

from references.validation import (
    Refusal,
    refuse,
    require_dtype,
    require_ndim,
    require_same_device,
    require_shape,
    require_tensor,
)

MAX_DRAFTS = 16
STOCK_LAUNCHES = 12  # kernel launches of ``stock`` on a GPU: one per aten op it runs (numbered there)


def validate(draft_tokens, target_tokens, num_drafts) -> None:
    for name, value in (("draft_tokens", draft_tokens), ("target_tokens", target_tokens),
                        ("num_drafts", num_drafts)):
        require_tensor(name, value)
    require_ndim("draft_tokens", draft_tokens, 2, "[B, K]")
    require_ndim("target_tokens", target_tokens, 2, "[B, K+1]")
    require_ndim("num_drafts", num_drafts, 1, "[B]")
    require_dtype("draft_tokens", draft_tokens, (torch.int64,))
    require_dtype("target_tokens", target_tokens, (torch.int64,))
    require_dtype("num_drafts", num_drafts, (torch.int32,))
    batch, drafts = draft_tokens.shape
    if drafts > MAX_DRAFTS:
        raise refuse("draft_tokens", f"K = {drafts} draft columns", f"K must be in 0..{MAX_DRAFTS}")
    require_shape("target_tokens", target_tokens, (batch, drafts + 1), "[B, K+1]")
    require_shape("num_drafts", num_drafts, (batch,), "[B]")
    require_same_device({"draft_tokens": draft_tokens, "target_tokens": target_tokens, "num_drafts": num_drafts})


def strict_accept(draft_tokens, target_tokens, num_drafts):
    validate(draft_tokens, target_tokens, num_drafts)
    batch, drafts = draft_tokens.shape
    column = torch.arange(drafts + 1, device=draft_tokens.device)
    proposed = num_drafts.to(torch.int64).clamp(0, drafts)                     # n_b
    disagree = draft_tokens != target_tokens[:, :drafts]
    # the first column where draft and target disagree; K (a sentinel column) when they never do
    disagreement_column = torch.where(disagree, column[:drafts], drafts)
    sentinel = torch.full((batch, 1), drafts, dtype=torch.int64, device=draft_tokens.device)
    first_disagreement = torch.cat([disagreement_column, sentinel], dim=1).amin(dim=1)
    accepted = torch.minimum(first_disagreement, proposed)                   # a_b
    out_tokens = torch.where(column <= accepted[:, None], target_tokens, -1)
    return out_tokens, (accepted + 1).to(torch.int32)


def stock(draft_tokens, target_tokens, num_drafts):
    """What a serving engine composes today (vLLM's torch rejection path, with a per-row draft count).

    One kernel launch per aten op on a GPU (``STOCK_LAUNCHES``), each a pass over [B, K]; the
    numbers count them.  ``tools/bench`` and ``test_strict_accept.py`` check the count.
    """
    drafts = draft_tokens.shape[1]
    column = torch.arange(drafts + 1, device=draft_tokens.device)                # 1
    agree = draft_tokens == target_tokens[:, :drafts]                            # 2
    agree &= column[:drafts] < num_drafts[:, None]                               # 3, 4
    accepted = agree.long().cumprod(dim=1).sum(dim=1)                            # 5, 6, 7
    out_tokens = torch.where(column <= accepted[:, None], target_tokens, -1)     # 8, 9 (the -1), 10
    return out_tokens, (accepted + 1).to(torch.int32)                            # 11, 12


def _tokens(device, batch=4, columns=5, dtype=torch.int64):
    return torch.zeros(batch, columns, dtype=dtype, device=device)


def _counts(device, batch=4, dtype=torch.int32):
    return torch.full((batch,), 2, dtype=dtype, device=device)


def _call(device, **override):
    kwargs = {"draft_tokens": _tokens(device), "target_tokens": _tokens(device, columns=6),
              "num_drafts": _counts(device)}
    return {**kwargs, **override}


MISMATCH = "shape or dtype mismatch"   # an item of the contract's Refuse line

REFUSALS = (
    Refusal("K = 17 drafts", lambda device: _call(device, draft_tokens=_tokens(device, columns=17),
                                                  target_tokens=_tokens(device, columns=18)), "draft_tokens",
            clause="`K > 16`"),
    Refusal("target without the bonus column", lambda device: _call(device, target_tokens=_tokens(device)),
            ("target_tokens", "draft_tokens"), clause=MISMATCH),
    Refusal("target of another batch", lambda device: _call(device, target_tokens=_tokens(device, 3, 6)),
            ("target_tokens", "draft_tokens"), clause=MISMATCH),
    Refusal("num_drafts of another batch", lambda device: _call(device, num_drafts=_counts(device, 5)),
            ("num_drafts", "draft_tokens"), clause=MISMATCH),
    Refusal("1-D draft_tokens", lambda device: _call(device, draft_tokens=torch.zeros(4, dtype=torch.int64,
                                                                                       device=device)),
            "draft_tokens", clause=MISMATCH),
    Refusal("2-D num_drafts", lambda device: _call(device, num_drafts=_counts(device).view(4, 1)), "num_drafts",
            clause=MISMATCH),
    Refusal("int32 draft_tokens", lambda device: _call(device, draft_tokens=_tokens(device, dtype=torch.int32)),
            "draft_tokens", TypeError, clause=MISMATCH),
    Refusal("int32 target_tokens", lambda device: _call(device, target_tokens=_tokens(device, columns=6,
                                                                                       dtype=torch.int32)),
            "target_tokens", TypeError, clause=MISMATCH),
    Refusal("int64 num_drafts", lambda device: _call(device, num_drafts=_counts(device, dtype=torch.int64)),
            "num_drafts", TypeError, clause=MISMATCH),
    Refusal("num_drafts not a tensor", lambda device: _call(device, num_drafts=[2, 2, 2, 2]), "num_drafts",
            TypeError, clause="non-tensor"),
)
