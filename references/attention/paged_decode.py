"""Contract ``attention/paged_decode`` (band), in executable form.

``paged_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None)
-> (o bf16[B, Hq, D], lse fp32[B, Hq])``: one decode step of attention over a paged KV cache.

- ``q`` bf16 ``[B, Hq, D]``; caches ``[P, S, Hkv, D]`` (P pages of S token slots), both bf16 or both
  e4m3; ``page_table`` int32 ``[B, M]`` (physical page of each logical page, ``-1`` = invalid);
  ``seq_lens`` int32 ``[B]``; ``page_select`` None or int32 ``[B, T]`` of *logical* page indices.
  Query head h reads KV head ``h // (Hq // Hkv)``; D is 64, 128 or 256.
- The *attended set* of row b: tokens ``t < seq_lens[b]`` whose logical page ``t // S`` has
  ``page_table[b, t // S] >= 0`` and, when ``page_select`` is given, appears in ``page_select[b]``.
  Token t lives at ``cache[page_table[b, t // S], t % S]``.
- ``s_t = sm_scale * (q . k_t)``, ``lse = ln(sum_t exp(s_t))``, ``o = sum_t exp(s_t - lse) * v_t``;
  an empty attended set gives ``o = 0`` and ``lse = -inf``.  Slots outside the attended set may hold
  anything, NaN included, and must not change the result.

The legitimate implementations (``LEGITIMATE_ORDERS``, which with the stock op set the band) are the
contract in fp32 with the token reduction in each order a decode kernel uses: one pass, one running
(max, sum, acc) state over blocks of 64 tokens, a tree of block states, and split-KV into 2..8 splits
merged by the standard (max, lse) merge of their normalized fp32 outputs; and with the scores' own
reduction over D split-K, as tensor-core kernels accumulate it: 2..8 pieces, or pieces of 16 (an MMA's
k-step), each an fp32 dot, added in order; and the scores as a Hopper tensor core computes them
(``tensor_core_k16``: block FMAs of 16 products, truncated and rounded toward zero,
``references/tensor_core.py``), the cache's raw elements against q and ``sm_scale * kv_scale`` applied to
the dot once, as tensor-core decode kernels (this one, FlashInfer's ``k_scale``) apply it.  lse ~ max s
carries the scores' error, so the reduction over D, and the arithmetic of its adds, are as much a kernel's
choice as the reduction over tokens.  Only the scores are taken on the tensor core's arithmetic: o is
bf16, 2^16 times coarser than the fp32 truncations of ``p @ v``.

The judge takes every order from one call (``LEGITIMATE_ORDERS.together``, ``attention_in_orders``): the rows
are gathered once, in groups of similar lengths, the scores of each kind computed once, and the orders that walk a
running state walk it together, each over its own scores; about 4,200 torch ops an example on GPU-shaped draws where
one order at a time took 38,700 (``docs/lab/pending/README.md``).

The truth is computed in float64 over exactly the attended tokens (gathered, never masked, so NaN
garbage cannot reach it); the reference is that truth rounded once to the contract's output dtypes.

Refused: the contract's Refuse line (shape/dtype mismatch, unsupported D, Hq not a multiple of Hkv;
Hkv = 0 is such a case) and non-tensors.  Everything else the signature allows is answered, among it:

- ``sm_scale`` a Python number or a one-element floating tensor.  The contract types ``kv_scale`` (a
  Python float) but not ``sm_scale``, whose only use is ``s_t = sm_scale * (q . k_t)``: a tensor there
  is an input the signature allows.  The kernel takes a Python number only (its own limit: dispatch
  runs the stock op for a tensor; a judged implementation may refuse it clearly).
- pages of S = 0 slots: no token has a slot, so every attended set is empty (o = 0, lse = -inf).

Decisions where the contract is silent (every implementation is judged by them):

- ``kv_scale`` multiplies every cache element whatever the cache dtype: an element's value is
  ``float(x) * kv_scale``.  (For bf16 caches the default 1.0 leaves it unchanged.)
- ``page_select``: duplicate entries count once; entries outside ``0..M-1`` (``-1`` padding, ``M``,
  negative values, ``2**31 - 1``) select nothing.  Selection order is irrelevant: attention is a sum.
- Tokens whose logical page would be ``>= M`` (``seq_lens[b] > M * S``) have no table entry and are
  not attended; ``seq_lens[b] <= 0`` attends nothing.  A table entry ``>= P`` is out of contract (it
  names memory that does not exist); the kernel ignores such pages, the reference raises.

How the kernel (``ops/attention/paged_decode.py``) counts a duplicate once without a device sync: it
sorts each row of ``page_select`` on the device (``torch.sort``: no host round trip, capturable in a
CUDA graph), then an entry counts when it lies in ``0..M-1`` and differs from its predecessor in
sorted order.  A small kernel makes that check for every entry of a row (each against its own
predecessor: no entry needs another's result) and resolves the counted ones to their pages; every
decode split then covers a fixed number of sorted entries, independent of the batch.  The reference
below does not sort: it marks the selected logical pages of a row in a
boolean set, which is the contract's "appears in" read literally.

Stock op: what a PyTorch user runs today — gather each row's pages, zero and mask the slots it must
not attend, ``scaled_dot_product_attention`` in bf16 (e4m3 caches dequantized to bf16 first);
SDPA does not return the log-sum-exp, so ``lse`` is ``logsumexp`` of the scores in fp32, from K
dequantized in fp32 (not SDPA's bf16 operand).
SDPA's cuDNN backend is excluded: it read misaligned memory at D=256 (see ``stock``).
"""
from __future__ import annotations

import dataclasses
import functools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from oracles.band_limit import BandLimit
from oracles.legitimate_orders import LegitimateOrders
from references import orders
from references.tensor_core import tensor_core_dot
from references.validation import (Refusal, refuse, require_dtype, require_ndim, require_number,
                                   require_same_device, require_shape, require_tensor)

HEAD_DIMS = (64, 128, 256)
CACHE_DTYPES = (torch.bfloat16, torch.float8_e4m3fn)


def validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None) -> None:
    for name, value in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("page_table", page_table),
                        ("seq_lens", seq_lens)):
        require_tensor(name, value)
    if page_select is not None:
        require_tensor("page_select", page_select)
    require_ndim("q", q, 3, "[B, Hq, D]")
    require_dtype("q", q, (torch.bfloat16,))
    require_ndim("k_cache", k_cache, 4, "[P, S, Hkv, D]")
    require_dtype("k_cache", k_cache, CACHE_DTYPES)
    require_ndim("v_cache", v_cache, 4, "[P, S, Hkv, D]")
    if v_cache.dtype != k_cache.dtype:
        raise TypeError(f"v_cache: dtype {str(v_cache.dtype).removeprefix('torch.')} differs from k_cache's "
                        f"{str(k_cache.dtype).removeprefix('torch.')} — pass both caches in one dtype")
    require_shape("v_cache", v_cache, k_cache.shape, "[P, S, Hkv, D] (k_cache's shape)")
    batch, query_heads, head_dim = q.shape
    _, page_size, kv_heads, cache_head_dim = k_cache.shape
    if head_dim not in HEAD_DIMS:
        raise refuse("q", f"head dim D = {head_dim}", f"D must be one of {', '.join(map(str, HEAD_DIMS))}")
    if cache_head_dim != head_dim:
        raise refuse("k_cache", f"head dim {cache_head_dim} differs from q's D = {head_dim}",
                     "pass caches of q's head dim")
    if kv_heads == 0:
        raise refuse("k_cache", "Hkv = 0 KV heads (dim 2)", "pass at least one KV head")
    if query_heads % kv_heads:
        raise refuse("q", f"Hq = {query_heads} is not a multiple of the caches' Hkv = {kv_heads}",
                     "grouped-query attention needs Hq % Hkv == 0")
    validate_metadata(batch, page_table, seq_lens, page_select)
    validate_sm_scale(sm_scale)
    require_number("kv_scale", kv_scale)
    require_same_device({"q": q, "k_cache": k_cache, "v_cache": v_cache, "page_table": page_table,
                         "seq_lens": seq_lens, "page_select": page_select})


def validate_sm_scale(sm_scale) -> None:
    """A number, or a one-element float tensor (the contract does not say "Python float" for sm_scale as it
    does for kv_scale, so a tensor is answered; kernels that need a host number declare it a limit)."""
    if isinstance(sm_scale, torch.Tensor):
        require_dtype("sm_scale", sm_scale, (torch.float32, torch.float64, torch.bfloat16, torch.float16))
        if sm_scale.numel() != 1:
            raise refuse("sm_scale", f"a tensor of {sm_scale.numel()} elements", "pass one number")
    else:
        require_number("sm_scale", sm_scale)


def validate_metadata(batch: int, page_table, seq_lens, page_select) -> None:
    """The page table, lengths and selection of a batch of B rows (tensors already checked to be tensors)."""
    require_ndim("page_table", page_table, 2, "[B, M]")
    require_dtype("page_table", page_table, (torch.int32,))
    if page_table.shape[0] != batch:
        raise refuse("page_table", f"{page_table.shape[0]} rows for a batch of B = {batch}", "pass one row per query")
    require_shape("seq_lens", seq_lens, (batch,), "[B]")
    require_dtype("seq_lens", seq_lens, (torch.int32,))
    if page_select is not None:
        require_ndim("page_select", page_select, 2, "[B, T]")
        require_dtype("page_select", page_select, (torch.int32,))
        if page_select.shape[0] != batch:
            raise refuse("page_select", f"{page_select.shape[0]} rows for a batch of B = {batch}",
                         "pass one row of selected logical pages per query")


def attended_tokens(page_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int,
                    page_select: torch.Tensor | None = None) -> torch.Tensor:
    """The attended set as a ``[B, M * S]`` mask over each row's logical token positions."""
    batch, pages_per_row = page_table.shape
    token = torch.arange(pages_per_row * page_size, device=page_table.device)
    logical_page = token // page_size
    attended = (token[None, :] < seq_lens[:, None].long()) & (page_table[:, logical_page] >= 0)
    if page_select is not None:
        in_range = (page_select >= 0) & (page_select < pages_per_row)
        chosen = torch.zeros(batch, pages_per_row + 1, dtype=torch.bool, device=page_table.device)
        chosen.scatter_(1, torch.where(in_range, page_select, pages_per_row).long(), True)
        attended &= chosen[:, logical_page]
    return attended


def scale_value(sm_scale) -> float:
    """``sm_scale`` as a Python float (a one-element tensor is read: a sync, which the reference may make)."""
    return float(sm_scale)


def truth(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """(o, lse) in float64 over exactly the attended tokens of each row."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return attention_truth(q, k_cache, v_cache, page_table, seq_lens, scale_value(sm_scale), kv_scale, page_select)


def attention_truth(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select):
    """``truth`` on arguments already validated, for caches of any float dtype (the NVFP4-KV contract
    passes its decoded float32 caches)."""
    o, lse = _empty_outputs(q, torch.float64)
    for rows in attended_rows(q, k_cache, v_cache, page_table, seq_lens, kv_scale, page_select, torch.float64, 1):
        scores = rows.masked(element_scores(rows.q, rows.k, kv_scale, sm_scale))
        row_lse = scores.logsumexp(dim=-1)                                  # [R, Hkv, G]
        weights = (scores - row_lse[..., None]).exp()                       # 0 past a row's tokens
        rows.store(o, lse, torch.einsum("rkgn,rnkd->rkgd", weights, rows.v), row_lse)
    return o, lse


def _empty_outputs(q: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of rows that attend nothing: 0 and -inf."""
    batch, query_heads, head_dim = q.shape
    return (torch.zeros(batch, query_heads, head_dim, dtype=dtype, device=q.device),
            torch.full((batch, query_heads), -torch.inf, dtype=dtype, device=q.device))


def one_dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``q . k`` over D by one matmul a row and KV head: q ``[R, Hkv, G, D]``, k ``[R, n, Hkv, D]`` ->
    ``[R, Hkv, G, n]``."""
    return torch.einsum("rkgd,rnkd->rkgn", q, k)


def element_scores(q, k, kv_scale, sm_scale, dot=one_dot):
    """The contract read literally: ``sm_scale * dot(q, k_t)`` of the elements ``float(x) * kv_scale``
    (``k`` the cache's raw elements ``[R, n, Hkv, D]`` in the working dtype)."""
    return dot(q, k * kv_scale) * sm_scale


@dataclasses.dataclass(frozen=True)
class AttendedRows:
    """Rows of a batch with their attended tokens gathered, in the working dtype: ``q [R, Hkv, G, D]``, the
    cache's raw K elements ``k [R, n, Hkv, D]`` and V's values ``float(v) * kv_scale`` ``v [R, n, Hkv, D]``;
    a row's tokens in position order, then zeros up to the longest row's n (``valid [R, n]``)."""

    index: torch.Tensor     # the rows' places in the batch [R]
    lengths: list[int]      # attended tokens of each row, all > 0
    valid: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor

    def masked(self, scores: torch.Tensor) -> torch.Tensor:
        """Scores ``[..., R, Hkv, G, n]`` with -inf past each row's tokens (a where: a padding slot's value
        never reaches a sum)."""
        return torch.where(self.valid[:, None, None, :], scores,
                           torch.full((), -torch.inf, dtype=scores.dtype, device=scores.device))

    def store(self, o: torch.Tensor, lse: torch.Tensor, rows_o: torch.Tensor, rows_lse: torch.Tensor) -> None:
        """Write the rows' ``[R, Hkv, G, D]`` outputs and ``[R, Hkv, G]`` log-sum-exps into the batch's."""
        o[self.index] = rows_o.reshape(len(self.lengths), *o.shape[1:]).to(o.dtype)
        lse[self.index] = rows_lse.reshape(len(self.lengths), lse.shape[1]).to(lse.dtype)


# gathered elements a group of rows may hold (k or v, and each stacked copy of the scores): rows of a
# long context are gathered apart from short ones, the rest together (a few launches a group, not a row)
ROWS_ELEMENTS = 2**25


def attended_rows(q, k_cache, v_cache, page_table, seq_lens, kv_scale, page_select, dtype: torch.dtype,
                  stacked_scores: int):
    """The rows that attend anything, in groups (``AttendedRows``) gathered over exactly their attended
    tokens (never masked, so NaN garbage cannot reach them).  A group holds rows of lengths within a factor
    of two of its longest (its padding stays below its tokens) and at most ``ROWS_ELEMENTS`` gathered
    elements in k, v and ``stacked_scores`` copies of the scores."""
    batch, query_heads, head_dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    attended = attended_tokens(page_table, seq_lens, page_size, page_select)
    lengths = attended.sum(dim=1).tolist()
    by_length = sorted((row for row in range(batch) if lengths[row]), key=lambda row: -lengths[row])
    per_token = max(kv_heads * head_dim, stacked_scores * query_heads)
    start = 0
    while start < len(by_length):
        longest = lengths[by_length[start]]
        end = start + 1
        while (end < len(by_length) and 2 * lengths[by_length[end]] >= longest
               and (end + 1 - start) * longest * per_token <= ROWS_ELEMENTS):
            end += 1
        yield _gathered(q, k_cache, v_cache, page_table, attended, by_length[start:end],
                        [lengths[row] for row in by_length[start:end]], kv_scale, dtype)
        start = end


def _gathered(q, k_cache, v_cache, page_table, attended, rows: list[int], lengths: list[int], kv_scale,
              dtype) -> AttendedRows:
    _, page_size, kv_heads, head_dim = k_cache.shape
    index = torch.tensor(rows, dtype=torch.long, device=q.device)
    longest = lengths[0]
    # a row's attended positions first, in order (a stable sort of "not attended")
    token = torch.sort((~attended[index]).to(torch.uint8), dim=1, stable=True).indices[:, :longest]
    valid = torch.arange(longest, device=q.device)[None, :] < torch.tensor(lengths, device=q.device)[:, None]
    physical = torch.where(valid, page_table[index[:, None], token // page_size].long(), 0)
    slot = torch.where(valid, token % page_size, 0)
    zero = torch.zeros((), dtype=dtype, device=q.device)

    def gather(cache):
        return torch.where(valid[:, :, None, None], cache[physical, slot].to(dtype), zero)   # [R, n, Hkv, D]

    group = q.shape[1] // kv_heads
    return AttendedRows(index, lengths, valid, q[index].to(dtype).view(len(rows), kv_heads, group, head_dim),
                        gather(k_cache), gather(v_cache) * kv_scale)


# -- the legitimate implementations: fp32 attention in the orders decode kernels use ---------------------
BLOCK_TOKENS = 64   # tokens a decode kernel's inner loop takes at a time (BLOCK_N of sglang's and FlashInfer's)


def _partial(scores: torch.Tensor, v: torch.Tensor, equation: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(max, sum of exp(s - max), sum of exp(s - max) v) over the last axis of ``scores``, the values
    contracted with the weights by ``equation``; -inf scores weigh 0."""
    top = scores.amax(dim=-1)
    weights = torch.exp(scores - top[..., None])
    return top, weights.sum(dim=-1), torch.einsum(equation, weights, v)


def _rescaled(first, second):
    """Two partials merged by their running maxima (online softmax)."""
    (top_a, sum_a, acc_a), (top_b, sum_b, acc_b) = first, second
    top = torch.maximum(top_a, top_b)
    scale_a, scale_b = torch.exp(top_a - top), torch.exp(top_b - top)
    return top, sum_a * scale_a + sum_b * scale_b, acc_a * scale_a[..., None] + acc_b * scale_b[..., None]


def _kept(merged, state, live: torch.Tensor):
    """``merged`` where ``live`` (``[..., R, 1, 1]``, aligned with a partial's ``[..., R, Hkv, G]``), ``state``
    elsewhere."""
    (top, total, acc), (old_top, old_total, old_acc) = merged, state
    return (torch.where(live, top, old_top), torch.where(live, total, old_total),
            torch.where(live[..., None], acc, old_acc))


def _finished(partial) -> tuple[torch.Tensor, torch.Tensor]:
    top, total, acc = partial
    return acc / total[..., None], top + torch.log(total)


def _one_pass(scores, rows: AttendedRows):
    return _finished(_partial(scores, rows.v, "rkgn,rnkd->rkgd"))


def _online_blocks(stacked_scores, rows: AttendedRows):
    """One running (max, sum, acc) state walking each row's blocks of ``BLOCK_TOKENS`` in order, for every
    scores ``[X, R, Hkv, G, n]`` at once; a row's state stops at its last block."""
    blocks = -(-torch.tensor(rows.lengths) // BLOCK_TOKENS)
    state = None
    for first in range(0, rows.valid.shape[1], BLOCK_TOKENS):
        step = slice(first, first + BLOCK_TOKENS)
        part = _partial(stacked_scores[..., step], rows.v[:, step], "xrkgn,rnkd->xrkgd")
        if state is None:
            state = part
            continue
        merged = _rescaled(state, part)
        index = first // BLOCK_TOKENS
        if index < int(blocks.min()):
            state = merged
        else:   # a row past its last block keeps its state (its block is all -inf: NaN once merged)
            state = _kept(merged, state, (index < blocks).to(rows.valid.device)[:, None, None])
    return _finished(state)


def _tree_blocks(scores, rows: AttendedRows):
    """Each row's block states merged in a tree, neighbours level by level (an odd one out carried up)."""
    width = rows.valid.shape[1]
    blocks = -(-width // BLOCK_TOKENS)
    padded = F.pad(scores, (0, blocks * BLOCK_TOKENS - width), value=-torch.inf)
    values = F.pad(rows.v, (0, 0, 0, 0, 0, blocks * BLOCK_TOKENS - width))
    parts = _partial(padded.unflatten(-1, (blocks, BLOCK_TOKENS)), values.unflatten(1, (blocks, BLOCK_TOKENS)),
                     "rkgbn,rbnkd->rkgbd")
    parts = tuple(part.movedim(3, 0) for part in parts)                    # blocks first
    count = -(-torch.tensor(rows.lengths) // BLOCK_TOKENS)                 # a row's blocks at this level
    while parts[0].shape[0] > 1:
        pairs = parts[0].shape[0] // 2
        evens = tuple(part[0:2 * pairs:2] for part in parts)
        odds = tuple(part[1:2 * pairs:2] for part in parts)
        paired = (2 * torch.arange(pairs)[:, None] + 1 < count[None, :]).to(rows.valid.device)   # [pairs, R]
        merged = _kept(_rescaled(evens, odds), evens, paired[:, :, None, None])
        parts = tuple(torch.cat((new, part[2 * pairs:])) for new, part in zip(merged, parts))
        count = -(-count // 2)
    return _finished(tuple(part[0] for part in parts))


def _split_kv(scores, rows: AttendedRows, splits: int):
    """Each row's tokens in ``splits`` contiguous splits of ``ceil(n / splits)`` (the last ones shorter or
    empty), each one pass, merged by (max, lse) in split order."""
    lengths = torch.tensor(rows.lengths)
    span = -(-lengths // splits)                                            # [R]
    position = torch.arange(splits)[None, :, None] * span[:, None, None] + torch.arange(int(span.max()))
    inside = (torch.arange(int(span.max())) < span[:, None, None]) & (position < lengths[:, None, None])
    device = rows.valid.device
    position, inside = position.to(device), inside.to(device)
    index = torch.where(inside, position, 0).flatten(1)                    # [R, splits * span]
    picked = scores.gather(-1, index[:, None, None, :].expand(*scores.shape[:-1], -1)).unflatten(-1, inside.shape[1:])
    picked = torch.where(inside[:, None, None], picked, torch.full((), -torch.inf, dtype=picked.dtype, device=device))
    values = rows.v.gather(1, index[:, :, None, None].expand(-1, -1, *rows.v.shape[2:])).unflatten(1, inside.shape[1:])
    outputs, lses = _finished(_partial(picked, values, "rkgsn,rsnkd->rkgsd"))   # [R, Hkv, G, splits(, D)]
    exists = inside[:, :, 0][:, None, None, :]                             # a split with a token
    top = torch.where(exists, lses, -torch.inf).amax(dim=-1)
    weights = torch.exp(lses - top[..., None])
    total, o = weights[..., 0], None
    for split in range(1, splits):
        total = torch.where(exists[..., split], total + weights[..., split], total)
    for split in range(splits):
        term = outputs[..., split, :] * (weights[..., split] / total)[..., None]
        o = term if o is None else torch.where(exists[..., split, None], o + term, o)
    return o, top + torch.log(total)


# tensor-core kernels add one 16-wide partial dot (an MMA's k-step) to the fp32 scores at a time
MMA_K = 16


def split_dot(q: torch.Tensor, k: torch.Tensor, chunks: int | None) -> torch.Tensor:
    """``q . k`` split-K over D: ``chunks`` contiguous pieces (None: pieces of ``MMA_K``), each by one fp32
    matmul, their partial dots then added in order, rounding after each addition."""
    head_dim = q.shape[-1]
    length = MMA_K if chunks is None else -(-head_dim // chunks)
    total = None
    for first in range(0, head_dim, length):
        part = one_dot(q[..., first:first + length], k[..., first:first + length])
        total = part if total is None else total + part
    return total


# float64 elements of one block FMA's broadcast terms [R, Hkv, G, tokens, 16] at a time: a 131072-token
# row with 16 query heads per KV head would otherwise take gigabytes a temporary
TENSOR_CORE_TERMS = 2**24


def tensor_core_scores(q, k, kv_scale, sm_scale):
    """The scores as a Hopper tensor-core decode kernel makes them: ``q . k`` of the raw elements by block
    FMAs of 16 (``references/tensor_core.py``; bf16 q and bf16 or e4m3 elements are all bf16 numbers), then
    one fp32 multiplication by ``sm_scale * kv_scale``.  Tokens are independent dots, taken in slices."""
    rows, kv_heads, group, _ = q.shape
    scale = torch.tensor(sm_scale * kv_scale, dtype=torch.float32, device=q.device)
    keys = k.permute(0, 2, 1, 3)[:, :, None, :, :]                          # [R, Hkv, 1, n, D]
    tokens = max(1, TENSOR_CORE_TERMS // (rows * kv_heads * group * MMA_K))
    dots = [tensor_core_dot(q[:, :, :, None, :], keys[:, :, :, first:first + tokens])
            for first in range(0, keys.shape[3], tokens)]
    return torch.cat(dots, dim=-1) * scale


TOKEN_ORDERS = ("one_pass", "online_blocks", "tree_blocks", *(f"split_kv_{c}" for c in orders.SPLITS))
# the scores' reduction over D, split-K (c pieces, or MMA_K-wide pieces), under the running block state
SCORE_ORDERS = (*(f"split_d_{c}" for c in orders.SPLITS), f"split_d_by_{MMA_K}")
ATTENTION_ORDERS = TOKEN_ORDERS + SCORE_ORDERS
# the scores on a tensor core's arithmetic: for this contract's 16-bit caches, not the NVFP4-KV contract's
# decoded fp32 ones
TENSOR_CORE_ORDER = f"tensor_core_k{MMA_K}"
ELEMENT = "element"   # the scores of the token orders: one fp32 matmul over D


def _scores_of(kind: str):
    """The scores named ``kind``: ``ELEMENT``, a score order (split-K over D) or the tensor core's."""
    if kind == ELEMENT:
        return element_scores
    if kind == TENSOR_CORE_ORDER:
        return tensor_core_scores
    chunks = None if kind == f"split_d_by_{MMA_K}" else int(kind.removeprefix("split_d_"))
    return functools.partial(element_scores, dot=functools.partial(split_dot, chunks=chunks))


def _token_order(order: str) -> tuple[str, str]:
    """(the token order, the scores' kind) a named legitimate order stands for."""
    if order in TOKEN_ORDERS:
        return order, ELEMENT
    if order in SCORE_ORDERS or order == TENSOR_CORE_ORDER:
        return "online_blocks", order
    raise ValueError(f"order: {order!r} is none of {(*ATTENTION_ORDERS, TENSOR_CORE_ORDER)}")


def attention_in_orders(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select, names,
                        dtype: torch.dtype = torch.float32) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The contract in fp32 in every order of ``names`` (of ``ATTENTION_ORDERS`` and ``TENSOR_CORE_ORDER``),
    ``{name: (o bf16, lse fp32)}``: the scores ``sm_scale * (q . k)`` by an fp32 matmul with the token
    reduction in one pass, one running state over blocks of ``BLOCK_TOKENS``, a tree of block states, or
    split-KV into 2..8 contiguous splits merged by (max, lse); or the scores' dot split-K over D
    (``split_dot``), or on a tensor core's arithmetic, under the running block state.  The orders share the
    gathered rows and their scores; the running-state orders walk their blocks together, each with its own
    scores (a launch a block for all of them, not one each).  In fp32 the contract's working precision, o
    rounded to bf16; in another ``dtype`` (float64: the bookkeeping checked against the truth) o and lse in
    it.  Arguments already validated."""
    parts = {name: _token_order(name) for name in names}
    online = [kind for token, kind in parts.values() if token == "online_blocks"]
    kinds = list(dict.fromkeys(kind for _, kind in parts.values()))
    results = {name: _empty_outputs(q, dtype) for name in names}
    for rows in attended_rows(q, k_cache, v_cache, page_table, seq_lens, kv_scale, page_select, dtype,
                              max(1, len(online))):
        scores = {kind: rows.masked(_scores_of(kind)(rows.q, rows.k, kv_scale, sm_scale)) for kind in kinds}
        walked = _online_blocks(torch.stack([scores[kind] for kind in online]), rows) if online else None
        for name, (token, kind) in parts.items():
            if token == "online_blocks":
                o, lse = walked[0][online.index(kind)], walked[1][online.index(kind)]
            elif token == "one_pass":
                o, lse = _one_pass(scores[kind], rows)
            elif token == "tree_blocks":
                o, lse = _tree_blocks(scores[kind], rows)
            else:
                o, lse = _split_kv(scores[kind], rows, int(token.removeprefix("split_kv_")))
            rows.store(*results[name], o, lse)
    if dtype != torch.float32:
        return results
    return {name: (o.to(torch.bfloat16), lse) for name, (o, lse) in results.items()}


ORDER_NAMES = (*ATTENTION_ORDERS, TENSOR_CORE_ORDER)


def paged_decode_in_orders(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """Every legitimate order's (o, lse), computed together."""
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return attention_in_orders(q, k_cache, v_cache, page_table, seq_lens, scale_value(sm_scale), kv_scale,
                               page_select, ORDER_NAMES)


LEGITIMATE_ORDERS = LegitimateOrders.computed_together(paged_decode_in_orders, ORDER_NAMES)
# lse ~ max s for a peaked row, so it carries the scores' own fp32 error: on large-score rows (terms of one
# sign, lse ~ 100 to 300) an fp32 dot over D is off by the rounding of its partial sums, and a batched matmul's
# order is its own: the stock op measured 16.6 ULP on an H100 where the row alone is 1.56 (a band of 33.1);
# twice the widest band measured (docs/band-limits.md)
BAND_LIMIT = BandLimit(64.0, "lse inherits the fp32 error of the scores q . k (D <= 256 terms of one sign "
                             "on large-score rows): 16.6 ULP measured for the stock op's batched matmul, H100")


def paged_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    o, lse = truth(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return o.to(torch.bfloat16), lse.to(torch.float32)


def _pages_read(page_table: torch.Tensor, page_select: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The logical pages a user would gather per row ``[B, J]``, and which of them count: all M pages
    when dense; the selection's in-range entries, each page once, when sparse."""
    batch, pages_per_row = page_table.shape
    if page_select is None:
        logical = torch.arange(pages_per_row, device=page_table.device).expand(batch, pages_per_row)
        return logical, torch.ones_like(logical, dtype=torch.bool)
    logical = page_select.long()
    in_range = (logical >= 0) & (logical < pages_per_row)
    ordered, order = torch.where(in_range, logical, -1).sort(dim=1, stable=True)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    counted = torch.zeros_like(first).scatter_(1, order, first) & in_range
    return logical, counted


def stock(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    """Gather + masked SDPA in bf16 (o) and an fp32 logsumexp of the same scores (lse).

    SDPA runs on contiguous operands with the cuDNN backend excluded (flash, memory-efficient or math
    stay: torch's own choice among them).  Why: on the H200 (torch 2.11, cuDNN 9) the battery's
    ``dense_bf16_kv`` cell crashed the worker with "CUDA misaligned address" inside this stock op;
    isolating the shrunk recipe (D=256, one KV head, group 16, pages of 128, a q padded past its last
    dim) and running it under ``compute-sanitizer --tool memcheck`` put the fault in cuDNN's
    ``cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x256`` kernel: a
    16-byte global read 8 bytes off alignment inside a 16,576-byte allocation — q's (2 rows x 16
    heads x 259 bf16: heads 518 bytes apart), which cuDNN read as if its heads were 16-byte aligned.
    Both measures only choose which torch kernel runs and on what copy; the composition, and what it
    computes, are the ones a PyTorch user writes, and nothing here syncs with the host, so it still
    captures in a CUDA graph.
    """
    validate(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return stock_attention(q, k_cache, v_cache, page_table, seq_lens, scale_value(sm_scale), kv_scale, page_select)


def stock_attention(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select,
                    operand_dtype=torch.bfloat16):
    """``stock`` on arguments already validated, for caches of any float dtype, SDPA's operands in
    ``operand_dtype`` (q upcast exactly, o rounded to bf16): bf16 for this contract's caches, as a
    PyTorch user passes a bf16 or e4m3 cache (exact at ``kv_scale`` 1; another scale rounds each
    ``float(k) * kv_scale`` to bf16, SDPA's operand); float32 for the NVFP4-KV contract's decoded float32
    caches, whose values are in general not bf16 numbers."""
    batch, query_heads, head_dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    logical, counted = _pages_read(page_table, page_select)
    pages = logical.shape[1]
    if batch == 0 or pages == 0 or page_table.shape[1] == 0 or page_size == 0:
        return (torch.zeros(batch, query_heads, head_dim, dtype=torch.bfloat16, device=q.device),
                torch.full((batch, query_heads), -torch.inf, device=q.device))
    physical = page_table.gather(1, logical.clamp(0, page_table.shape[1] - 1))
    counted &= physical >= 0
    token = logical[:, :, None] * page_size + torch.arange(page_size, device=q.device)
    attend = (counted[:, :, None] & (token < seq_lens[:, None, None])).reshape(batch, pages * page_size)

    def gather(cache, dtype=torch.bfloat16):
        x = cache[physical.clamp(min=0).long()]                             # [B, J, S, Hkv, D]
        if cache.dtype != dtype or kv_scale != 1.0:
            x = (x.float() * kv_scale).to(dtype)
        x = x.reshape(batch, pages * page_size, kv_heads, head_dim).transpose(1, 2)
        return torch.where(attend[:, None, :, None], x, torch.zeros((), dtype=x.dtype, device=x.device))

    k, v = gather(k_cache, operand_dtype).contiguous(), gather(v_cache, operand_dtype).contiguous()
    mask = attend[:, None, None, :]
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        o = F.scaled_dot_product_attention(q[:, :, None, :].to(operand_dtype).contiguous(), k, v, attn_mask=mask,
                                           scale=sm_scale, enable_gqa=True)[:, :, 0].to(torch.bfloat16)
    o = torch.where(attend.any(dim=1)[:, None, None], o, torch.zeros((), dtype=o.dtype, device=o.device))
    # the lse from K in fp32 (float(k) * kv_scale): rounding K to bf16 as SDPA's operand needs put this
    # lse 50 to 500 fp32 ULP off on e4m3 caches, a band that judged nothing (issue 24)
    scores = torch.matmul(q.float().view(batch, kv_heads, query_heads // kv_heads, head_dim),
                          gather(k_cache, torch.float32).transpose(-1, -2)) * sm_scale
    lse = scores.masked_fill(~mask, -torch.inf).logsumexp(dim=-1).reshape(batch, query_heads)
    return o, lse


# -- refused inputs -------------------------------------------------------------------------------
def _call(device, *, batch=2, query_heads=8, head_dim=64, pages=4, page_size=16, kv_heads=2,
          cache_dtype=torch.bfloat16, **overrides) -> dict:
    """A small legal call, with some arguments replaced."""
    cache = torch.zeros(pages, page_size, kv_heads, head_dim, device=device).to(cache_dtype)
    kwargs = {
        "q": torch.zeros(batch, query_heads, head_dim, dtype=torch.bfloat16, device=device),
        "k_cache": cache, "v_cache": cache.clone(),
        "page_table": torch.zeros(batch, 2, dtype=torch.int32, device=device),
        "seq_lens": torch.ones(batch, dtype=torch.int32, device=device),
        "sm_scale": head_dim ** -0.5, "kv_scale": 1.0, "page_select": None,
    }
    kwargs.update(overrides)
    return kwargs


def _int32(*shape, device):
    return torch.zeros(shape, dtype=torch.int32, device=device)


# the Refuse-line items of CONTRACTS.md the rows enforce
MISMATCH, HEAD_DIM, GQA = "shape/dtype mismatch", "unsupported D", "Hq not a multiple of Hkv"

def metadata_refusals(call, clause: str) -> tuple[Refusal, ...]:
    """Refusals of the page table, lengths and selection, for a contract whose ``call(device, **override)``
    makes a legal call of batch 2 (``paged_decode`` and ``paged_decode_nvfp4kv``)."""
    return (
        Refusal("int64 page_table", lambda d: call(d, page_table=torch.zeros(2, 2, dtype=torch.int64, device=d)),
                "page_table", TypeError, clause=clause),
        Refusal("1-D page_table", lambda d: call(d, page_table=_int32(2, device=d)), "page_table", clause=clause),
        Refusal("page_table of another batch", lambda d: call(d, page_table=_int32(3, 2, device=d)), ("page_table", "q"),
                clause=clause),
        Refusal("int64 seq_lens", lambda d: call(d, seq_lens=torch.ones(2, dtype=torch.int64, device=d)),
                "seq_lens", TypeError, clause=clause),
        Refusal("seq_lens of another batch", lambda d: call(d, seq_lens=_int32(3, device=d)), ("seq_lens", "q"),
                clause=clause),
        Refusal("1-D page_select", lambda d: call(d, page_select=_int32(4, device=d)), "page_select", clause=clause),
        Refusal("int64 page_select", lambda d: call(d, page_select=torch.zeros(2, 4, dtype=torch.int64, device=d)),
                "page_select", TypeError, clause=clause),
        Refusal("page_select of another batch", lambda d: call(d, page_select=_int32(1, 4, device=d)),
                ("page_select", "q"), clause=clause),
    )


REFUSALS = (
    Refusal("2-D q", lambda d: _call(d, q=torch.zeros(2, 64, dtype=torch.bfloat16, device=d)), "q", clause=MISMATCH),
    Refusal("fp16 q", lambda d: _call(d, q=torch.zeros(2, 8, 64, dtype=torch.float16, device=d)), "q", TypeError,
            clause=MISMATCH),
    Refusal("head dim 96", lambda d: _call(d, head_dim=96), ("q", "k_cache"), clause=HEAD_DIM),
    Refusal("Hq not a multiple of Hkv", lambda d: _call(d, query_heads=6, kv_heads=4), ("q", "k_cache"), clause=GQA),
    Refusal("zero KV heads", lambda d: _call(d, kv_heads=0), ("k_cache", "q"), clause=GQA),
    Refusal("3-D k_cache", lambda d: _call(d, k_cache=torch.zeros(4, 16, 64, dtype=torch.bfloat16, device=d)),
            "k_cache", clause=MISMATCH),
    Refusal("fp32 caches", lambda d: _call(d, cache_dtype=torch.float32), ("k_cache", "v_cache"), TypeError,
            clause=MISMATCH),
    Refusal("e5m2 caches", lambda d: _call(d, cache_dtype=torch.float8_e5m2), ("k_cache", "v_cache"), TypeError,
            clause=MISMATCH),
    Refusal("v_cache dtype differs", lambda d: _call(d, v_cache=torch.zeros(4, 16, 2, 64, device=d).to(
        torch.float8_e4m3fn)), ("v_cache", "k_cache"), TypeError, clause=MISMATCH),
    Refusal("v_cache shape differs", lambda d: _call(d, v_cache=torch.zeros(4, 32, 2, 64, dtype=torch.bfloat16,
                                                                            device=d)), ("v_cache", "k_cache"),
            clause=MISMATCH),
    Refusal("caches of another head dim", lambda d: _call(d, k_cache=torch.zeros(4, 16, 2, 128, dtype=torch.bfloat16,
                                                                                 device=d),
                                                          v_cache=torch.zeros(4, 16, 2, 128, dtype=torch.bfloat16,
                                                                              device=d)),
            ("k_cache", "v_cache", "q"), clause=MISMATCH),
    *metadata_refusals(_call, MISMATCH),
    Refusal("q not a tensor", lambda d: _call(d, q=[[0.0] * 64]), "q", TypeError, clause="non-tensor"),
)
