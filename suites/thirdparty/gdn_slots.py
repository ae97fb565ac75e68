"""The slot-pool glue of the Gated DeltaNet adapters (fla-core's, vLLM's): what a serving engine writes around
a recurrent kernel that has no slot pool of the contract's kind, without a host sync (a CUDA graph can
capture it).  ``gdn_commit`` here is the contract's commit as a torch copy: neither package has one (vLLM
reads the accepted checkpoint's slot at its next step instead of copying it).  Being all adapter code, it
refuses what the contract refuses: a refusal verdict on it is ours, never a package's."""
from __future__ import annotations

import torch

from references.ssm import gdn_commit as commit_contract
from references.ssm.gdn_decode import live_rows


def write_rows(state, slots, rows: torch.Tensor, new: torch.Tensor) -> None:
    """``state[slots[b]] = new[b]`` where ``rows[b]``, without a host sync: each slot finds the row that
    writes it (rows that write nothing aim at a spare index past the pool), then one where() over the pool."""
    pool = state.shape[0]
    writer = torch.full((pool + 1,), -1, dtype=torch.long, device=state.device)
    writer[torch.where(rows, slots, pool).long()] = torch.arange(slots.shape[0], device=state.device)
    writer = writer[:pool]
    written = (writer >= 0)[:, None, None, None]
    state.copy_(torch.where(written, new.to(state.dtype)[writer.clamp(min=0)], state))


def gdn_commit(state, slots, checkpoints, num_accepted) -> None:
    """``state[slots[b]] = checkpoints[b, num_accepted[b] - 1]`` for live rows with ``num_accepted[b] >= 1``,
    after the contract's refusals."""
    commit_contract.validate(state, slots, checkpoints, num_accepted)
    batch, tokens = checkpoints.shape[:2]
    if batch == 0:
        return
    rows = live_rows(slots, state.shape[0]) & (num_accepted >= 1)
    last = (num_accepted.clamp(1, tokens) - 1).long()
    write_rows(state, slots, rows, checkpoints[torch.arange(batch, device=state.device), last])
