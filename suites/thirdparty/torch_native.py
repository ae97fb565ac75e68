"""Torch's own GPU ops as the sampling, speculative and rollback contracts: what an engine writes when it
has no fused kernel, and the only public GPU implementations found for these contracts that can be
carried to the H200 (vLLM's Triton rejection sampler and FlashInfer's sampling kernels come with
packages far over the 64 MiB a device call carries; SGLang's speculative kernels are CUDA extensions
of sgl-kernel).  No adapter code: each function is torch ops in the contract's terms.

- ``greedy_argmax``: ``torch.argmax(logits, dim=-1)`` on the logits' device (CUDA's argmax, whose NaN
  and tie handling the contract pins to the first index);
- ``strict_accept``: the accepted prefix by a cumulative product of matches, as a serving engine's
  Python sampler computes it;
- ``rollback_save`` / ``rollback_restore``: advanced indexing of the plane by (page, slot).
"""
from __future__ import annotations

import torch

PACKAGE = "torch"
JUDGED = {"greedy_argmax": "greedy_argmax", "strict_accept": "strict_accept",
          "rollback_save": "rollback_save", "rollback_restore": "rollback_restore"}
ADAPTER_CODE = {}


def greedy_argmax(logits):
    return torch.argmax(logits, dim=-1)


def strict_accept(draft_tokens, target_tokens, num_drafts):
    batch, drafts = draft_tokens.shape
    column = torch.arange(drafts, device=draft_tokens.device)
    usable = column[None, :] < num_drafts.long().clamp(0, drafts)[:, None]
    matches = (draft_tokens == target_tokens[:, :drafts]) & usable
    accepted = matches.long().cumprod(dim=1).sum(dim=1)
    keep = torch.arange(drafts + 1, device=draft_tokens.device)[None, :] <= accepted[:, None]
    out = torch.where(keep, target_tokens, torch.full_like(target_tokens, -1))
    return out, (accepted + 1).to(torch.int32)


def _live_slots(plane, page_table, positions):
    pages, slots = plane.shape[0], plane.shape[1]
    position = positions.long()
    logical = torch.div(position, slots, rounding_mode="floor")
    in_table = (position >= 0) & (logical < page_table.shape[1])
    # a -1 column past the table: what an out-of-table position (and every position of an M = 0 table) reads
    table = torch.nn.functional.pad(page_table.long(), (0, 1), value=-1)
    page = torch.gather(table, 1, torch.where(in_table, logical, page_table.shape[1]))
    live = in_table & (page >= 0)
    return live, torch.where(live, page, 0), torch.where(live, position % slots, 0)


def rollback_save(plane, page_table, positions):
    live, page, slot = _live_slots(plane, page_table, positions)
    saved = plane[page, slot]
    mask = live.reshape(live.shape + (1,) * (plane.dim() - 2))
    return torch.where(mask, saved, torch.zeros((), dtype=plane.dtype, device=plane.device)) \
        if plane.dtype != torch.float8_e4m3fn else \
        torch.where(mask, saved.view(torch.uint8), 0).view(plane.dtype)


def rollback_restore(plane, page_table, positions, saved, rejected):
    live, page, slot = _live_slots(plane, page_table, positions)
    write = live & rejected.bool()
    plane[page[write], slot[write]] = saved[write]
