"""paged_decode: every cell through the whole battery, the battery against wrong kernels, and the
reference against hand-worked cases."""
from __future__ import annotations

import math

import pytest
import torch

from ops.attention.paged_decode import ENTRY
from references.attention import paged_decode as contract
from suites.attention import paged_decode_impls as impls
from suites.certification import (arch_marks, assert_certified, assert_rejected, cell_params, certify_cell, judged,
                                  machine_device)

pytestmark = arch_marks(ENTRY.archs)


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_cell(cell):
    assert_certified(certify_cell(ENTRY, cell))


# (wrong implementation, the cell whose corners reach its bug, the oracle that must catch it)
WRONG = [
    ("no_max_subtraction", "dense_bf16_kv", "parity"),
    ("reads_past_seq_len", "dense_bf16_kv", "parity"),
    ("holes_read_as_pages", "dense_e4m3_kv", "parity"),
    ("duplicates_counted_twice", "sparse_bf16_kv", "parity"),
    ("gqa_heads_interleaved", "dense_bf16_kv", "parity"),
    ("lse_in_log2", "sparse_e4m3_kv", "parity"),
    ("split_from_batch", "dense_bf16_kv", "batch_invariance"),
]


@pytest.mark.parametrize("name, cell_id, oracle", WRONG, ids=[w[0] for w in WRONG])
def test_battery_rejects(name, cell_id, oracle):
    impl = judged(ENTRY, impls, name)
    result = certify_cell(ENTRY, ENTRY.cell(cell_id), impl, max_examples=10, shrink=False)
    assert_rejected(result, oracle, impl.label)


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_battery_accepts_another_correct_implementation(cell):
    impl = judged(ENTRY, impls, "correct_fp32")
    assert_certified(certify_cell(ENTRY, cell, impl), impl.label)


# -- the reference, by hand ---------------------------------------------------------------------------
def _one_row(scores_of_tokens, values_of_tokens, *, page_size=16, seq_len=None, table=None, select=None):
    """A row of one query head (D = 64) whose tokens score ``scores_of_tokens`` (sm_scale 1): q = e_0,
    k_t = s_t e_0, v_t = values_t e_1."""
    device = machine_device()
    tokens = len(scores_of_tokens)
    pages = max(1, math.ceil(tokens / page_size))
    k = torch.full((pages, page_size, 1, 64), float("nan"), device=device)
    v = torch.full((pages, page_size, 1, 64), float("nan"), device=device)
    k.view(-1, 1, 64)[:tokens] = 0
    v.view(-1, 1, 64)[:tokens] = 0
    k.view(-1, 1, 64)[:tokens, 0, 0] = torch.tensor(scores_of_tokens, device=device)
    v.view(-1, 1, 64)[:tokens, 0, 1] = torch.tensor(values_of_tokens, device=device)
    q = torch.zeros(1, 1, 64, device=device)
    q[0, 0, 0] = 1
    table = torch.arange(pages, device=device)[None] if table is None else torch.tensor([table], device=device)
    return {"q": q.to(torch.bfloat16), "k_cache": k.to(torch.bfloat16), "v_cache": v.to(torch.bfloat16),
            "page_table": table.to(torch.int32),
            "seq_lens": torch.tensor([tokens if seq_len is None else seq_len], dtype=torch.int32, device=device),
            "sm_scale": 1.0, "page_select": None if select is None else
            torch.tensor([select], dtype=torch.int32, device=device)}


def test_reference_two_tokens_by_hand():
    """Scores 0 and ln 3: weights 1/4 and 3/4, lse = ln 4; the NaN slots past seq_len stay out."""
    o, lse = contract.truth(**_one_row([0.0, math.log(3.0)], [1.0, 5.0]))
    assert lse.item() == pytest.approx(math.log(4.0), abs=1e-2)   # ln 3 is rounded to bf16 in k
    expected = (1.0 + 3.0 * 5.0) / 4.0
    assert o[0, 0, 1].item() == pytest.approx(expected, rel=1e-2) and o[0, 0, 0].item() == 0.0


def test_reference_empty_row_gives_zero_and_minus_infinity():
    o, lse = contract.paged_decode(**_one_row([1.0, 2.0], [1.0, 1.0], seq_len=0))
    assert lse.item() == -math.inf and torch.equal(o, torch.zeros_like(o))


def test_reference_counts_a_duplicate_once_and_ignores_out_of_range_entries():
    scores, values = [1.0] * 16 + [2.0] * 16, [1.0] * 16 + [3.0] * 16
    clean = contract.truth(**_one_row(scores, values, select=[1]))
    messy = contract.truth(**_one_row(scores, values, select=[1, 1, -1, 2, 99, -7, 1]))
    assert all(torch.equal(a, b) for a, b in zip(clean, messy))
    assert clean[0][0, 0, 1].item() == pytest.approx(3.0)   # only page 1 (values 3) is attended


def test_reference_skips_holes_inside_seq_len():
    scores, values = [0.0] * 32, [1.0] * 16 + [7.0] * 16
    o, lse = contract.truth(**_one_row(scores, values, table=[-1, 1]))
    assert o[0, 0, 1].item() == pytest.approx(7.0) and lse.item() == pytest.approx(math.log(16.0))


def test_reference_maps_query_head_h_to_kv_head_h_over_group():
    """Hq = 4, Hkv = 2: heads 0, 1 read KV head 0 (values 1) and heads 2, 3 read KV head 1 (values 2)."""
    device = machine_device()
    k = torch.zeros(1, 16, 2, 64, device=device)
    v = torch.zeros(1, 16, 2, 64, device=device)
    v[:, :, 0], v[:, :, 1] = 1.0, 2.0
    o, _ = contract.truth(q=torch.zeros(1, 4, 64, dtype=torch.bfloat16, device=device),
                          k_cache=k.to(torch.bfloat16), v_cache=v.to(torch.bfloat16),
                          page_table=torch.zeros(1, 1, dtype=torch.int32, device=device),
                          seq_lens=torch.tensor([5], dtype=torch.int32, device=device), sm_scale=0.125)
    assert o[0, :, 0].tolist() == [1.0, 1.0, 2.0, 2.0]
