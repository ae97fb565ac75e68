"""Other implementations of ``paged_decode_nvfp4kv`` for the battery to judge: one correct, many wrong.

The correct one decodes the whole NVFP4 cache in fp32 (its own nibble split and scale broadcast,
not the reference's ``nvfp4_dequantize``) and attends with ``paged_decode``'s fp32 alternative
(``suites/attention/paged_decode_impls.decode_fp32``, scores summed in float64), row by row.  Each wrong one is that with one
bug an NVFP4 decode kernel has had, in the decode or in the attention; ``test_paged_decode_nvfp4kv.py``
names the oracle that must reject each.  The batch-invariance control is right to the band, so only
batch invariance can catch it.  One wrong implementation is wrong on a Hopper GPU only, the kernel's own
earlier plan (``scores_on_tensor_cores``): the GPU suite judges it (``test_paged_decode_nvfp4kv_on_gpu.py``).
Judge one yourself: ``tools/certify-cells --op paged_decode_nvfp4kv --impl
suites.attention.paged_decode_nvfp4kv_impls:NAME --device cpu``.
"""
from __future__ import annotations

import dataclasses

import torch

from ops.attention import paged_decode_nvfp4kv as kernel
from references.attention.paged_decode_nvfp4kv import validate
from references.formats.e2m1 import e2m1_decode
from references.formats.nvfp4 import NVFP4_BLOCK
from suites.attention.paged_decode_impls import decode_fp32, split_tokens_from_batch
from suites.strided_reads import in_strides_of


def _decoded(packed, scales, global_scale, *, high_nibble_first=False, scale_block=NVFP4_BLOCK,
             scale_is_decode=False) -> torch.Tensor:
    """fp32 ``[P, S, Hkv, D]`` by the Dequant line; the keyword switches are the bugs."""
    low, high = packed & 0xF, packed >> 4
    first, second = (high, low) if high_nibble_first else (low, high)
    codes = torch.stack([first, second], dim=-1).flatten(-2)
    head_dim = codes.shape[-1]
    block_of_element = torch.arange(head_dim, device=packed.device) // scale_block
    per_element = scales.float()[..., block_of_element]
    factor = global_scale.reshape(()) if scale_is_decode else torch.reciprocal(global_scale.reshape(()))
    return (e2m1_decode(codes) * per_element) * factor


def _decode_nvfp4(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
                  page_select=None, *, decode_bugs=None, split_tokens_of_batch=False, **attention_bugs):
    validate(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale, page_select)
    decode_bugs = decode_bugs or {}
    k = _decoded(k_packed, k_scales, kv_global_scale, **decode_bugs)
    v = _decoded(v_packed, v_scales, kv_global_scale, **decode_bugs)
    if split_tokens_of_batch:
        attention_bugs["split_tokens"] = split_tokens_from_batch(q, k, page_table, page_select)
    # Each score summed in float64 and rounded once to fp32: an fp32 sum over D moved lse 1.06 ULP from
    # truth against the 1-ULP band where the stock op is exact (a power-of-two global scale), which would
    # reject every implementation here before its own bug is reached (the kernel sums per block likewise).
    return decode_fp32(q, k, v, page_table, seq_lens, sm_scale, 1.0, page_select, score_dtype=torch.float64,
                       **attention_bugs)


def correct_fp32(*args, **kwargs):
    """Correct: the whole cache decoded in fp32, then fp32 attention over the gathered attended tokens."""
    return _decode_nvfp4(*args, **kwargs)


def nibble_order_swapped(*args, **kwargs):
    """Element 2j from the HIGH nibble of byte j (the contract's packing is low nibble first)."""
    return _decode_nvfp4(*args, **kwargs, decode_bugs={"high_nibble_first": True})


def scales_per_32_elements(*args, **kwargs):
    """Reads the scale of element c at c // 32 (MXFP4's block size): from the wrong block from c = 16 on."""
    return _decode_nvfp4(*args, **kwargs, decode_bugs={"scale_block": 2 * NVFP4_BLOCK})


def global_scale_as_decode_scale(*args, **kwargs):
    """Multiplies by kv_global_scale, the ENCODE scale, instead of by its reciprocal."""
    return _decode_nvfp4(*args, **kwargs, decode_bugs={"scale_is_decode": True})


def reads_past_seq_len(*args, **kwargs):
    """Attends every slot of a row's last page, past seq_len too: their NaN or 448 scales and garbage codes."""
    return _decode_nvfp4(*args, **kwargs, whole_last_page=True)


def holes_read_as_pages(*args, **kwargs):
    """Treats -1 table entries as page indices (page -1: the pool's last page, garbage)."""
    return _decode_nvfp4(*args, **kwargs, holes_are_pages=True)


def duplicates_counted_twice(*args, **kwargs):
    """Attends a page once per page_select entry naming it."""
    return _decode_nvfp4(*args, **kwargs, duplicates_once=False)


def v_read_with_k_strides(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
                          page_select=None):
    """Addresses V's codes and scales with K's strides: right while the two caches share a layout."""
    validate(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale, page_select)
    return _decode_nvfp4(q, k_packed, k_scales, in_strides_of(v_packed, k_packed), in_strides_of(v_scales, k_scales),
                         kv_global_scale, page_table, seq_lens, sm_scale, page_select)


def gqa_heads_interleaved(*args, **kwargs):
    """Maps query head h to KV head h % Hkv instead of h // (Hq / Hkv)."""
    return _decode_nvfp4(*args, **kwargs, head_of=lambda h, group, kv_heads: h % kv_heads)


def no_max_subtraction(*args, **kwargs):
    """exp(s) straight: scores above 88.7 overflow fp32 to inf, and o becomes inf / inf = NaN."""
    return _decode_nvfp4(*args, **kwargs, subtract_max=False)


def lse_in_log2(*args, **kwargs):
    """Returns log2(sum exp s), not ln."""
    return _decode_nvfp4(*args, **kwargs, lse_log_base=2.0)


def split_from_batch(*args, **kwargs):
    """Split-K in fp32 with enough splits for B * Hkv rows to fill 4 programs per SM: a row's split
    boundaries, and its rounding, move with the batch size."""
    return _decode_nvfp4(*args, **kwargs, split_tokens_of_batch=True)


def scores_on_tensor_cores(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale,
                           page_select=None):
    """Wrong on a Hopper GPU, right under the interpreter: the kernel with q . k as three tensor-core dots of K's
    exact bf16 parts (its default until 2026-12-05e), whose fp32 accumulation the tensor core truncates toward
    zero: lse biased low, out of the band on about 1 in 100 of ``dense_nvfp4_kv``'s draws (an H100 found it at
    draw 110; issue 27).  The interpreter's dots are exact fp32 sums."""
    validate(q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens, sm_scale, page_select)
    plan = dataclasses.replace(kernel.launch_plan(q.shape[2]), scores_on_cuda_cores=False)
    return kernel.run_plan(plan, q, k_packed, k_scales, v_packed, v_scales, kv_global_scale, page_table, seq_lens,
                           sm_scale, page_select)
