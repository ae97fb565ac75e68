"""Contract ``ssm/gdn_verify`` (band), in executable form, and the replay-equivalence property.

``gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False) -> (o, checkpoints)``:
a speculative step scores T drafted tokens per row.  It runs the one-token step of ``gdn_decode`` over
tokens ``0..num_tokens[b]-1`` from ``state[slots[b]]``, WITHOUT modifying ``state``; ``o[b, t]`` bf16
``[B, T, HV, Dv]``; ``checkpoints[b, t]`` = the (rounded) state after token t, in the state dtype,
``[B, T, HV, Dk, Dv]``.  Entries past ``num_tokens[b]``, and all of a padding row, are zero.
Where the contract is silent: ``num_tokens`` outside ``1..T`` is clamped to ``0..T`` (0: the row is
all zeros), as no device value is checked by a sync.

Replay equivalence (a property of the three ops together): ``gdn_verify`` + ``gdn_commit(a)`` leaves
the pool bitwise equal to ``a`` successive ``gdn_decode`` calls of the same implementation on tokens
``0..a-1``, with ``o[:, :a]`` bitwise equal to theirs, and changes nothing outside the committed slots.
A verify that keeps its running state in fp32 while the pool is bf16 can stay inside the band and
still break it: decode rounds the state between tokens, such a verify does not.
"""
from __future__ import annotations

import torch

from oracles.band_limit import BandLimit
from oracles.bitwise import check_bitwise
from oracles.in_place import check_in_place_step
from oracles.tensors import clone_inputs
from references import orders
from references.formats.bf16 import round_float64_to_bf16
from references.ssm.gdn_decode import (GROUPED_HEADS, MISMATCH, live_rows, make_inputs, recurrence, validate_pool,
                                       validate_row_ints, validate_scalars, validate_tokens)
from references.validation import Refusal, require_same_device

REPLAY_TOKENS = 2   # drafted tokens per row when gdn_decode's own inputs are lifted into a replay


def validate(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False) -> None:
    batch, _, _, heads_v, dk, dv = validate_tokens(q, k, v, g, beta, token_axis=True)
    validate_pool(state, heads_v, dk, dv)
    validate_row_ints("slots", slots, batch)
    validate_row_ints("num_tokens", num_tokens, batch)
    validate_scalars(scale, qk_l2norm)
    require_same_device({"q": q, "k": k, "v": v, "g": g, "beta": beta, "state": state, "slots": slots,
                         "num_tokens": num_tokens})


def truth(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    """float64 ``(o, checkpoints)``; checkpoints hold the per-token rounded states."""
    return recurrence(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm, torch.float64)


def gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    validate(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    o, checkpoints = truth(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    return round_float64_to_bf16(o).to(torch.bfloat16), checkpoints.to(state.dtype)


def stock(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    """The decode step in float32 torch, once per drafted token, from the gathered states."""
    o, checkpoints = recurrence(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm, torch.float32)
    return o.to(torch.bfloat16), checkpoints.to(state.dtype)


def gdn_verify_in_order(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False, *, order: orders.Order):
    """The stock op's float32 recurrence with its sums over Dk in ``order``."""
    validate(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    o, checkpoints = recurrence(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm, torch.float32, order)
    return o.to(torch.bfloat16), checkpoints.to(state.dtype)


LEGITIMATE_ORDERS = orders.legitimate_orders(gdn_verify_in_order)
# a recurrence: each of up to 8 tokens adds the fp32 errors of h^T k and (under qk_l2norm) of k's l2 norm,
# gdn_decode's one-token limit of 16, to a state the next token starts from; the pairwise order measured 9
# ULP on fp32 checkpoints after 5 tokens on the H200 (large values, qk_l2norm: a band of 18)
BAND_LIMIT = BandLimit(32.0, "a recurrence: up to 8 tokens each carry an fp32 h^T k and l2-norm error into "
                             "the state (9 ULP measured for the pairwise order on the H200 after 5 tokens)")


# -- replay equivalence -----------------------------------------------------------------------------
def accepted_counts(num_tokens: torch.Tensor, tokens: int) -> torch.Tensor:
    """How many drafted tokens each row commits: row b accepts all (b % 3 == 0: row 0, so every batch
    replays all its tokens), none (b % 3 == 1) or about half (b % 3 == 2) of its ``num_tokens``."""
    count = num_tokens.clamp(0, tokens)
    kind = torch.arange(count.shape[0], device=count.device) % 3
    return torch.where(kind == 0, count, torch.where(kind == 1, 0, (count + 1) // 2)).to(torch.int32)


def replay_equivalence(impl, kwargs) -> None:
    """verify + commit(a) == a successive decode calls, bitwise, on gdn_verify's inputs.

    Besides the final pool, every checkpoint ``t < a`` must equal the pool after ``t + 1`` decode calls
    and every ``o[:, t]`` the output of call ``t`` (commit(t + 1) would copy that checkpoint).  Rows that
    have committed all their tokens sit out the later decode calls as padding rows (slot -1).  Verify
    must leave the pool's whole storage untouched, and commit change nothing but the committed slots.
    """
    verify, commit, decode = impl["gdn_verify"], impl["gdn_commit"], impl["gdn_decode"]
    slots, pool_slots = kwargs["slots"], kwargs["state"].shape[0]
    speculative = clone_inputs(kwargs)
    pool = speculative["state"]
    verified = []
    check_in_place_step(pool, lambda: verified.extend(verify(**speculative)),
                        torch.zeros(pool_slots, dtype=torch.bool, device=pool.device), pool,
                        "gdn_verify must leave the pool untouched")
    o, checkpoints = verified
    accepted = accepted_counts(kwargs["num_tokens"], kwargs["q"].shape[1])

    replayed = kwargs["state"].clone()
    live = live_rows(slots, pool_slots)
    for t in range(int(accepted.max()) if accepted.numel() else 0):
        stepping = live & (t < accepted)
        o_t = decode(q=kwargs["q"][:, t], k=kwargs["k"][:, t], v=kwargs["v"][:, t], g=kwargs["g"][:, t],
                     beta=kwargs["beta"][:, t], state=replayed, slots=torch.where(stepping, slots, -1),
                     scale=kwargs["scale"], qk_l2norm=kwargs.get("qk_l2norm", False))
        rows = stepping.nonzero()[:, 0]
        check_bitwise(o_t[rows], o[rows, t], f"o of token {t}: gdn_decode call {t + 1} vs gdn_verify's o[:, {t}] "
                                             f"(rows {rows.tolist()[:8]})", oracle="stateful")
        check_bitwise(replayed[slots[rows].long()], checkpoints[rows, t],
                      f"state after gdn_decode call {t + 1} vs gdn_verify's checkpoints[:, {t}]", oracle="stateful")
    committed = torch.zeros(pool_slots, dtype=torch.bool, device=pool.device)
    committed[slots[live & (accepted >= 1)].long()] = True
    check_in_place_step(pool, lambda: commit(state=pool, slots=speculative["slots"], checkpoints=checkpoints,
                                             num_accepted=accepted), committed, replayed,
                        f"gdn_commit(a) after gdn_verify vs a gdn_decode calls (a = {accepted.tolist()[:8]})")
    check_bitwise(pool, replayed, "pool after gdn_verify + gdn_commit(a) vs after a gdn_decode calls "
                                  "(slots no row committed included)", oracle="stateful")


def verify_inputs_of_decode_inputs(kwargs) -> dict:
    """gdn_decode's inputs lifted to gdn_verify's: ``REPLAY_TOKENS`` drafted tokens per row.

    Token 0 is the drawn input itself; token t rotates each row's q, k, v (and g, beta across v heads)
    by t along the last axis, so tokens differ, keep their distribution (a unit k stays unit), and a
    padding row's garbage stays in that padding row.  The state and slots are shared, not copied.
    """
    def tokens(x):
        return torch.stack([torch.roll(x, t, dims=-1) for t in range(REPLAY_TOKENS)], dim=1)

    lifted = {name: tokens(kwargs[name]) for name in ("q", "k", "v", "g", "beta")}
    batch = kwargs["q"].shape[0]
    num_tokens = torch.full((batch,), REPLAY_TOKENS, dtype=torch.int32, device=kwargs["q"].device)
    return {**lifted, "state": kwargs["state"], "slots": kwargs["slots"], "num_tokens": num_tokens,
            "scale": kwargs["scale"], "qk_l2norm": kwargs.get("qk_l2norm", False)}


def replay_equivalence_of_decode_inputs(impl, kwargs) -> None:
    """The replay property on gdn_decode's inputs, lifted by ``verify_inputs_of_decode_inputs``."""
    replay_equivalence(impl, verify_inputs_of_decode_inputs(kwargs))


# -- refused inputs ---------------------------------------------------------------------------------
def _with(**changes):
    def make(device):
        kwargs = make_inputs(device, tokens=3)
        kwargs["num_tokens"] = torch.tensor([3, 1], dtype=torch.int32, device=device)
        for name, change in changes.items():
            kwargs[name] = change(kwargs.get(name), device)
        return kwargs
    return make


REFUSALS = (
    Refusal("q without its token axis", _with(q=lambda q, d: q[:, 0]), "q", clause=MISMATCH),
    Refusal("v with fewer tokens than q", _with(v=lambda v, d: v[:, :2]), ("v", "q"), clause=MISMATCH),
    Refusal("HV not a multiple of H", _with(v=lambda v, d: v[:, :, :3], g=lambda g, d: g[:, :, :3],
                                            beta=lambda b, d: b[:, :, :3],
                                            state=lambda s, d: s[:, :3].contiguous()), ("v", "q", "k"),
            clause=GROUPED_HEADS),
    Refusal("fp16 v", _with(v=lambda v, d: v.half()), "v", TypeError, clause=MISMATCH),
    Refusal("g without its token axis", _with(g=lambda g, d: g[:, 0]), "g", clause=MISMATCH),
    Refusal("fp64 beta", _with(beta=lambda b, d: b.double()), "beta", TypeError, clause=MISMATCH),
    Refusal("state of another Dv", _with(state=lambda s, d: s[..., :32].contiguous()), ("state", "v"),
            clause=MISMATCH),
    Refusal("int64 num_tokens", _with(num_tokens=lambda n, d: n.long()), "num_tokens", TypeError, clause=MISMATCH),
    Refusal("num_tokens of another batch", _with(num_tokens=lambda n, d: n[:1]), ("num_tokens", "q"),
            clause=MISMATCH),
    Refusal("num_tokens not a tensor", _with(num_tokens=lambda n, d: n.tolist()), "num_tokens", TypeError,
            clause="non-tensor"),
)
