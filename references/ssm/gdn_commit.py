"""Contract ``ssm/gdn_commit`` (bitwise, in place), in executable form.

``gdn_commit(state, slots, checkpoints, num_accepted) -> None``: after verification, each row keeps
the state after its last accepted token: ``state[slots[b]] = checkpoints[b, num_accepted[b] - 1]`` for
``num_accepted[b] >= 1``; 0 leaves the slot untouched; padding rows are untouched.  Nothing else in
the pool changes (the parity oracle compares the whole pool bit for bit).
``state[S, HV, Dk, Dv]`` fp32 or bf16; ``checkpoints[B, T, HV, Dk, Dv]`` of state's dtype (as
``gdn_verify`` returns them); ``slots``, ``num_accepted`` int32 ``[B]``.
Where the contract is silent: a slot outside ``0..S-1`` is a padding row, and ``num_accepted`` above T
commits the last checkpoint (clamped, as ``gdn_verify`` clamps ``num_tokens``), so T = 0 commits nothing.
Refused: the contract's Refuse line (shape/dtype mismatch) and non-tensors; any strides of the pool and
of the checkpoints are answered (the kernel's own limits: ``ops/ssm/gdn_commit.kernel_limits``).
"""
from __future__ import annotations

import torch

from references.ssm.gdn_decode import MISMATCH, STATE_DTYPES, live_rows, make_inputs, validate_pool, validate_row_ints
from references.validation import (Refusal, refuse, require_dtype, require_ndim, require_same_device,
                                   require_tensor)


def validate(state, slots, checkpoints, num_accepted) -> None:
    require_tensor("state", state)
    require_ndim("state", state, 4, "[S, HV, Dk, Dv]")
    validate_pool(state, *state.shape[1:])
    require_tensor("checkpoints", checkpoints)
    require_ndim("checkpoints", checkpoints, 5, "[B, T, HV, Dk, Dv]")
    require_dtype("checkpoints", checkpoints, STATE_DTYPES)
    batch = checkpoints.shape[0]
    if checkpoints.shape[2:] != state.shape[1:]:
        raise refuse("checkpoints", f"checkpoint shape {tuple(checkpoints.shape[2:])} is not the pool's slot "
                     f"shape {tuple(state.shape[1:])}", "pass the checkpoints gdn_verify returned for this pool")
    if checkpoints.dtype != state.dtype:
        raise TypeError(f"checkpoints: dtype {checkpoints.dtype} is not state's {state.dtype} — "
                        "pass the checkpoints gdn_verify returned for this pool")
    validate_row_ints("slots", slots, batch)
    validate_row_ints("num_accepted", num_accepted, batch)
    require_same_device({"state": state, "slots": slots, "checkpoints": checkpoints, "num_accepted": num_accepted})


def gdn_commit(state, slots, checkpoints, num_accepted) -> None:
    validate(state, slots, checkpoints, num_accepted)
    tokens = checkpoints.shape[1]
    accepted = num_accepted.clamp(max=tokens)
    rows = (live_rows(slots, state.shape[0]) & (accepted >= 1)).nonzero()[:, 0]
    state[slots[rows].long()] = checkpoints[rows, accepted[rows].long() - 1]


def stock(state, slots, checkpoints, num_accepted) -> None:
    """What a serving engine writes: keep the rows that accepted something, copy their last checkpoint."""
    keep = (slots >= 0) & (num_accepted > 0)
    state[slots[keep].long()] = checkpoints[keep, num_accepted[keep].long() - 1]


# -- refused inputs ---------------------------------------------------------------------------------
def _inputs(device, state_dtype=torch.float32):
    base = make_inputs(device, state_dtype=state_dtype)
    checkpoints = torch.zeros(2, 3, *base["state"].shape[1:], dtype=state_dtype, device=device)
    return {"state": base["state"], "slots": base["slots"], "checkpoints": checkpoints,
            "num_accepted": torch.tensor([3, 0], dtype=torch.int32, device=device)}


def _with(**changes):
    def make(device):
        kwargs = _inputs(device)
        for name, change in changes.items():
            kwargs[name] = change(kwargs[name], device)
        return kwargs
    return make


REFUSALS = (
    Refusal("checkpoints without the token axis", _with(checkpoints=lambda c, d: c[:, 0]), "checkpoints",
            clause=MISMATCH),
    Refusal("bf16 checkpoints for an fp32 pool", _with(checkpoints=lambda c, d: c.bfloat16()),
            ("checkpoints", "state"), TypeError, clause=MISMATCH),
    Refusal("checkpoints of another Dk", _with(checkpoints=lambda c, d: c[:, :, :, :32]), ("checkpoints", "state"),
            clause=MISMATCH),
    Refusal("fp16 state", _with(state=lambda s, d: s.half()), "state", TypeError, clause=MISMATCH),
    Refusal("int64 num_accepted", _with(num_accepted=lambda n, d: n.long()), "num_accepted", TypeError,
            clause=MISMATCH),
    Refusal("slots of another batch", _with(slots=lambda s, d: s[:1]), ("slots", "checkpoints"), clause=MISMATCH),
    Refusal("not a tensor", _with(state=lambda s, d: s.tolist()), "state", TypeError, clause="non-tensor"),
)
