"""Other implementations of ``paged_decode`` for the battery to judge: one correct, many wrong.

The correct one is a plain fp32 PyTorch formulation, row by row (a different route from the Triton
kernel and from the float64 reference).  Each wrong one is that formulation with one bug a real
decode kernel has had; ``test_paged_decode.py`` checks that the battery rejects every one through
the oracle named there.  The batch-invariance control is right to the band, so only batch
invariance can catch it.
Judge one yourself:
``tools/certify-cells --op paged_decode --impl suites.attention.paged_decode_impls:NAME --device cpu``.
"""
from __future__ import annotations

import math

import torch

from ops.triton_backend import sm_count
from oracles.band import row_ulp
from references.attention.paged_decode import validate
from suites.strided_reads import in_strides_of, last_dim_contiguous, read_as_dense


def _decode_fp32(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None, **bugs):
    """fp32 paged decode, row by row: each split of ``split_tokens`` attended tokens (default: the whole
    row) gives a partial softmax, merged by log-sum-exp in fp32.  The keyword switches are the bugs
    (defaults: the contract)."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return decode_fp32(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select, **bugs)


def decode_fp32(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select, *,
                subtract_max=True, whole_last_page=False, holes_are_pages=False, duplicates_once=True,
                head_of=lambda h, group, kv_heads: h // group, lse_log_base=math.e, split_tokens=None,
                score_dtype=torch.float32, score_piece=None):
    """``_decode_fp32`` on validated arguments, for caches of any float dtype (``paged_decode_nvfp4kv``'s
    implementations pass their decoded caches); ``score_dtype`` sums q . k (rounded to fp32 after), split-K
    over D into pieces of ``score_piece`` added in order when given."""
    batch, query_heads, head_dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    pages_per_row = page_table.shape[1]
    group = query_heads // kv_heads
    kv_head = torch.tensor([head_of(h, group, kv_heads) for h in range(query_heads)], device=q.device)
    o = torch.zeros(batch, query_heads, head_dim, dtype=torch.bfloat16, device=q.device)
    lse = torch.full((batch, query_heads), -torch.inf, device=q.device)
    for row in range(batch):
        if page_select is None:
            logical = torch.arange(pages_per_row, device=q.device)
        else:
            logical = page_select[row].long()
            logical = logical[(logical >= 0) & (logical < pages_per_row)]
            if duplicates_once:
                logical = logical.unique()
        length = int(seq_lens[row])
        readable = math.ceil(length / page_size) * page_size if whole_last_page else length
        token = (logical[:, None] * page_size + torch.arange(page_size, device=q.device)).reshape(-1)
        token = token[token < readable]
        physical = page_table[row, token // page_size].long()
        if not holes_are_pages:
            token, physical = token[physical >= 0], physical[physical >= 0]
        if token.numel() == 0:
            continue
        slot = token % page_size
        k = k_cache[physical, slot].float()[:, kv_head] * kv_scale           # [n, Hq, D]
        v = v_cache[physical, slot].float()[:, kv_head] * kv_scale
        width = score_piece or head_dim
        dots = [torch.einsum("hd,nhd->hn", q[row, :, d:d + width].to(score_dtype), k[..., d:d + width].to(score_dtype))
                for d in range(0, head_dim, width)]
        scores = (sum(dots[1:], dots[0]) * sm_scale).float()
        tops, totals, sums = [], [], []
        for split in torch.arange(token.numel(), device=q.device).split(split_tokens or token.numel()):
            part = scores[:, split]
            top = part.amax(dim=1) if subtract_max else torch.zeros_like(part[:, 0])
            weights = (part - top[:, None]).exp()
            tops.append(top)
            totals.append(weights.sum(dim=1))
            sums.append(torch.einsum("hn,nhd->hd", weights, v[split]))
        top = torch.stack(tops).amax(dim=0)
        rescale = (torch.stack(tops) - top).exp()                              # [splits, Hq]
        total = (rescale * torch.stack(totals)).sum(dim=0)
        o[row] = ((rescale[..., None] * torch.stack(sums)).sum(dim=0) / total[:, None]).to(torch.bfloat16)
        lse[row] = (top + total.log()) / math.log(lse_log_base)
    return o, lse


def correct_fp32(*args, **kwargs):
    """Correct: fp32 scores and softmax on the gathered attended tokens, one row at a time."""
    return _decode_fp32(*args, **kwargs)


SPLIT_KV_TOKENS = 48   # a fixed split (not a multiple of any page size), so the rounding never moves with the batch


def split_kv_fixed(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """Correct: split-KV in fp32, splits of 48 attended tokens merged by (max, lse) — the merge a real
    split-KV kernel does; its rounding differs from a one-pass softmax and must be inside the band."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return decode_fp32(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select,
                       split_tokens=SPLIT_KV_TOKENS)


SPLIT_D_WIDTH = 24   # split-K over D in pieces no reference order uses (not a divisor of any head dim)


def split_d_fixed(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """Correct: the scores' dot split-K over D, pieces of 24 added in order — a tensor-core kernel's
    accumulation of k-steps, in pieces of its own; inside the band the legitimate orders set."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return decode_fp32(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select,
                       score_piece=SPLIT_D_WIDTH)


def lse_three_ulp_off(*args, **kwargs):
    """Wrong by a little: the correct lse raised by 3 fp32 ULPs of its row's scale, where the legitimate
    orders agree within about one."""
    o, lse = _decode_fp32(*args, **kwargs)
    return o, (lse.double() + 3 * row_ulp(lse.double(), torch.float32)).float()


def no_max_subtraction(*args, **kwargs):
    """exp(s) straight: scores above 88.7 overflow fp32 to inf, and o becomes inf / inf = NaN."""
    return _decode_fp32(*args, **kwargs, subtract_max=False)


def reads_past_seq_len(*args, **kwargs):
    """Attends every slot of the row's last page, including those past seq_len (NaN garbage)."""
    return _decode_fp32(*args, **kwargs, whole_last_page=True)


def holes_read_as_pages(*args, **kwargs):
    """Treats -1 table entries as page indices (page -1: the pool's last page)."""
    return _decode_fp32(*args, **kwargs, holes_are_pages=True)


def duplicates_counted_twice(*args, **kwargs):
    """Attends a page once per page_select entry naming it."""
    return _decode_fp32(*args, **kwargs, duplicates_once=False)


def page_select_read_as_dense(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """Reads ``page_select`` as rows T entries apart from its first, whatever its row stride (a selection
    that is a view of a wider one selects other pages)."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    if page_select is not None:
        page_select = read_as_dense(page_select)
    return decode_fp32(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)


def v_read_with_k_strides(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """Addresses V with K's strides: right while the two caches share a layout."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return decode_fp32(q, k_cache, in_strides_of(v_cache, k_cache), page_table, seq_lens, sm_scale, kv_scale,
                       page_select)


def head_dim_read_as_contiguous(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0,
                                page_select=None):
    """Reads q's and the caches' head dim element after element, whatever its stride: right where it is 1."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return decode_fp32(last_dim_contiguous(q), last_dim_contiguous(k_cache), last_dim_contiguous(v_cache), page_table,
                       seq_lens, sm_scale, kv_scale, page_select)


def gqa_heads_interleaved(*args, **kwargs):
    """Maps query head h to KV head h % Hkv instead of h // (Hq / Hkv)."""
    return _decode_fp32(*args, **kwargs, head_of=lambda h, group, kv_heads: h % kv_heads)


def lse_in_log2(*args, **kwargs):
    """Returns log2(sum exp s) (the base-2 convention of some kernels' internal state), not ln."""
    return _decode_fp32(*args, **kwargs, lse_log_base=2.0)


def split_from_batch(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """Split-K in fp32 with the usual occupancy heuristic — enough splits for B * Hkv rows to fill 4
    programs per SM — so a row's split boundaries, and its rounding, move with the batch size."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return decode_fp32(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select,
                       split_tokens=split_tokens_from_batch(q, k_cache, page_table, page_select))


def split_tokens_from_batch(q, k_cache, page_table, page_select) -> int:
    """Tokens per split for enough splits that B * Hkv rows fill 4 programs per SM: a function of B."""
    batch, kv_heads = q.shape[0], k_cache.shape[2]
    positions = (page_table.shape[1] if page_select is None else page_select.shape[1]) * k_cache.shape[1]
    splits = max(1, 4 * sm_count(q.device) // max(1, batch * kv_heads))
    return max(16, -(-positions // splits))
