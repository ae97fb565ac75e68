"""Other implementations of the Gated DeltaNet ops for the battery to judge: one correct, many wrong.

``gdn_decode``, ``gdn_verify``, ``gdn_commit`` here are a correct implementation written apart from
the reference (every row stepped, padding rows included and then dropped with ``where``; dot products
as pairwise sums of fixed slices, not einsum), so ``tools/certify-cells --op gdn_decode --impl suites.ssm.gdn_impls`` judges it
as one implementation.  Each wrong one is named after its bug and judged with these as its siblings;
``test_gdn.py`` checks the battery rejects every one, through the oracle that must catch it.
"""
from __future__ import annotations

import torch

from oracles.battery import Implementation
from references.ssm import gdn_commit as commit_contract
from references.ssm import gdn_decode as decode_contract
from references.ssm import gdn_verify as verify_contract
from references.ssm.gdn_decode import L2NORM_EPS, live_rows
from suites.strided_reads import read_as_dense


def _pairwise_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim`` (negative) by halving: the first half plus the second, an odd last slice carried.

    Elementwise adds of fixed slices, so every output element is added in the same order whatever the
    batch size: on CUDA, torch's ``sum`` picks its reduction layout by shape, and a row computed alone
    came out differently from the same row in a batch of 256 (H200, 2026-11-29).
    """
    while x.shape[dim] > 1:
        size = x.shape[dim]
        half = size // 2
        halved = x.narrow(dim, 0, half) + x.narrow(dim, half, half)
        x = torch.cat([halved, x.narrow(dim, size - 1, 1)], dim) if size % 2 else halved
    return x.squeeze(dim)


def _steps(q, k, v, g, beta, state, slots, counts, scale, qk_l2norm, bug=None):
    """Tokens ``t < counts[b]`` of every row, in float32: ``(o fp32 [B, T, HV, Dv], states [B, T, HV,
    Dk, Dv] in the state dtype)``, zero where a row is padding or past its count."""
    batch, tokens, heads, _ = q.shape
    heads_v = v.shape[2]
    group = heads_v // heads
    head = torch.arange(heads_v, device=q.device)
    head = head % heads if bug == "heads_interleaved" else head // group
    live = live_rows(slots, state.shape[0])
    h = state[slots.clamp(min=0).long()].float()          # padding rows step slot 0's state, then drop it
    o = torch.zeros(batch, tokens, heads_v, v.shape[3], device=q.device)
    states = torch.zeros(batch, tokens, *state.shape[1:], dtype=state.dtype, device=q.device)
    scale = torch.tensor(scale, dtype=torch.float32, device=q.device)
    for t in range(tokens):
        q_t, k_t = q[:, t].float(), k[:, t].float()
        if qk_l2norm:
            eps = 0.0 if bug == "l2norm_without_eps" else L2NORM_EPS
            q_t = q_t / torch.sqrt(_pairwise_sum(q_t * q_t, -1)[..., None] + eps)
            k_t = k_t / torch.sqrt(_pairwise_sum(k_t * k_t, -1)[..., None] + eps)
        q_t, k_t = q_t[:, head], k_t[:, head]                       # [B, HV, Dk]
        decay = torch.exp(g[:, t])[..., None, None]
        stepped = h if bug == "decay_after_update" else h * decay
        u = beta[:, t, :, None] * (v[:, t].float() - _pairwise_sum(stepped * k_t[..., None], -2))
        stepped = stepped + k_t[..., :, None] * u[..., None, :]
        if bug == "decay_after_update":
            stepped = stepped * decay
        o_t = scale * _pairwise_sum(stepped * q_t[..., None], -2)
        rounded = stepped.to(state.dtype).float()
        active = live & (t < counts)
        if bug == "padding_rows_multiplied_by_zero":
            o[:, t] = o_t * active[:, None, None]                       # NaN garbage * 0 = NaN
        else:
            o[:, t] = torch.where(active[:, None, None], o_t, 0)
        states[:, t] = torch.where(active[:, None, None, None], rounded, 0).to(state.dtype)
        running = stepped if bug == "fp32_running_state" else rounded
        h = torch.where(active[:, None, None, None], running, h)
    return o, states


def _decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False, bug=None):
    decode_contract.validate(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    live = live_rows(slots, state.shape[0])
    if bug == "padding_writes_through_minus_one":
        # gather-step-scatter over every row: torch reads and writes slot -1 as the pool's last slot
        # (a GPU kernel would write the 64 KiB before the pool)
        read = torch.where(slots < 0, state.shape[0] - 1, slots)
        o, states = _steps(q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None], state, read,
                           torch.ones_like(slots), scale, qk_l2norm)
        state[slots.long()] = states[:, 0]
        return torch.where(live[:, None, None], o[:, 0], 0).to(torch.bfloat16)
    o, states = _steps(q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None], state, slots,
                       torch.ones_like(slots), scale, qk_l2norm, bug)
    state[slots[live].long()] = states[live, 0]
    return o[:, 0].to(torch.bfloat16)


def _verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False, bug=None):
    verify_contract.validate(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    tokens = q.shape[1]
    # garbage_past_count steps every drafted token and returns them all, past each row's count included
    counts = torch.full_like(num_tokens, tokens) if bug == "garbage_past_count" else num_tokens.clamp(0, tokens)
    o, states = _steps(q, k, v, g, beta, state, slots, counts, scale, qk_l2norm, bug)
    if bug == "verify_writes_the_pool":
        live = live_rows(slots, state.shape[0])
        last = (counts.clamp(min=1) - 1).long()
        state[slots[live].long()] = states[live, last[live]]
    return o.to(torch.bfloat16), states


# -- correct ----------------------------------------------------------------------------------------
def gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    return _decode(q, k, v, g, beta, state, slots, scale, qk_l2norm)


def gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    return _verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)


def gdn_commit(state, slots, checkpoints, num_accepted):
    commit_contract.validate(state, slots, checkpoints, num_accepted)
    commit_contract.stock(state, slots, checkpoints, num_accepted)


# -- wrong decodes ----------------------------------------------------------------------------------
def _decode_with(bug):
    def wrong(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
        return _decode(q, k, v, g, beta, state, slots, scale, qk_l2norm, bug)
    wrong.__name__ = wrong.__qualname__ = bug
    return wrong


padding_writes_through_minus_one = _decode_with("padding_writes_through_minus_one")
heads_interleaved = _decode_with("heads_interleaved")
decay_after_update = _decode_with("decay_after_update")
l2norm_without_eps = _decode_with("l2norm_without_eps")
padding_rows_multiplied_by_zero = _decode_with("padding_rows_multiplied_by_zero")


def slots_read_as_dense(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    decode_contract.validate(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    return _decode(q, k, v, g, beta, state, read_as_dense(slots), scale, qk_l2norm)


def missing_refusal(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    """Checks nothing: a fp16 q is stepped as if bf16, HV % H != 0 reads past q's last head."""
    live = live_rows(slots, state.shape[0])
    o, states = _steps(q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None], state, slots,
                       torch.ones_like(slots), scale, qk_l2norm)
    state[slots[live].long()] = states[live, 0]
    return o[:, 0].to(torch.bfloat16)


# -- wrong verifies -------------------------------------------------------------------------------
def _verify_with(bug):
    def wrong(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
        return _verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm, bug)
    wrong.__name__ = wrong.__qualname__ = bug
    return wrong


fp32_running_state = _verify_with("fp32_running_state")
verify_writes_the_pool = _verify_with("verify_writes_the_pool")
garbage_past_count = _verify_with("garbage_past_count")


def num_tokens_read_as_dense(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    verify_contract.validate(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    return _verify(q, k, v, g, beta, state, slots, read_as_dense(num_tokens), scale, qk_l2norm)


# -- wrong commits --------------------------------------------------------------------------------
def accepted_read_as_dense(state, slots, checkpoints, num_accepted):
    commit_contract.validate(state, slots, checkpoints, num_accepted)
    commit_contract.stock(state, slots, checkpoints, read_as_dense(num_accepted))


def zero_accepted_wraps(state, slots, checkpoints, num_accepted):
    """Copies ``checkpoints[b, num_accepted[b] - 1]`` for every live row: 0 accepted reads index -1, the
    last drafted token's state, instead of leaving the slot alone."""
    commit_contract.validate(state, slots, checkpoints, num_accepted)
    live = slots >= 0
    state[slots[live].long()] = checkpoints[live, num_accepted[live].long() - 1]


def commit_through_minus_one(state, slots, checkpoints, num_accepted):
    """Commits padding rows too: their slot -1 wraps to the pool's last slot."""
    commit_contract.validate(state, slots, checkpoints, num_accepted)
    keep = num_accepted > 0
    state[slots[keep].long()] = checkpoints[keep, num_accepted[keep].long() - 1]


def stray_write_within_band(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    """Right, then one stray write: the largest value of a slot no row owns moves by one ulp (a stale
    copy of a slot written back through another precision would look like this)."""
    o = gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    owned = torch.zeros(state.shape[0], dtype=torch.bool, device=state.device)
    owned[slots[live_rows(slots, state.shape[0])].long()] = True
    free = (~owned).nonzero()[:, 0]
    if free.numel():
        slot = state[free[0]]
        flat = slot.view(-1)
        at = flat.float().abs().nan_to_num(0).argmax()
        bits = {2: torch.int16, 4: torch.int32}[state.element_size()]
        flat.view(bits)[at] += 1   # sign-magnitude: one more unit in the last place, away from zero
    return o


# -- for the suites -----------------------------------------------------------------------------------
def judged(name: str, op: str = "gdn_decode") -> Implementation:
    """The correct implementation above, with ``op`` replaced by the function ``name`` of this module."""
    functions = {"gdn_decode": gdn_decode, "gdn_verify": gdn_verify, "gdn_commit": gdn_commit}
    functions[op] = globals()[name]
    return Implementation(f"suites.ssm.gdn_impls:{name}", functions)
