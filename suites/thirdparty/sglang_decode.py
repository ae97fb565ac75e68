"""SGLang's Triton decode attention (``sglang/srt/layers/attention/triton_ops/decode_attention.py``,
``decode_attention_fwd``; adapted there from LightLLM) as ``attention/paged_decode``.

SGLang's kernel reads a token-indexed KV buffer ``[tokens, Hkv, D]`` through ``kv_indptr``/``kv_indices``
(page size 1), splits each row's tokens over ``num_kv_splits`` programs and combines them in a second
kernel.  It returns ``o`` only; each split's log-sum-exp is left in its scratch buffer.  What the
adapter does, none of it SGLang's:

- loads the kernel module alone: SGLang's package ``__init__`` imports its whole serving stack, so
  the adapter registers a stand-in ``sglang.srt.utils`` whose ``is_hip()`` is False before loading it;
- views the paged caches ``[P, S, Hkv, D]`` as ``[P * S, Hkv, D]`` and builds the token indices of
  each row's attended set on the device (no host sync): tokens ``t < seq_lens[b]`` on a valid page
  (``page_table >= 0``, logical page ``< M``, and in ``page_select[b]`` when given), slot
  ``page_table[b, t // S] * S + t % S``;
- 8 KV splits per row (SGLang's backend picks a count per batch; any count is the same function);
- ``lse``: ``logsumexp`` over the splits' log-sum-exps (empty splits hold ``-inf``);
- rows with an empty attended set: ``o = 0`` (SGLang's combine divides 0 by 0 there).
- ``sm_scale`` a tensor: refused with a ValueError naming it (SGLang takes a host float: a tensor was a
  Triton error that hid the numbers of the rest of the cell; ``paged_pages.require_host_sm_scale``).
``kv_scale`` goes where SGLang takes it: ``sm_scale * k_scale`` for the scores, ``v_scale`` on ``o``.
The glue is timed apart from SGLang's call (``suites/thirdparty/staging.py``).
"""
from __future__ import annotations

import importlib.util
import sys
import types

import torch

from suites.thirdparty import staging
from suites.thirdparty.paged_pages import require_host_sm_scale

PACKAGE = "sglang"
JUDGED = {"paged_decode": "paged_decode"}
ADAPTER_CODE = {"paged_decode": "token indices of the attended set, lse from the splits' lse, o = 0 on "
                                "empty rows, SGLang's serving stack left unloaded, a tensor sm_scale refused"}
KV_SPLITS = 8


def _load_decode_attention():
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sglang is not installed")
    if "sglang.srt.utils" not in sys.modules:
        utils = types.ModuleType("sglang.srt.utils")
        utils.is_hip = lambda: False
        sys.modules["sglang.srt.utils"] = utils
    path = f"{spec.submodule_search_locations[0]}/srt/layers/attention/triton_ops/decode_attention.py"
    module_spec = importlib.util.spec_from_file_location("sglang_decode_attention", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


decode_attention_fwd = _load_decode_attention().decode_attention_fwd


def _token_indices(page_table, seq_lens, page_size, page_select):
    """(kv_indptr int32[B + 1], kv_indices int32[B * M * S], tokens per row) of the attended sets."""
    batch, pages = page_table.shape
    device = page_table.device
    token = torch.arange(pages * page_size, device=device)
    page = page_table.long()[:, token // page_size]
    selected = torch.ones(batch, pages, dtype=torch.bool, device=device)
    if page_select is not None:
        entry = page_select.long()
        entry = torch.where((entry >= 0) & (entry < pages), entry, pages)
        selected = torch.zeros(batch, pages + 1, dtype=torch.bool, device=device).scatter_(1, entry, True)[:, :pages]
    attended = (token[None, :] < seq_lens.long()[:, None]) & (page >= 0) & selected[:, token // page_size]
    counts = attended.sum(dim=1)
    indptr = torch.zeros(batch + 1, dtype=torch.int32, device=device)
    indptr[1:] = counts.cumsum(0)
    position = indptr[:-1, None].long() + attended.long().cumsum(dim=1) - 1
    dump = batch * pages * page_size   # where unattended tokens are scattered: one slot past the end
    indices = torch.zeros(dump + 1, dtype=torch.int32, device=device)
    slot = (page * page_size + token[None, :] % page_size).to(torch.int32)
    indices.scatter_(0, torch.where(attended, position, dump).reshape(-1), slot.reshape(-1))
    return indptr, indices[:dump], counts


def _prepare(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    require_host_sm_scale(sm_scale, "SGLang's decode_attention_fwd")
    batch, query_heads, head_dim = q.shape
    pages, page_size, kv_heads, _ = k_cache.shape
    indptr, indices, counts = _token_indices(page_table, seq_lens, page_size, page_select)
    return {"q": q, "k": k_cache.reshape(pages * page_size, kv_heads, head_dim),
            "v": v_cache.reshape(pages * page_size, kv_heads, head_dim),
            "o": torch.empty(batch, query_heads, head_dim, dtype=torch.bfloat16, device=q.device),
            "indptr": indptr, "indices": indices,
            "logits": torch.empty(batch, query_heads, KV_SPLITS, head_dim, dtype=torch.float32, device=q.device),
            "split_lse": torch.full((batch, query_heads, KV_SPLITS), -torch.inf, dtype=torch.float32, device=q.device),
            "splits": torch.full((batch,), KV_SPLITS, dtype=torch.int32, device=q.device),
            "sm_scale": sm_scale, "kv_scale": kv_scale, "counts": counts}


def _call(prepared) -> None:
    if prepared["q"].shape[0]:
        decode_attention_fwd(prepared["q"], prepared["k"], prepared["v"], prepared["o"], prepared["indptr"],
                             prepared["indices"], prepared["logits"], prepared["split_lse"], prepared["splits"],
                             KV_SPLITS, prepared["sm_scale"], prepared["kv_scale"], prepared["kv_scale"])


def _finish(prepared, _):
    o = prepared["o"]
    empty = (prepared["counts"] == 0)[:, None, None]
    return (torch.where(empty, torch.zeros((), dtype=o.dtype, device=o.device), o),
            torch.logsumexp(prepared["split_lse"], dim=-1))


def paged_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    prepared = _prepare(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return _finish(prepared, _call(prepared))


paged_decode.stages = staging.stages(_prepare, _call, _finish)
