"""Contract ``attention/paged_decode_nvfp4kv`` (band), in executable form.

``paged_decode_nvfp4kv(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens,
sm_scale, page_select=None) -> (o bf16[B, Hq, D], lse fp32[B, Hq])``: ``attention/paged_decode`` over
an NVFP4 KV cache (the seeds' GB300 target: NVFP4 KV, sparse GQA).

- ``k_packed``, ``v_packed``: uint8 ``[P, S, Hkv, D/2]``, two E2M1 codes a byte (element 2j in the low
  nibble); ``k_scales``, ``v_scales``: e4m3 ``[P, S, Hkv, D/16]``, one block scale per 16 elements of a
  head vector; ``kv_global_scale``: fp32, one element, the ENCODE scale.
- Each element decodes as the ``quant/nvfp4_quantize`` Dequant line,
  ``e2m1(code) * float(scale) * (1 / kv_global_scale)`` in float32 (``nvfp4_dequantize``), and those
  decoded K and V stand where ``paged_decode`` has ``float(k) * kv_scale``: the attended set, ``s_t``,
  ``lse``, ``o``, empty rows and garbage slots are ``paged_decode``'s (``references/attention/
  paged_decode.py`` states its decisions where the contract is silent; they hold here unchanged).

The truth decodes both caches and runs ``paged_decode``'s float64 truth over exactly the attended
tokens (gathered, never masked: a NaN code byte or NaN block scale in a slot no row attends cannot
reach it).  Values of ``kv_global_scale`` are not checked (a device sync): 0, inf or NaN are out of
the contract and the Dequant line is applied literally.

Decisions where the contract is silent:

- Pages of 0 slots (``S = 0``) are not refused (the Refuse line does not name them): no token lives
  anywhere, every row is empty.  ``Hkv = 0`` is refused under "Hq not a multiple of Hkv".
- ``sm_scale`` as in ``paged_decode``: a Python number or a one-element floating tensor (the contract
  does not type it); a string is a wrong type (the conventions' ``TypeError``).

Stock op: what a PyTorch user runs today — decode the whole cache with the Dequant line
(``nvfp4_dequantize``, float32), then ``paged_decode``'s stock path: gather, mask, bf16
``scaled_dot_product_attention`` (the decoded caches rounded to bf16 as an e4m3 cache is) and an fp32
``logsumexp`` of the same scores.  The legitimate implementations (``LEGITIMATE_ORDERS``) are
``paged_decode``'s fp32 attention in each of its token orders, over the same decoded caches.
"""
from __future__ import annotations

import torch

from oracles.legitimate_orders import LegitimateOrders
from references.attention import paged_decode as dense_contract
from references.formats.nvfp4 import NVFP4_BLOCK, nvfp4_dequantize
from references.validation import (Refusal, refuse, require_dtype, require_ndim,
                                   require_same_device, require_shape, require_tensor)

HEAD_DIMS = dense_contract.HEAD_DIMS
CODES_PER_BYTE = 2


def _require_cache(name: str, tensor, dtype: torch.dtype, layout: str, like=None) -> None:
    require_tensor(name, tensor)
    require_ndim(name, tensor, 4, layout)
    require_dtype(name, tensor, (dtype,))
    if like is not None:
        require_shape(name, tensor, like, layout)


def validate(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
             page_select=None) -> None:
    for name, value in (("q", q), ("page_table", page_table), ("seq_lens", seq_lens)):
        require_tensor(name, value)
    if page_select is not None:
        require_tensor("page_select", page_select)
    require_ndim("q", q, 3, "[B, Hq, D]")
    require_dtype("q", q, (torch.bfloat16,))
    batch, query_heads, head_dim = q.shape
    if head_dim not in HEAD_DIMS:
        raise refuse("q", f"head dim D = {head_dim}", f"D must be one of {', '.join(map(str, HEAD_DIMS))}")
    _require_cache("k_packed", k_packed, torch.uint8, "[P, S, Hkv, D/2]")
    pool, page_size, kv_heads, packed_bytes = k_packed.shape
    if packed_bytes * CODES_PER_BYTE != head_dim:
        raise refuse("k_packed", f"{packed_bytes} bytes per head vector for q's D = {head_dim}",
                     f"pass two E2M1 codes a byte: D/2 = {head_dim // CODES_PER_BYTE} bytes")
    scales_shape = (pool, page_size, kv_heads, head_dim // NVFP4_BLOCK)
    _require_cache("k_scales", k_scales, torch.float8_e4m3fn, "[P, S, Hkv, D/16] (one per 16 elements)", scales_shape)
    _require_cache("v_packed", v_packed, torch.uint8, "[P, S, Hkv, D/2] (k_packed's shape)", k_packed.shape)
    _require_cache("v_scales", v_scales, torch.float8_e4m3fn, "[P, S, Hkv, D/16] (k_scales' shape)", scales_shape)
    if kv_heads == 0 or query_heads % kv_heads:
        raise refuse("q", f"Hq = {query_heads} is not a multiple of the caches' Hkv = {kv_heads}",
                     "grouped-query attention needs Hq % Hkv == 0 (and Hkv >= 1)")
    require_tensor("kv_global_scale", kv_global_scale)
    require_dtype("kv_global_scale", kv_global_scale, (torch.float32,))
    if kv_global_scale.numel() != 1:
        raise refuse("kv_global_scale", f"has {kv_global_scale.numel()} elements (shape "
                                        f"{tuple(kv_global_scale.shape)})",
                     "pass one float32 element: the encode scale 448 * 6 / amax")
    dense_contract.validate_metadata(batch, page_table, seq_lens, page_select)
    dense_contract.validate_sm_scale(sm_scale)
    require_same_device({"q": q, "k_packed": k_packed, "k_scales": k_scales, "v_packed": v_packed,
                         "v_scales": v_scales, "kv_global_scale": kv_global_scale, "page_table": page_table,
                         "seq_lens": seq_lens, "page_select": page_select})


def decode_cache(packed: torch.Tensor, scales: torch.Tensor, kv_global_scale: torch.Tensor) -> torch.Tensor:
    """float32 ``[P, S, Hkv, D]``: every element by the Dequant line (garbage slots decode to garbage)."""
    *lead, packed_bytes = packed.shape
    head_dim = packed_bytes * CODES_PER_BYTE
    flat = nvfp4_dequantize(packed.reshape(-1, packed_bytes), scales.reshape(-1, head_dim // NVFP4_BLOCK),
                            kv_global_scale)
    return flat.reshape(*lead, head_dim)


def truth(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
          page_select=None):
    """(o, lse) in float64 over exactly the attended tokens, K and V decoded by the Dequant line."""
    validate(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale, page_select)
    k, v = decode_cache(k_packed, k_scales, kv_global_scale), decode_cache(v_packed, v_scales, kv_global_scale)
    return dense_contract.attention_truth(q, k, v, page_table, seq_lens, dense_contract.scale_value(sm_scale), 1.0,
                                         page_select)


def paged_decode_nvfp4kv(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens,
                         sm_scale, page_select=None):
    o, lse = truth(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
                   page_select)
    return o.to(torch.bfloat16), lse.to(torch.float32)


def paged_decode_nvfp4kv_in_orders(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens,
                                   sm_scale, page_select=None):
    """``paged_decode``'s fp32 attention in each of its orders over the caches decoded (once) by the Dequant
    line: ``{order: (o, lse)}``."""
    validate(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale, page_select)
    k, v = decode_cache(k_packed, k_scales, kv_global_scale), decode_cache(v_packed, v_scales, kv_global_scale)
    return dense_contract.attention_in_orders(q, k, v, page_table, seq_lens, dense_contract.scale_value(sm_scale),
                                              1.0, page_select, dense_contract.ATTENTION_ORDERS)


LEGITIMATE_ORDERS = LegitimateOrders.computed_together(paged_decode_nvfp4kv_in_orders, dense_contract.ATTENTION_ORDERS)
BAND_LIMIT = dense_contract.BAND_LIMIT   # the same lse, from the same fp32 scores


def stock(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
          page_select=None):
    """Decode the caches by the Dequant line, then ``paged_decode``'s stock gather + masked SDPA on the
    decoded float32 values.

    Not bf16 SDPA: a decoded element (E2M1 x e4m3 x 1 / kv_global_scale) is in general not a bf16
    number, and rounding K to bf16 moves large scores by up to 2^-9 of their size.  On the
    ``sparse_nvfp4_kv`` cell's large-score rows that put o 25.8 ULP from the truth on the CPU and 55.5
    on the H200 (docs/results/2026-12-02/certify_sm90_paged.log), where float32 SDPA is at 0.35: a
    different input, not a reduction order, and a band that judged nothing."""
    validate(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale, page_select)
    k, v = decode_cache(k_packed, k_scales, kv_global_scale), decode_cache(v_packed, v_scales, kv_global_scale)
    return dense_contract.stock_attention(q, k, v, page_table, seq_lens, dense_contract.scale_value(sm_scale), 1.0,
                                          page_select, operand_dtype=torch.float32)


# -- refused inputs (each row cites the clause of the contract's Refuse line it enforces) -----------
def _call(device, *, batch=2, query_heads=8, head_dim=64, pages=4, page_size=16, kv_heads=2, **overrides) -> dict:
    """A small legal call, with some arguments replaced."""
    packed = torch.zeros(pages, page_size, kv_heads, head_dim // 2, dtype=torch.uint8, device=device)
    scales = torch.zeros(pages, page_size, kv_heads, head_dim // NVFP4_BLOCK, device=device).to(torch.float8_e4m3fn)
    kwargs = {
        "q": torch.zeros(batch, query_heads, 64, dtype=torch.bfloat16, device=device),
        "k_packed": packed, "k_scales": scales, "v_packed": packed.clone(), "v_scales": scales.clone(),
        "kv_global_scale": torch.ones(1, device=device),
        "page_table": torch.zeros(batch, 2, dtype=torch.int32, device=device),
        "seq_lens": torch.ones(batch, dtype=torch.int32, device=device),
        "sm_scale": 0.125, "page_select": None,
    }
    kwargs.update(overrides)
    return kwargs


def _bytes(*shape, device, dtype=torch.uint8):
    return torch.zeros(shape, dtype=dtype, device=device)


def _scales(*shape, device, dtype=torch.float8_e4m3fn):
    return torch.zeros(shape, device=device).to(dtype)


# the Refuse-line items of CONTRACTS.md the rows enforce
MISMATCH = "shape/dtype mismatch (packed not uint8 with D/2, scales not e4m3 with D/16)"
HEAD_DIM, GQA, GLOBAL_SCALE = "unsupported D", "Hq not a multiple of Hkv", "kv_global_scale not one fp32 element"

REFUSALS = (
    Refusal("2-D q", lambda d: _call(d, q=torch.zeros(2, 64, dtype=torch.bfloat16, device=d)), "q", clause=MISMATCH),
    Refusal("fp16 q", lambda d: _call(d, q=torch.zeros(2, 8, 64, dtype=torch.float16, device=d)), "q", TypeError,
            clause=MISMATCH),
    Refusal("head dim 96", lambda d: _call(d, q=torch.zeros(2, 8, 96, dtype=torch.bfloat16, device=d),
                                           k_packed=_bytes(4, 16, 2, 48, device=d),
                                           v_packed=_bytes(4, 16, 2, 48, device=d),
                                           k_scales=_scales(4, 16, 2, 6, device=d),
                                           v_scales=_scales(4, 16, 2, 6, device=d)), ("q", "k_packed"),
            clause=HEAD_DIM),
    Refusal("Hq not a multiple of Hkv", lambda d: _call(d, query_heads=6, kv_heads=4), ("q", "k_packed"), clause=GQA),
    Refusal("zero KV heads", lambda d: _call(d, kv_heads=0), ("q", "k_packed"), clause=GQA),
    Refusal("int8 k_packed", lambda d: _call(d, k_packed=_bytes(4, 16, 2, 32, device=d, dtype=torch.int8)),
            "k_packed", TypeError, clause=MISMATCH),
    Refusal("k_packed of D bytes (unpacked codes)", lambda d: _call(d, k_packed=_bytes(4, 16, 2, 64, device=d)),
            ("k_packed", "q"), clause=MISMATCH),
    Refusal("3-D k_packed", lambda d: _call(d, k_packed=_bytes(4, 16, 64, device=d)), "k_packed", clause=MISMATCH),
    Refusal("v_packed of another shape", lambda d: _call(d, v_packed=_bytes(4, 32, 2, 32, device=d)),
            ("v_packed", "k_packed"), clause=MISMATCH),
    Refusal("int8 v_packed", lambda d: _call(d, v_packed=_bytes(4, 16, 2, 32, device=d, dtype=torch.int8)),
            "v_packed", TypeError, clause=MISMATCH),
    Refusal("fp32 k_scales", lambda d: _call(d, k_scales=_scales(4, 16, 2, 4, device=d, dtype=torch.float32)),
            "k_scales", TypeError, clause=MISMATCH),
    Refusal("e8m0-style uint8 v_scales", lambda d: _call(d, v_scales=_bytes(4, 16, 2, 4, device=d)), "v_scales",
            TypeError, clause=MISMATCH),
    Refusal("k_scales per 32 elements", lambda d: _call(d, k_scales=_scales(4, 16, 2, 2, device=d)),
            ("k_scales", "k_packed"), clause=MISMATCH),
    Refusal("v_scales of another pool", lambda d: _call(d, v_scales=_scales(5, 16, 2, 4, device=d)),
            ("v_scales", "k_scales"), clause=MISMATCH),
    Refusal("two-element kv_global_scale", lambda d: _call(d, kv_global_scale=torch.ones(2, device=d)),
            "kv_global_scale", clause=GLOBAL_SCALE),
    Refusal("bf16 kv_global_scale", lambda d: _call(d, kv_global_scale=torch.ones(1, dtype=torch.bfloat16,
                                                                                     device=d)),
            "kv_global_scale", TypeError, clause=GLOBAL_SCALE),
    Refusal("kv_global_scale as a float", lambda d: _call(d, kv_global_scale=1.0), "kv_global_scale", TypeError,
            clause="non-tensor"),
    *dense_contract.metadata_refusals(_call, clause=MISMATCH),
    Refusal("q not a tensor", lambda d: _call(d, q=[[0.0] * 64]), "q", TypeError, clause="non-tensor"),
    Refusal("k_scales not a tensor", lambda d: _call(d, k_scales=[1.0]), "k_scales", TypeError, clause="non-tensor"),
)
