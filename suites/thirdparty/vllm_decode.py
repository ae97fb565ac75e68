"""vLLM's Triton decode attention (``vllm/v1/attention/ops/triton_decode_attention.py``, ``decode_attention_fwd``,
vLLM 0.33.0, carried: ``suites/thirdparty/vendored.py``) as ``attention/paged_decode``.

vLLM adapted the kernel from SGLang's (itself from LightLLM) and added pages: it reads the paged caches
``[P, S, Hkv, D]`` directly through a block table ``req_to_token [B, pages]`` and a length ``b_seq_len``,
splits each row over ``num_kv_splits`` programs (a GQA group of up to 16 query heads a program, with
tensor-core dots, when ``Hq > Hkv``) and merges the splits in a second kernel that writes ``o`` and the
natural-log ``lse``.  vLLM's Triton MLA backend calls it; on an FP8 cache it dequantizes K and V to q's
dtype with per-tensor scale tensors (``k_scale``, ``v_scale``); on a bf16 cache it ignores them.

What the adapter does, none of it vLLM's:
- the attended set as a block table without holes (``suites/thirdparty/paged_pages.py``): the attended
  logical pages in ascending order and the attended token count as ``b_seq_len`` (vLLM's block tables
  have no invalid pages and no page selection);
- ``kv_scale``: as the scale tensors on an e4m3 cache; on a bf16 cache, folded into ``sm_scale`` and
  applied to the bf16 ``o`` in fp32 (a second rounding, exact for the powers of two the cells draw);
- ``num_kv_splits`` by vLLM's rule (``triton_mla.py``: the next power of two of ``max_seq_len // 512``,
  at most twice the SM count) with the table's capacity ``M * S`` as ``max_seq_len`` (the longest
  attended set a row can have: vLLM reads its own from host metadata, which would be a sync here), the
  H200's 132 SMs off a GPU;
- the buffers vLLM's caller allocates (``o`` bf16, ``lse`` fp32, the split scratch);
- rows with an empty attended set: ``o = 0`` (vLLM's merge divides 0 by 0 there).
- ``sm_scale`` a tensor: refused with a ValueError naming it (vLLM takes a host float; a tensor is a
  Triton compile error: ``paged_pages.require_host_sm_scale``).
"""
from __future__ import annotations

import torch

from suites.thirdparty import staging
from suites.thirdparty.paged_pages import attended_pages, require_host_sm_scale
from suites.thirdparty.vendored import load_module

PACKAGE = "vllm"
JUDGED = {"paged_decode": "paged_decode"}
ADAPTER_CODE = {"paged_decode": "the attended set as a block table without holes and its token counts; kv_scale "
                                "as scale tensors (e4m3) or folded into sm_scale and o (bf16); vLLM's split count "
                                "from the table's capacity; o = 0 on empty rows; a tensor sm_scale refused"}
MIN_WORK_PER_SPLIT, SPLIT_OCCUPANCY = 512, 2   # vLLM's, vllm/v1/attention/backends/mla/triton_mla.py
H200_SMS = 132

decode_attention_fwd = load_module("vllm", "vllm/v1/attention/ops/triton_decode_attention.py").decode_attention_fwd


def _num_kv_splits(capacity: int, device: torch.device) -> int:
    import triton

    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else H200_SMS
    return min(triton.next_power_of_2(max(1, capacity // MIN_WORK_PER_SPLIT)), SPLIT_OCCUPANCY * sms)


def _prepare(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    require_host_sm_scale(sm_scale, "vLLM's decode_attention_fwd")
    batch, query_heads, head_dim = q.shape
    page_size = k_cache.shape[1]
    listed = attended_pages(page_table, seq_lens, page_size, page_select)
    fp8 = k_cache.dtype == torch.float8_e4m3fn
    splits = _num_kv_splits(page_table.shape[1] * page_size, q.device)
    scale = torch.full((1,), kv_scale if fp8 else 1.0, dtype=torch.float32, device=q.device)
    return {"q": q, "k_buffer": k_cache, "v_buffer": v_cache,
            "o": torch.empty(batch, query_heads, head_dim, dtype=torch.bfloat16, device=q.device),
            "lse": torch.empty(batch, query_heads, dtype=torch.float32, device=q.device),
            "req_to_token": listed.pages, "b_seq_len": listed.tokens,
            "attn_logits": torch.empty(batch, query_heads, splits, head_dim + 1, dtype=torch.float32, device=q.device),
            "num_kv_splits": splits, "sm_scale": sm_scale if fp8 else sm_scale * kv_scale, "page_size": page_size,
            "k_scale": scale, "v_scale": scale,
            # the adapter's, for finish
            "empty": listed.counts == 0, "o_scale": 1.0 if fp8 else kv_scale}


def _call(prepared) -> None:
    if prepared["q"].shape[0]:
        decode_attention_fwd(**{name: value for name, value in prepared.items() if name not in ("empty", "o_scale")})


def _finish(prepared, _):
    o = prepared["o"]
    if prepared["o_scale"] != 1.0:
        o = (o.float() * prepared["o_scale"]).to(torch.bfloat16)
    o = torch.where(prepared["empty"][:, None, None], torch.zeros((), dtype=o.dtype, device=o.device), o)
    return o, prepared["lse"]


def paged_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    prepared = _prepare(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return _finish(prepared, _call(prepared))


paged_decode.stages = staging.stages(_prepare, _call, _finish)
