"""vLLM's greedy rejection kernel (``vllm/v1/sample/rejection_sampler.py``, ``rejection_greedy_sample_kernel``,
vLLM 0.33.0, carried: ``suites/thirdparty/vendored.py``) as ``speculative/strict_accept``.

vLLM's kernel is the strict (greedy) acceptance of speculative decoding: one program per request walks
its drafts, writes the target token at every position up to and including the first mismatch, and the
bonus token after the last draft when every draft matched.  Its calling convention, against the contract:

- drafts are flat: ``draft_token_ids [num_tokens]`` with ``cu_num_draft_tokens [B]`` (inclusive cumsum of
  each request's draft count) — the contract's ``[B, K]`` with ``num_drafts``;
- the targets are split: ``target_argmax [num_tokens]`` at the draft positions, ``bonus_token_ids [B]``;
- the output is int32 ``[B, max_spec_len + 1]`` prefilled by the caller with ``-1`` (``PLACEHOLDER_TOKEN_ID``);
  vLLM's kernel loads each target ``.to(tl.int32)``; it returns no accepted count (vLLM's caller counts
  the entries that are not the placeholder).

What the adapter does, none of it vLLM's (the glue a caller writes around the kernel):
- ``n_b = clamp(num_drafts, 0, K)`` (vLLM's scheduler never asks for more drafts than it proposed), their
  inclusive cumsum, and the counted drafts (narrowed to int32, as vLLM keeps draft ids) and their targets
  scattered to the flat layout on the device (no host sync: the flat buffers hold ``B * K`` entries, the
  kernel reads ``[start, end)`` of each row);
- the bonus token ``target_tokens[b, n_b]``, gathered;
- the output prefilled with ``-1``, widened to int64 after the call; ``num_accepted`` the count of
  entries that are not ``-1``, as vLLM's caller counts it.
The kernel runs with ``is_greedy = None`` (every request greedy) and no synthetic acceptance, vLLM's
greedy fast path.
"""
from __future__ import annotations

import torch

from suites.thirdparty import staging
from suites.thirdparty.vendored import load_function

PACKAGE = "vllm"
JUDGED = {"strict_accept": "strict_accept"}
ADAPTER_CODE = {"strict_accept": "num_drafts clamped to 0..K; drafts narrowed to int32 and scattered to vLLM's flat "
                                 "layout; the bonus token gathered; int32 output widened; num_accepted counted from it"}
PLACEHOLDER_TOKEN_ID = -1   # vLLM's, rejection_sampler.py


def _kernel():
    import triton
    import triton.language as tl

    return load_function("vllm", "vllm/v1/sample/rejection_sampler.py", "rejection_greedy_sample_kernel",
                         {"triton": triton, "tl": tl})


rejection_greedy_sample_kernel = _kernel()


def _prepare(draft_tokens, target_tokens, num_drafts):
    batch, drafts = draft_tokens.shape
    device = draft_tokens.device
    counted = num_drafts.long().clamp(0, drafts)
    ends = counted.cumsum(0)
    column = torch.arange(drafts, device=device)
    proposed = column[None, :] < counted[:, None]
    spare = batch * drafts   # where entries past a row's count go: one slot past the flat buffers
    position = torch.where(proposed, (ends - counted)[:, None] + column[None, :], spare).reshape(-1)
    flat_drafts = torch.zeros(spare + 1, dtype=torch.int32, device=device)
    flat_targets = torch.zeros(spare + 1, dtype=torch.int64, device=device)
    flat_drafts.scatter_(0, position, draft_tokens.reshape(-1).to(torch.int32))
    flat_targets.scatter_(0, position, target_tokens[:, :drafts].reshape(-1))
    bonus = target_tokens.gather(1, counted[:, None]).reshape(batch).contiguous()
    output = torch.full((batch, drafts + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device)
    return {"output": output, "cu_num_draft_tokens": ends.to(torch.int32), "draft_token_ids": flat_drafts,
            "target_argmax": flat_targets, "bonus_token_ids": bonus, "max_spec_len": drafts}


def _call(prepared) -> None:
    batch = prepared["output"].shape[0]
    if batch:
        rejection_greedy_sample_kernel[(batch,)](
            prepared["output"], prepared["cu_num_draft_tokens"], prepared["draft_token_ids"],
            prepared["target_argmax"], prepared["bonus_token_ids"], None, prepared["max_spec_len"], None, None,
            SYNTHETIC_MODE=False)


def _finish(prepared, _):
    output = prepared["output"]
    return output.long(), (output != PLACEHOLDER_TOKEN_ID).sum(dim=1).to(torch.int32)


def strict_accept(draft_tokens, target_tokens, num_drafts):
    prepared = _prepare(draft_tokens, target_tokens, num_drafts)
    return _finish(prepared, _call(prepared))


strict_accept.stages = staging.stages(_prepare, _call, _finish)
