"""attention/rollback_save, rollback_restore and paged_decode from the contract."""
from __future__ import annotations

import math

import torch

from suites.contract_only.checks import bits, number, shape, tensor

INT32 = (torch.int32,)


# -- rollback -------------------------------------------------------------------------------------
def _validate_step(plane, page_table, positions):
    tensor("plane", plane)
    if plane.dim() < 2:
        raise ValueError(f"argument 'plane' must be [P, S, *E], has {plane.dim()} dims")
    tensor("page_table", page_table, INT32, ndim=2)
    tensor("positions", positions, INT32, ndim=2)
    if positions.shape[0] != page_table.shape[0]:
        raise ValueError("arguments 'positions' and 'page_table' disagree on B")


def _validate_restore(plane, positions, saved, rejected):
    tensor("saved", saved)
    if saved.dtype != plane.dtype:
        raise TypeError(f"argument 'saved' has dtype {saved.dtype}, the plane {plane.dtype}")
    shape("saved", saved, (*positions.shape, *plane.shape[2:]))
    tensor("rejected", rejected, (torch.bool,))
    shape("rejected", rejected, positions.shape)


def _slots(plane, page_table, positions):
    """(live [B, T], page, slot) of every entry (0 where not live)."""
    slots_per_page, pages_per_row = plane.shape[1], page_table.shape[1]
    t = positions.long()
    if slots_per_page == 0 or pages_per_row == 0:
        dead = torch.zeros_like(t)
        return dead.bool(), dead, dead
    logical = torch.div(t, slots_per_page, rounding_mode="floor")
    page = page_table.long().gather(1, logical.clamp(0, pages_per_row - 1))
    live = (t >= 0) & (logical < pages_per_row) & (page >= 0)
    return live, torch.where(live, page, 0), torch.where(live, t % slots_per_page, 0)


def rollback_save(plane, page_table, positions):
    _validate_step(plane, page_table, positions)
    live, page, slot = _slots(plane, page_table, positions)
    saved = torch.zeros((*positions.shape, *plane.shape[2:]), dtype=plane.dtype, device=plane.device)
    bits(saved)[live] = bits(plane)[page[live], slot[live]]
    return saved


def rollback_restore(plane, page_table, positions, saved, rejected):
    _validate_step(plane, page_table, positions)
    _validate_restore(plane, positions, saved, rejected)
    live, page, slot = _slots(plane, page_table, positions)
    restored = live & rejected
    bits(plane)[page[restored], slot[restored]] = bits(saved)[restored]


def _at_most_one_trailing_dim(plane):
    if isinstance(plane, torch.Tensor) and plane.dim() > 3:
        raise ValueError(f"plane: this implementation takes [P, S] or [P, S, E], not {tuple(plane.shape)}")


def rollback_save_flat(plane, page_table, positions):
    """The alternative: refuses planes of two or more trailing dims (its own limit, clearly)."""
    _at_most_one_trailing_dim(plane)
    return rollback_save(plane, page_table, positions)


def rollback_restore_flat(plane, page_table, positions, saved, rejected):
    _at_most_one_trailing_dim(plane)
    rollback_restore(plane, page_table, positions, saved, rejected)


# -- paged_decode ---------------------------------------------------------------------------------
HEAD_DIMS = (64, 128, 256)
CACHE_DTYPES = (torch.bfloat16, torch.float8_e4m3fn)


def _validate_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select):
    tensor("q", q, (torch.bfloat16,), ndim=3)
    tensor("k_cache", k_cache, CACHE_DTYPES, ndim=4)
    tensor("v_cache", v_cache, (k_cache.dtype,), ndim=4)
    shape("v_cache", v_cache, k_cache.shape)
    batch, query_heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"argument 'q' has head dim {head_dim}, not one of {HEAD_DIMS}")
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"argument 'k_cache' has head dim {k_cache.shape[3]}, q {head_dim}")
    if kv_heads == 0 or query_heads % kv_heads:
        raise ValueError(f"argument 'q': Hq = {query_heads} is not a multiple of Hkv = {kv_heads}")
    tensor("page_table", page_table, INT32, ndim=2)
    if page_table.shape[0] != batch:
        raise ValueError("argument 'page_table' has another batch than q")
    tensor("seq_lens", seq_lens, INT32, ndim=1)
    shape("seq_lens", seq_lens, (batch,))
    if page_select is not None:
        tensor("page_select", page_select, INT32, ndim=2)
        if page_select.shape[0] != batch:
            raise ValueError("argument 'page_select' has another batch than q")
    return number("sm_scale", sm_scale), number("kv_scale", kv_scale)


def _attended(row, page_table, seq_lens, page_size, page_select):
    """Token positions of row ``row``'s attended set, and their physical pages."""
    pages_per_row = page_table.shape[1]
    if page_size == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty
    count = min(max(int(seq_lens[row]), 0), pages_per_row * page_size)
    token = torch.arange(count)
    logical = token // page_size
    physical = page_table[row].cpu().long()[logical]
    keep = physical >= 0
    if page_select is not None:
        chosen = torch.zeros(pages_per_row + 1, dtype=torch.bool)
        picks = page_select[row].cpu().long()
        chosen[torch.where((picks >= 0) & (picks < pages_per_row), picks, pages_per_row)] = True
        keep &= chosen[logical]
    return token[keep], physical[keep]


def _decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select, dtype):
    batch, query_heads, head_dim = q.shape
    page_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = query_heads // kv_heads if kv_heads else 1
    o = torch.zeros(batch, query_heads, head_dim, dtype=dtype)
    lse = torch.full((batch, query_heads), -math.inf, dtype=dtype)
    for row in range(batch):
        token, physical = _attended(row, page_table, seq_lens, page_size, page_select)
        if token.numel() == 0:
            continue
        slot = token % page_size
        k = k_cache[physical, slot].cpu().to(dtype) * kv_scale               # [n, Hkv, D]
        v = v_cache[physical, slot].cpu().to(dtype) * kv_scale
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)   # [n, Hq, D]
        scores = torch.einsum("hd,nhd->hn", q[row].cpu().to(dtype), k) * sm_scale
        lse[row] = torch.logsumexp(scores, dim=-1)
        o[row] = torch.einsum("hn,nhd->hd", torch.exp(scores - lse[row][:, None]), v)
    return o.to(torch.bfloat16).to(q.device), lse.float().to(q.device)


def paged_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    sm, kv = _validate_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return _decode(q, k_cache, v_cache, page_table, seq_lens, sm, kv, page_select, torch.float32)


def paged_decode_host_scale(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """The alternative: float64 sums, and a tensor sm_scale refused (its own limit, clearly)."""
    if isinstance(sm_scale, torch.Tensor):
        raise TypeError("sm_scale must be a Python float here")
    sm, kv = _validate_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return _decode(q, k_cache, v_cache, page_table, seq_lens, sm, kv, page_select, torch.float64)
