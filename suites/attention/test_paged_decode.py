"""paged_decode: every cell through the whole battery, the battery against wrong kernels, and the
reference against hand-worked cases."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import triton
import triton.language as tl

from ops.attention.paged_decode import ENTRY, _exp_difference, _exp_float64_short
from oracles.battery import Battery
from references.attention import paged_decode as contract
from suites.attention import paged_decode_impls as impls
from suites.certification import arch_marks, machine_device
from suites.op_suite import OpSuite

pytestmark = arch_marks(ENTRY.archs)


# (wrong implementation, the cell whose corners reach its bug, the oracle that must catch it)
WRONG = [
    ("no_max_subtraction", "dense_bf16_kv", "parity"),
    ("reads_past_seq_len", "dense_bf16_kv", "parity"),
    ("holes_read_as_pages", "dense_e4m3_kv", "parity"),
    ("duplicates_counted_twice", "sparse_bf16_kv", "parity"),
    ("page_select_read_as_dense", "sparse_bf16_kv", "parity"),
    ("v_read_with_k_strides", "dense_bf16_kv", "parity"),
    ("head_dim_read_as_contiguous", "dense_bf16_kv", "parity"),
    ("gqa_heads_interleaved", "dense_bf16_kv", "parity"),
    ("lse_in_log2", "sparse_e4m3_kv", "parity"),
    ("split_from_batch", "dense_bf16_kv", "batch_invariance"),
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_fp32")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=10)
test_battery_accepts_another_correct_implementation = SUITE.accepts_test()


def test_band_holds_split_kv_and_rejects_three_ulp_off():
    """On ``dense_bf16_kv``'s corners (the cell quarantined on the H200 for its lse), parity alone:
    split-KV merged by (max, lse) and the scores split-K over D in pieces of 24, legitimate orders that
    round unlike one pass, pass every one; an lse 3 ULP off, where the legitimate orders agree within
    about one, fails the first corner it meets with attended tokens."""
    cell, device = ENTRY.cell("dense_bf16_kv"), machine_device()
    split_kv, split_d, three_off = (Battery(ENTRY, SUITE.judge(name), device, ENTRY.strategy_module)
                                    for name in ("split_kv_fixed", "split_d_fixed", "lse_three_ulp_off"))
    caught = None
    for recipe in ENTRY.strategy_module.corners(cell, device):
        assert split_kv.judge(recipe, ["parity"]) == {}, recipe
        assert split_d.judge(recipe, ["parity"]) == {}, recipe
        caught = caught or three_off.judge(recipe, ["parity"]).get("parity")
    assert caught and "output 1: error" in caught.message and "exceeds the band" in caught.message, caught


@pytest.mark.parametrize("op_name", ["paged_decode", "paged_decode_nvfp4kv"])
def test_gpu_corners_reach_each_cells_most_rows(op_name):
    """The region a GPU run certifies is the one dispatch routes, and its B was whatever the draws reached
    (a draw of many rows has short ones): a corner at the cell's most rows pins its top, on the GPU only
    (the interpreter's budget goes to the other corners)."""
    from ops.catalog import entries

    entry = entries()[op_name]
    for cell in entry.cells:
        gpu_rows = [recipe["B"] for recipe in entry.strategy_module.corners(cell, "cuda")]
        assert max(gpu_rows) == cell.bounds["B"].hi, (cell.id, gpu_rows)
        assert max(recipe["B"] for recipe in entry.strategy_module.corners(cell, "cpu")) < cell.bounds["B"].hi


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


# -- the kernel's plans and its fp32 exp ---------------------------------------------------------------
def _variant_call(cache_dtype, page_size, selected):
    """Two rows (one with a hole in its table, one a third as long), 4 heads over 2 KV heads, D = 64."""
    device = machine_device()
    generator = torch.Generator(device=device).manual_seed(7)
    length, pages = 200, -(-200 // page_size)
    num_pages = 2 * pages + 3

    def cache():
        return torch.randn(num_pages, page_size, 2, 64, generator=generator, device=device).to(cache_dtype)

    table = torch.randperm(num_pages, generator=generator, device=device)[:2 * pages].view(2, pages).to(torch.int32)
    table[0, 1] = -1
    select = None
    if selected:
        select = torch.randint(-1, pages + 1, (2, selected), generator=generator, device=device).to(torch.int32)
    return {"q": torch.randn(2, 4, 64, generator=generator, device=device).to(torch.bfloat16),
            "k_cache": cache(), "v_cache": cache(), "page_table": table,
            "seq_lens": torch.tensor([length, length // 3], dtype=torch.int32, device=device),
            "sm_scale": 0.125, "kv_scale": 1.0 if cache_dtype == torch.bfloat16 else 0.5, "page_select": select}


# -- the legitimate orders, computed together -------------------------------------------------------------
ROW_LENGTHS = (1, 3, 15, 64, 65, 130, 0, 200)   # every order's edges: a block, splits of one token, empty splits


def _rows_of_many_lengths():
    """Eight rows of ``ROW_LENGTHS`` tokens (pages of 16, two KV heads of groups of 2, D = 64, each row its own
    pages in a shuffled pool), NaN in every slot no row attends: rows that group apart and together."""
    device, page_size, pages_per_row = machine_device(), 16, 13
    generator = torch.Generator().manual_seed(26)
    pool = len(ROW_LENGTHS) * pages_per_row + 3
    k = torch.full((pool, page_size, 2, 64), float("nan"))
    v = torch.full((pool, page_size, 2, 64), float("nan"))
    table = torch.randperm(pool, generator=generator)[:len(ROW_LENGTHS) * pages_per_row].view(len(ROW_LENGTHS), -1)
    for row, length in enumerate(ROW_LENGTHS):
        for token in range(length):
            page, slot = table[row, token // page_size], token % page_size
            k[page, slot] = torch.randn(2, 64, generator=generator)
            v[page, slot] = torch.randn(2, 64, generator=generator)
    return {"q": torch.randn(len(ROW_LENGTHS), 4, 64, generator=generator).to(torch.bfloat16).to(device),
            "k_cache": k.to(torch.bfloat16).to(device), "v_cache": v.to(torch.bfloat16).to(device),
            "page_table": table.to(torch.int32).to(device),
            "seq_lens": torch.tensor(ROW_LENGTHS, dtype=torch.int32, device=device),
            "sm_scale": 0.125, "kv_scale": 1.0, "page_select": None}


def _orders_off_the_truth_in_float64(kwargs) -> dict[str, float]:
    """Each token order's largest distance from the float64 truth, o and lse, relative to the row's largest
    |truth|, its arithmetic in float64: what remains is the bookkeeping (which tokens, which blocks and
    splits, rows past their last block), not fp32 rounding."""
    arguments = [kwargs[name] for name in ("q", "k_cache", "v_cache", "page_table", "seq_lens", "sm_scale",
                                           "kv_scale", "page_select")]
    true_o, true_lse = contract.attention_truth(*arguments)
    orders = contract.attention_in_orders(*arguments, contract.ATTENTION_ORDERS, dtype=torch.float64)
    off = {}
    for name, (o, lse) in orders.items():
        distances = []
        for got, truth in ((o, true_o), (lse, true_lse)):
            finite = truth.isfinite()
            assert torch.equal(got[~finite], truth[~finite]), name   # empty rows: o 0, lse -inf
            scale = truth.abs().where(finite, 0).amax(dim=-1, keepdim=True).clamp(min=1.0)
            distances.append(float(((got - truth).abs() / scale).where(finite, 0).nan_to_num(nan=1.0).max()))
        off[name] = max(distances)
    return off


@pytest.mark.parametrize("rows_elements", [contract.ROWS_ELEMENTS, 1], ids=["rows_together", "a_row_a_group"])
def test_every_order_in_float64_is_the_truth(rows_elements, monkeypatch):
    """The orders computed together, in float64: each within 2^-40 of the truth (a float64 sum of at most
    200 terms is off by at most about 200 * 2^-53, under 2^-45), with rows of every length in one group or
    each in its own."""
    monkeypatch.setattr(contract, "ROWS_ELEMENTS", rows_elements)
    off = _orders_off_the_truth_in_float64(_rows_of_many_lengths())
    assert set(off) == set(contract.ATTENTION_ORDERS)
    assert max(off.values()) < 2.0 ** -40, off


def test_float64_check_sees_a_row_walked_past_its_last_block(monkeypatch):
    """The check above, against a running state that does not stop at a row's last block (it merges the
    row's all -inf padding blocks: NaN): the online orders leave the truth."""
    monkeypatch.setattr(contract, "_kept", lambda merged, state, live: merged)
    off = _orders_off_the_truth_in_float64(_rows_of_many_lengths())
    assert off["online_blocks"] >= 1.0 and off["split_d_2"] >= 1.0, off
    assert off["one_pass"] < 2.0 ** -40, off


def test_orders_computed_together_are_the_orders_asked_one_at_a_time():
    """``LEGITIMATE_ORDERS`` names every order, and one order asked alone gives its bits of the judge's call."""
    kwargs = _rows_of_many_lengths()
    together = contract.LEGITIMATE_ORDERS.together(**kwargs)
    assert set(together) == set(contract.ORDER_NAMES) == set(contract.LEGITIMATE_ORDERS)
    for name in ("split_kv_7", contract.TENSOR_CORE_ORDER):
        alone = contract.LEGITIMATE_ORDERS[name](**kwargs)
        assert all(torch.equal(a, b) for a, b in zip(alone, together[name])), name


@pytest.mark.parametrize("cache_dtype, page_size, selected", [
    (torch.bfloat16, 64, None), (torch.float8_e4m3fn, 16, 3), (torch.float8_e4m3fn, 128, None)],
    ids=["bf16_pages_of_64", "e4m3_sparse_pages_of_16", "e4m3_pages_of_128"])
def test_bench_variants_keep_the_contract(cache_dtype, page_size, selected):
    """What ``tools/bench --variants`` times must be the op: a plan that changes only stages or the register
    cap gives the default's bits; one that changes the warps (on the GPU, the layout of a tile's sums), the
    tiles, splits, row padding or the numerics (its summation order or p) stays within the band against
    float64 truth."""
    from oracles.band import check_band
    from ops.attention import paged_decode as kernel

    call = _variant_call(cache_dtype, page_size, selected)
    expected = kernel.paged_decode(**call)
    truth, stock = contract.truth(**call), contract.stock(**call)
    default = kernel.launch_plan(64, cache_dtype)
    launch_only = ("num_stages", "max_registers", "convert_ptx", "lazy_rescale")
    for label, variant in kernel.bench_variants(**call).items():
        o, lse = variant(**call)
        plan = variant.__defaults__[0]
        if all(getattr(plan, f.name) == getattr(default, f.name) for f in dataclasses.fields(plan)
               if f.name not in launch_only):
            assert torch.equal(o.view(torch.int16), expected[0].view(torch.int16)), label
            assert torch.equal(lse, expected[1]), label
        else:
            check_band((o, lse), stock, truth, f"variant {label}")


@triton.jit
def _exp_difference_of(s_ptr, m_ptr, p_ptr, error_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    p, error = _exp_difference(tl.load(s_ptr + offsets), tl.load(m_ptr + offsets))
    tl.store(p_ptr + offsets, p)
    tl.store(error_ptr + offsets, error)


def _scores_and_maxima(seed: int):
    """2^14 (score, running max) pairs as a tile meets them: m uniform in [-30, 30], m - s exponential
    (mean 3); the first 64 have s = m = 5."""
    device = machine_device()
    generator = torch.Generator(device=device).manual_seed(seed)
    count = 1 << 14
    m = torch.rand(count, generator=generator, device=device) * 60 - 30
    s = m - torch.empty(count, device=device).exponential_(1 / 3, generator=generator)
    s[:64], m[:64] = 5.0, 5.0
    return s, m


def test_fp32_exp_difference_against_float64():
    """``_exp_difference``: p + p_error within 2^-24 of exp(s - m) (2^-25.1 simulated), p alone within one
    ULP, exp(0) = 1 exactly, gradual underflow to fp32's subnormals (within one of their steps) and to 0."""
    s, m = _scores_and_maxima(seed=3)
    device, count = s.device, s.numel()
    s[64:128] = m[64:128] - torch.linspace(86.0, 110.0, 64, device=device)
    s = torch.minimum(s, m)
    p, error = torch.empty_like(s), torch.empty_like(s)
    _exp_difference_of[(count // 1024,)](s, m, p, error, BLOCK=1024)
    truth = torch.exp(s.double() - m.double())
    normal = truth > 2.0 ** -100
    compensated = ((p.double() + error.double() - truth).abs() / truth)[normal]
    assert compensated.max().item() <= 2.0 ** -24
    ulp = torch.exp2(torch.floor(torch.log2(truth[normal])) - 23)
    assert ((p.double()[normal] - truth[normal]).abs() / ulp).max().item() <= 1.0
    assert torch.equal(p[:64], torch.ones(64, device=device))
    tiny = truth[64:128] < 2.0 ** -126   # subnormal or zero: p rounded once, by the last power of two
    assert ((p[64:128].double() - truth[64:128]).abs()[tiny] <= 2.0 ** -149).all()
    assert (p[64:128][truth[64:128] < 2.0 ** -151] == 0).all()


@triton.jit
def _exp_float64_short_of(s_ptr, m_ptr, p_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[None, :]
    tl.store(p_ptr + offsets, _exp_float64_short(tl.load(s_ptr + offsets), tl.load(m_ptr + offsets)))


def test_float64_short_exp_against_float64():
    """``_exp_float64_short``: within 2^-30 of exp(s - m) relative down to s - m = -700, exp(0) = 1
    exactly, positive and under 1e-304 below, NaN kept."""
    s, m = _scores_and_maxima(seed=5)
    device, count = s.device, s.numel()
    s[64:128] = m[64:128] - torch.linspace(600.0, 699.0, 64, device=device)
    s[128:192] = m[128:192] - torch.linspace(701.0, 1e30, 64, device=device)
    s[192:256] = float("-inf")
    s[256:320] = float("nan")
    s = torch.where(s.isnan(), s, torch.minimum(s, m))
    p = torch.empty(count, dtype=torch.float64, device=device)
    _exp_float64_short_of[(count // 1024,)](s, m, p, BLOCK=1024)
    x = s.double() - m.double()
    inside = x >= -700
    truth = torch.exp(x)
    assert ((p - truth).abs() / truth)[inside].max().item() <= 2.0 ** -30
    assert torch.equal(p[:64], torch.ones(64, dtype=torch.float64, device=device))
    below = (x < -700) | x.isneginf()
    assert ((p[below] > 0) & (p[below] < 1e-304)).all()
    assert p[256:320].isnan().all()
