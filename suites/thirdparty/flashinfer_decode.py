"""FlashInfer's paged decode (``flashinfer.BatchDecodeWithPagedKVCacheWrapper``, flashinfer-python 0.7.4, its
kernels compiled by FlashInfer's JIT with the GPU image's nvcc) as ``attention/paged_decode``, bf16 and e4m3
KV.  GPU only: FlashInfer has no CPU path, and the module raises ImportError where ``flashinfer`` is not
installed (``docs/thirdparty/flashinfer.md``: the carry plan, and the H200 queue that judges it).

FlashInfer's calling convention: the caches ``[P, S, Hkv, D]`` are its ``NHD`` layout as they are; each
row's pages are a CSR list (``indptr [B + 1]``, ``indices``, ``last_page_len [B]``: every listed page is
full but the row's last); ``plan()`` (host-side scheduling, once per decode step for all layers, with the
host copies it makes) then ``run(q, (k_cache, v_cache), k_scale, v_scale, return_lse=True)``.  It folds
``k_scale`` into ``sm_scale`` and multiplies the bf16 ``o`` by ``v_scale`` after the kernel; its ``lse`` is
base 2.  The wrapper is configured as vLLM's FlashInfer backend configures it (``use_tensor_cores=True``,
``backend="auto"``, ``kv_layout="NHD"``).

What the adapter does, none of FlashInfer's:
- the attended set as page lists without holes (``suites/thirdparty/paged_pages.py``), flattened to CSR on
  the device; ``plan()`` with them (the planning, FlashInfer's own host-side work, is timed with the glue:
  a serving engine plans once a step, not once a layer);
- ``kv_scale`` as both ``k_scale`` and ``v_scale`` (FlashInfer applies them to any cache dtype, as the
  contract does);
- ``lse`` times ln 2 (base 2 to natural); rows with an empty attended set: ``o = 0``, ``lse = -inf``
  (whatever FlashInfer writes there: the H200 queue prints what it writes);
- ``sm_scale`` a tensor: refused with a ValueError naming it (``plan()`` takes a host float);
- q or a cache whose rows are not 16-byte aligned (a stride but the last, or the start, not a multiple of 16
  bytes: a legal strided view such as a head dim padded by three elements): refused with a ValueError naming
  it.  FlashInfer reads rows as 16-byte vectors and does not check: on the H200 such a view is "CUDA error:
  misaligned address", a sticky error that ends the process (``docs/thirdparty/flashinfer.md``).
"""
from __future__ import annotations

import math

import flashinfer
import torch

from suites.thirdparty import staging
from suites.thirdparty.paged_pages import attended_pages, require_aligned_rows, require_host_sm_scale

PACKAGE = "flashinfer-python"
JUDGED = {"paged_decode": "paged_decode"}
ADAPTER_CODE = {"paged_decode": "the attended set as CSR page lists and plan() on them; lse from base 2 to natural; "
                                "o = 0, lse = -inf on empty rows; a tensor sm_scale and rows not 16-byte "
                                "aligned refused"}
WORKSPACE_BYTES = 128 * 2**20   # FlashInfer's documented size for the split-KV scratch

_workspaces: dict[torch.device, torch.Tensor] = {}


def _wrapper(device: torch.device):
    if device not in _workspaces:
        _workspaces[device] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return flashinfer.BatchDecodeWithPagedKVCacheWrapper(_workspaces[device], "NHD", use_tensor_cores=True,
                                                        backend="auto")


def _csr(listed, device):
    batch, width = listed.pages.shape
    indptr = torch.zeros(batch + 1, dtype=torch.int32, device=device)
    indptr[1:] = listed.counts.cumsum(0)
    column = torch.arange(width, device=device)
    position = torch.where(column[None, :] < listed.counts[:, None], indptr[:-1, None].long() + column[None, :],
                           batch * width)   # past the end: dropped
    indices = torch.zeros(batch * width + 1, dtype=torch.int32, device=device)
    indices.scatter_(0, position.reshape(-1), listed.pages.reshape(-1))
    return indptr, indices[:batch * width]


def _prepare(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    require_host_sm_scale(sm_scale, "FlashInfer's plan()")
    for name, tensor in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        require_aligned_rows(name, tensor)
    batch, query_heads, head_dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    listed = attended_pages(page_table, seq_lens, page_size, page_select)
    indptr, indices = _csr(listed, q.device)
    wrapper = _wrapper(q.device)
    if batch:
        wrapper.plan(indptr, indices, listed.last_page_len, query_heads, kv_heads, head_dim, page_size,
                     q_data_type=q.dtype, kv_data_type=k_cache.dtype, o_data_type=torch.bfloat16,
                     sm_scale=float(sm_scale))
    return {"wrapper": wrapper, "q": q, "caches": (k_cache, v_cache), "kv_scale": float(kv_scale),
            "empty": listed.counts == 0}


def _call(prepared):
    q = prepared["q"]
    if q.shape[0] == 0:
        return None
    return prepared["wrapper"].run(q, prepared["caches"], k_scale=prepared["kv_scale"], v_scale=prepared["kv_scale"],
                                   return_lse=True)


def _finish(prepared, raw):
    q, empty = prepared["q"], prepared["empty"]
    if raw is None:
        return (torch.zeros(q.shape, dtype=torch.bfloat16, device=q.device),
                torch.full(q.shape[:2], -torch.inf, dtype=torch.float32, device=q.device))
    o, lse_base2 = raw
    o = torch.where(empty[:, None, None], torch.zeros((), dtype=o.dtype, device=o.device), o)
    return o, torch.where(empty[:, None], -torch.inf, lse_base2.float() * math.log(2.0))


def paged_decode(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0, page_select=None):
    prepared = _prepare(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return _finish(prepared, _call(prepared))


paged_decode.stages = staging.stages(_prepare, _call, _finish)
