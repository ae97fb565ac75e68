"""ssm/gdn_decode, gdn_verify, gdn_commit from the contract: one fp32 step, the state rounded after it; every
contraction summed by halves in an order fixed by its length (rows batched or alone give the same bits: the
contract asks for batch invariance, and for gdn_verify's tokens to be gdn_decode's steps)."""
from __future__ import annotations

import torch

from suites.contract_only.checks import number, shape, tensor
from suites.contract_only.sums import tree_sum

STATE_DTYPES = (torch.float32, torch.bfloat16)


def _validate_tokens(q, k, v, g, beta, lead: int):
    for name, value in (("q", q), ("k", k), ("v", v)):
        tensor(name, value, (torch.bfloat16,), ndim=lead + 2)
    for name, value in (("g", g), ("beta", beta)):
        tensor(name, value, (torch.float32,), ndim=lead + 1)
    shape("k", k, q.shape)
    shape("v", v, (*q.shape[:lead], *v.shape[lead:]))
    heads, heads_v = q.shape[-2], v.shape[-2]
    if heads == 0 or heads_v % heads:
        raise ValueError(f"argument 'v' has HV = {heads_v} heads, not a multiple of H = {heads}")
    shape("g", g, v.shape[:-1])
    shape("beta", beta, v.shape[:-1])


def _validate_pool(state, v, q):
    tensor("state", state, STATE_DTYPES, ndim=4)
    shape("state", state, (state.shape[0], v.shape[-2], q.shape[-1], v.shape[-1]))


def _validate_rows(name, value, batch):
    tensor(name, value, (torch.int32,), ndim=1)
    shape(name, value, (batch,))


def _steps(q, k, v, g, beta, h, scale, qk_l2norm, state_dtype):
    """Tokens along dim 1 for rows of h [N, HV, Dk, Dv] (fp32): outputs [N, T, HV, Dv], states [N, T, ...]."""
    group = v.shape[-2] // q.shape[-2]
    outputs, states = [], []
    for t in range(q.shape[1]):
        q_t, k_t = q[:, t].float(), k[:, t].float()
        if qk_l2norm:
            q_t = q_t / torch.sqrt(tree_sum(q_t * q_t) + 1e-6)
            k_t = k_t / torch.sqrt(tree_sum(k_t * k_t) + 1e-6)
        q_t, k_t = q_t.repeat_interleave(group, dim=1), k_t.repeat_interleave(group, dim=1)
        h = h * torch.exp(g[:, t].float())[..., None, None]
        u = beta[:, t].float()[..., None] * (v[:, t].float() - _contract_dk(h, k_t))
        h = h + k_t[..., :, None] * u[..., None, :]
        outputs.append(scale * _contract_dk(h, q_t))
        h = h.to(state_dtype).float()
        states.append(h)
    return torch.stack(outputs, 1), torch.stack(states, 1)


def _contract_dk(h, x):
    """``einsum("nhkv,nhk->nhv", h, x)``, summed by halves over k."""
    return tree_sum(h * x[..., :, None], dim=-2)[..., 0, :]


def _live(slots, state):
    return (slots >= 0) & (slots < state.shape[0])


def _scale(scale) -> float:
    return float(torch.tensor(number("scale", scale), dtype=torch.float32))


def gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    _validate_tokens(q, k, v, g, beta, lead=1)
    _validate_pool(state, v, q)
    _validate_rows("slots", slots, q.shape[0])
    scale = _scale(scale)
    o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    rows = _live(slots, state).nonzero()[:, 0]
    if rows.numel():
        pick = slots[rows].long()
        outputs, states = _steps(q[rows, None], k[rows, None], v[rows, None], g[rows, None], beta[rows, None],
                                 state[pick].float(), scale, qk_l2norm, state.dtype)
        o[rows] = outputs[:, 0]
        state[pick] = states[:, 0].to(state.dtype)
    return o.bfloat16()


def gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    _validate_tokens(q, k, v, g, beta, lead=2)
    _validate_pool(state, v, q)
    _validate_rows("slots", slots, q.shape[0])
    _validate_rows("num_tokens", num_tokens, q.shape[0])
    scale = _scale(scale)
    batch, tokens = q.shape[:2]
    o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    checkpoints = torch.zeros(batch, tokens, *state.shape[1:], dtype=state.dtype, device=state.device)
    rows = _live(slots, state).nonzero()[:, 0]
    for row in rows.tolist():   # a row's tokens past its count may hold anything: never computed
        count = min(max(int(num_tokens[row]), 0), tokens)
        if count == 0:
            continue
        at = slice(row, row + 1)
        outputs, states = _steps(q[at, :count], k[at, :count], v[at, :count], g[at, :count], beta[at, :count],
                                 state[slots[row].long()][None].float(), scale, qk_l2norm, state.dtype)
        o[row, :count] = outputs[0]
        checkpoints[row, :count] = states[0].to(state.dtype)
    return o.bfloat16(), checkpoints


def gdn_commit(state, slots, checkpoints, num_accepted):
    tensor("state", state, STATE_DTYPES, ndim=4)
    tensor("checkpoints", checkpoints, (state.dtype,), ndim=5)
    shape("checkpoints", checkpoints, (*checkpoints.shape[:2], *state.shape[1:]))
    _validate_rows("slots", slots, checkpoints.shape[0])
    _validate_rows("num_accepted", num_accepted, checkpoints.shape[0])
    accepted = num_accepted.long().clamp(max=checkpoints.shape[1])
    rows = (_live(slots, state) & (accepted >= 1)).nonzero()[:, 0]
    state[slots[rows].long()] = checkpoints[rows, accepted[rows] - 1]


def _unit_stride_qkv(q, k, v):
    for name, value in (("q", q), ("k", k), ("v", v)):
        if isinstance(value, torch.Tensor) and value.dim() and value.stride(-1) != 1:
            raise ValueError(f"{name}: this implementation needs a unit-stride head dim")


def gdn_decode_unit_stride(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    """The alternative: refuses column-strided q, k, v (its own limit, clearly)."""
    _unit_stride_qkv(q, k, v)
    return gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm)


def gdn_verify_unit_stride(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    _unit_stride_qkv(q, k, v)
    return gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)


def _as_if_unit_stride(x):
    """What a kernel that assumes unit stride reads: the storage from x's offset, laid out densely."""
    return x if x.stride(-1) == 1 else torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset())


def gdn_decode_misreading_strides(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    """Negative control: answers column-strided q, k, v, but reads them as if unit-stride (wrong)."""
    return gdn_decode(_as_if_unit_stride(q), _as_if_unit_stride(k), _as_if_unit_stride(v), g, beta, state, slots,
                      scale, qk_l2norm)
