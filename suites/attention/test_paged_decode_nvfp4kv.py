"""paged_decode_nvfp4kv: every cell through the whole battery, the battery against wrong kernels, the
reference against hand-worked cases, and the kernel's in-register decode against every code."""
from __future__ import annotations

import dataclasses
import math
import pathlib

import pytest
import torch

from ops.attention import paged_decode_nvfp4kv as kernel
from ops.attention.paged_decode_nvfp4kv import ENTRY
from oracles.band import output_error
from references.attention import paged_decode as dense_contract
from references.attention import paged_decode_nvfp4kv as contract
from references.formats.nvfp4 import nvfp4_dequantize
from suites.attention import paged_decode_nvfp4kv_impls as impls
from suites.certification import (arch_marks, assert_certified, assert_rejected, cell_params, certify_cell, judged,
                                  machine_device, target_oracles)

pytestmark = arch_marks(ENTRY.archs)


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_cell(cell):
    assert_certified(certify_cell(ENTRY, cell))


# (wrong implementation, the cell whose corners reach its bug, the oracle that must catch it)
WRONG = [
    ("nibble_order_swapped", "dense_nvfp4_kv", "parity"),
    ("scales_per_32_elements", "dense_nvfp4_kv", "parity"),
    ("global_scale_as_decode_scale", "sparse_nvfp4_kv", "parity"),
    ("reads_past_seq_len", "dense_nvfp4_kv", "parity"),
    ("holes_read_as_pages", "dense_nvfp4_kv", "parity"),
    ("duplicates_counted_twice", "sparse_nvfp4_kv", "parity"),
    ("v_read_with_k_strides", "dense_nvfp4_kv", "parity"),
    ("gqa_heads_interleaved", "sparse_nvfp4_kv", "parity"),
    ("no_max_subtraction", "dense_nvfp4_kv", "parity"),
    ("lse_in_log2", "sparse_nvfp4_kv", "parity"),
    ("split_from_batch", "dense_nvfp4_kv", "batch_invariance"),
]


@pytest.mark.parametrize("name, cell_id, oracle", WRONG, ids=[w[0] for w in WRONG])
def test_battery_rejects(name, cell_id, oracle):
    impl = judged(ENTRY, impls, name)
    result = certify_cell(ENTRY, ENTRY.cell(cell_id), impl, max_examples=2, shrink=False,
                          oracles=target_oracles(oracle))
    assert_rejected(result, oracle, impl.label)


@pytest.mark.parametrize("cell", cell_params(ENTRY))
def test_battery_accepts_another_correct_implementation(cell):
    impl = judged(ENTRY, impls, "correct_fp32")
    assert_certified(certify_cell(ENTRY, cell, impl), impl.label)


# -- the reference and the kernel, by hand ------------------------------------------------------------
def _one_token(v_bytes, v_scale_bits, *, global_scale=1.0, seq_len=1, head_dim=64):
    """One row, one query head, one page of 16 slots: token 0 holds V codes ``v_bytes`` (D/2 bytes) with
    block scales of bits ``v_scale_bits`` (D/16), K zero; every other slot NaN scales and 0xFF codes."""
    device = machine_device()
    k_packed = torch.full((1, 16, 1, head_dim // 2), 0xFF, dtype=torch.uint8, device=device)
    v_packed = k_packed.clone()
    scales = torch.full((1, 16, 1, head_dim // 16), 0x7F, dtype=torch.uint8, device=device)
    k_scales, v_scales = scales.clone(), scales.clone()
    k_packed[0, 0], k_scales[0, 0] = 0, 0
    v_packed[0, 0, 0] = torch.tensor(v_bytes, dtype=torch.uint8, device=device)
    v_scales[0, 0, 0] = torch.tensor(v_scale_bits, dtype=torch.uint8, device=device)
    return {"q": torch.ones(1, 1, head_dim, dtype=torch.bfloat16, device=device),
            "k_packed": k_packed, "k_scales": k_scales.view(torch.float8_e4m3fn),
            "v_packed": v_packed, "v_scales": v_scales.view(torch.float8_e4m3fn),
            "kv_global_scale": torch.tensor([global_scale], device=device),
            "page_table": torch.zeros(1, 1, dtype=torch.int32, device=device),
            "seq_lens": torch.tensor([seq_len], dtype=torch.int32, device=device), "sm_scale": 0.125}


def test_reference_decodes_low_nibble_first_with_the_block_scale_and_the_encode_scale():
    """Byte 0xA7 with scale 0.5 (bits 0x30) and encode scale 2: element 0 = 6 * 0.5 / 2, element 1 = -1 * 0.5 / 2;
    the one attended token has score 0 (K = 0): weight 1, o = V, lse = 0."""
    o, lse = contract.truth(**_one_token([0xA7] + [0] * 31, [0x30] * 4, global_scale=2.0))
    assert o[0, 0, :3].tolist() == [1.5, -0.25, 0.0] and lse.item() == 0.0


def test_reference_empty_row_gives_zero_and_minus_infinity():
    o, lse = contract.paged_decode_nvfp4kv(**_one_token([0x11] * 32, [0x38] * 4, seq_len=0))
    assert lse.item() == -math.inf and torch.equal(o, torch.zeros_like(o))


def test_reference_answers_pages_of_no_slots():
    """S = 0 is not on the Refuse line: no token lives anywhere, every row is empty."""
    call = _one_token([0x11] * 32, [0x38] * 4)
    for name in ("k_packed", "k_scales", "v_packed", "v_scales"):
        call[name] = call[name][:, :0]
    for op in (contract.paged_decode_nvfp4kv, kernel.paged_decode_nvfp4kv):
        o, lse = op(**call)
        assert lse.item() == -math.inf and torch.equal(o, torch.zeros_like(o))


@pytest.mark.parametrize("head_dim", [64, 256])
def test_kernel_decodes_every_code_and_every_kind_of_scale_exactly(head_dim):
    """One attended token (weight exactly 1, so o = V): its bytes run over all 256 code pairs (D = 64 and
    256 between them: 32 and 128 bytes, shifted), its block scales over zero, the subnormals 2^-9 and
    7 * 2^-9, normal values and 448; every decoded element (at most 6 significant bits: exact in bf16)
    must come back bit for bit, while the 15 other slots of the page hold 0xFF codes under NaN scales."""
    results = []
    for offset in range(0, 256, head_dim // 2):
        v_bytes = [(offset + 37 * i) % 256 for i in range(head_dim // 2)]
        scale_bits = [(0x00, 0x01, 0x07, 0x08, 0x38, 0x7E, 0x26, 0x55)[i % 8] for i in range(head_dim // 16)]
        call = _one_token(v_bytes, scale_bits, head_dim=head_dim)
        o, lse = kernel.paged_decode_nvfp4kv(**call)
        expected = nvfp4_dequantize(call["v_packed"][0, 0], call["v_scales"][0, 0], call["kv_global_scale"])
        results.append(torch.equal(o[0].float(), expected) and lse.item() == 0.0)
    assert all(results)


@pytest.mark.parametrize("global_scale", [1.0, 2.0 ** 124], ids=["unit", "tiny_k"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_kernel_scores_every_code_against_every_kind_of_scale(head_dim, global_scale):
    """The K side of the decode, through the score dot: one token a row (so lse is its score), each row's K
    bytes over all 256 code pairs under zero, subnormal, normal and 448 block scales, q a row of signed
    values.  The default plan's fp32 FMAs over D make at most 2 D roundings, the tensor-core variant's
    three bf16 parts 3 D exact products accumulated in fp32 (at most 3 D roundings), each under 2^-23 of
    the sum of |products| so far (the tensor cores' fp32 accumulation may truncate rather than round),
    scaled in float64 and rounded once: the bound below.  On sm_90 the nibbles once
    reached the per-block dots out of order: relative errors near 1 (docs/ops/paged_decode_nvfp4kv.md).
    ``tiny_k``: an encode scale of 2^124 puts K near 2^-124, where the parts taken from K itself would
    fall in bf16's subnormals (below 2^-126) and lose up to 2^-10 of each element (and q times K itself
    in fp32's)."""
    device = machine_device()
    rows, bytes_per_row = 256 // (head_dim // 2) * 2, head_dim // 2
    call = _one_token([0] * bytes_per_row, [0x38] * (head_dim // 16), head_dim=head_dim, global_scale=global_scale)
    generator = torch.Generator().manual_seed(head_dim)
    k_packed = torch.full((rows, 16, 1, bytes_per_row), 0xFF, dtype=torch.uint8)
    k_scales = torch.full((rows, 16, 1, head_dim // 16), 0x7F, dtype=torch.uint8)
    for row in range(rows):
        k_packed[row, 0, 0] = torch.tensor([(row * bytes_per_row + 37 * i) % 256 for i in range(bytes_per_row)])
        k_scales[row, 0, 0] = torch.tensor([(0x00, 0x01, 0x07, 0x08, 0x38, 0x7E, 0x26, 0x55)[(row + i) % 8]
                                            for i in range(head_dim // 16)])
    call.update(
        q=(torch.randn(rows, 1, head_dim, generator=generator) * 4).to(torch.bfloat16).to(device),
        k_packed=k_packed.to(device), k_scales=k_scales.to(device).view(torch.float8_e4m3fn),
        v_packed=k_packed.to(device), v_scales=k_scales.to(device).view(torch.float8_e4m3fn),
        page_table=torch.arange(rows, dtype=torch.int32, device=device)[:, None],
        seq_lens=torch.ones(rows, dtype=torch.int32, device=device))
    _, lse = kernel.paged_decode_nvfp4kv(**call)
    _, truth = contract.truth(**call)
    k = nvfp4_dequantize(call["k_packed"][:, 0, 0], call["k_scales"][:, 0, 0], call["kv_global_scale"]).double()
    magnitude = (call["q"][:, 0].double().abs() * k.abs()).sum(dim=1, keepdim=True) * call["sm_scale"]
    bound = 3 * head_dim * 2.0 ** -23 * magnitude + truth.abs() * 2.0 ** -24 + 2.0 ** -149
    assert ((lse.double() - truth).abs() <= bound).all(), ((lse.double() - truth).abs() / bound).max().item()


def test_kernel_answers_a_nonzero_encode_scale_within_an_fp32_rounding():
    """The kernel folds 1 / kv_global_scale into the scores and the partial sums, not into each element: o is
    still the truth rounded to bf16 (within its half ULP plus the fold's fp32 rounding)."""
    call = _one_token([(5 * i) % 256 for i in range(32)], [0x38, 0x30, 0x41, 0x05], global_scale=3.0)
    o, _ = kernel.paged_decode_nvfp4kv(**call)
    truth, _ = contract.truth(**call)
    assert torch.allclose(o.double(), truth, rtol=2.0 ** -8, atol=0)


def test_kernel_keeps_the_weight_of_tokens_far_below_the_row_max():
    """A row whose heavy token (score 48) has zero V: o is carried by a token of weight e^-48, under the
    2^-39 where one fp16 ``2^15 p`` is 0.  The kernel gives the truth rounded to bf16, not 0 (the H200 found
    such a row 183 ULP off, docs/ops/paged_decode_nvfp4kv.md)."""
    call = _one_token([(5 * i) % 256 for i in range(32)], [0x38] * 4, seq_len=2)
    k_scales, v_scales = call["k_scales"].view(torch.uint8), call["v_scales"].view(torch.uint8)
    call["k_packed"][0, 1], k_scales[0, 1] = 0x77, 0x38     # every element 6 * 1.0: score 0.125 * 64 * 6
    call["v_packed"][0, 1], v_scales[0, 1] = 0, 0
    o, _ = kernel.paged_decode_nvfp4kv(**call)
    truth, _ = contract.truth(**call)
    assert truth.abs().max().item() > 0
    assert torch.allclose(o.double(), truth, rtol=2.0 ** -8, atol=0), (o.double() - truth).abs().max().item()


def test_stock_op_keeps_the_decoded_keys_where_bf16_operands_move_large_scores():
    """Two tokens of large, close scores (109.7 and 109.8) whose decoded keys (6 / 448, 6.5 / 448) are not
    bf16 numbers: the stock op, SDPA on the decoded float32 caches, is within an output ULP of the truth;
    the same SDPA on bf16 operands (the stock op before 2026-12-02b) moves the scores and is 20+ off."""
    device = machine_device()
    k_packed = torch.zeros(1, 16, 1, 32, dtype=torch.uint8, device=device)
    k_scales = torch.zeros(1, 16, 1, 4, dtype=torch.uint8, device=device)
    v_packed, v_scales = k_packed.clone(), k_scales.clone()
    k_packed[0, 0], k_scales[0, 0] = 0x77, 0x38        # token 0: every element 6 * 1.0
    k_packed[0, 1], k_scales[0, 1] = 0x66, 0x3D        # token 1: 4 * 1.625 = 6.5, but for six zeros
    k_packed[0, 1, 0, :3] = 0
    v_packed[0, 0], v_packed[0, 1], v_scales[0, :2] = 0x22, 0xAA, 0x38     # V +1 and -1
    call = {"q": torch.full((1, 1, 64), 1024.0, dtype=torch.bfloat16, device=device),
            "k_packed": k_packed, "k_scales": k_scales.view(torch.float8_e4m3fn),
            "v_packed": v_packed, "v_scales": v_scales.view(torch.float8_e4m3fn),
            "kv_global_scale": torch.tensor([448.0], device=device),
            "page_table": torch.zeros(1, 1, dtype=torch.int32, device=device),
            "seq_lens": torch.tensor([2], dtype=torch.int32, device=device), "sm_scale": 0.125}
    truth, _ = contract.truth(**call)
    o, _ = contract.stock(**call)
    assert output_error(o, truth).error_ulp <= 1.0
    k, v = (contract.decode_cache(call[f"{x}_packed"], call[f"{x}_scales"], call["kv_global_scale"]) for x in "kv")
    o_bf16, _ = dense_contract.stock_attention(call["q"], k, v, call["page_table"], call["seq_lens"], 0.125, 1.0, None)
    assert output_error(o_bf16, truth).error_ulp > 8.0


# -- the kernel's plans --------------------------------------------------------------------------------
def _variant_call(page_size, selected):
    """Two rows (one with a hole in its table, one a third as long), 4 heads over 2 KV heads, D = 64."""
    device = machine_device()
    generator = torch.Generator(device=device).manual_seed(7)
    length, pages = 200, -(-200 // page_size)
    num_pages = 2 * pages + 3

    def codes():
        return torch.randint(0, 256, (num_pages, page_size, 2, 32), generator=generator, device=device,
                             dtype=torch.uint8)

    def scales():
        return torch.rand(num_pages, page_size, 2, 4, generator=generator, device=device).to(torch.float8_e4m3fn)

    table = torch.randperm(num_pages, generator=generator, device=device)[:2 * pages].view(2, pages).to(torch.int32)
    table[0, 1] = -1
    select = None
    if selected:
        select = torch.randint(-1, pages + 1, (2, selected), generator=generator, device=device).to(torch.int32)
    return {"q": torch.randn(2, 4, 64, generator=generator, device=device).to(torch.bfloat16),
            "k_packed": codes(), "k_scales": scales(), "v_packed": codes(), "v_scales": scales(),
            "kv_global_scale": torch.tensor([0.75], device=device), "page_table": table,
            "seq_lens": torch.tensor([length, length // 3], dtype=torch.int32, device=device),
            "sm_scale": 0.125, "page_select": select}


@pytest.mark.parametrize("page_size, selected", [(64, None), (16, 3)], ids=["pages_of_64", "sparse_pages_of_16"])
def test_bench_variants_keep_the_contract(page_size, selected):
    """What ``tools/bench --variants`` times must be the op: a plan that changes only warps or stages gives
    the default's bits; one that changes the tiles, splits or row padding stays within the band."""
    from oracles.band import check_band

    call = _variant_call(page_size, selected)
    expected = kernel.paged_decode_nvfp4kv(**call)
    truth, stock = contract.truth(**call), contract.stock(**call)
    default = kernel.launch_plan(64)
    launch_only = ("num_warps", "num_stages")
    for label, variant in kernel.bench_variants(**call).items():
        o, lse = variant(**call)
        plan = variant.__defaults__[0]
        if all(getattr(plan, f.name) == getattr(default, f.name) for f in dataclasses.fields(plan)
               if f.name not in launch_only):
            assert torch.equal(o.view(torch.int16), expected[0].view(torch.int16)), label
            assert torch.equal(lse, expected[1]), label
        else:
            check_band((o, lse), stock, truth, f"variant {label}")


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_kernel_serves_a_tensor_sm_scale_on_its_device_as_the_number(scale_dtype):
    """A one-element ``sm_scale`` tensor on q's device is read by the kernel (no host sync, no limit of its
    own): the answer is the number's, bit for bit, 0-d or 1-d.  In float64 the number is one fp32 does not
    hold (28 significant bits), which the host number's hi + lo pair carries exactly too (48 bits)."""
    call = _variant_call(16, None)
    device = call["q"].device
    scale = 0.125 + 2.0 ** -30 if scale_dtype == torch.float64 else 0.125
    expected = kernel.paged_decode_nvfp4kv(**{**call, "sm_scale": scale})
    for shape in ((), (1,)):
        tensor = torch.full(shape, scale, dtype=scale_dtype, device=device)
        o, lse = kernel.paged_decode_nvfp4kv(**{**call, "sm_scale": tensor})
        assert torch.equal(o.view(torch.int16), expected[0].view(torch.int16)), shape
        assert torch.equal(lse, expected[1]), shape
    assert ENTRY.limits is None or ENTRY.limits(**{**call, "sm_scale": tensor}) is None


_COMPILE_SMALLEST_TILES = """
import sys
from tools.compile_receipts import prepare_environment
prepare_environment()
import torch
import triton.runtime.jit as jit
from ops.attention import paged_decode_nvfp4kv as kernel
from tools.compile_receipts import Launch, compile_launch
head_dim, page_size = int(sys.argv[1]), int(sys.argv[2])
q = torch.zeros(1, 4, head_dim, dtype=torch.bfloat16)
codes = torch.zeros(2, page_size, 1, head_dim // 2, dtype=torch.uint8)
scales = torch.zeros(2, page_size, 1, head_dim // 16).to(torch.float8_e4m3fn)
launches, run = [], jit.JITFunction.run
jit.JITFunction.run = lambda self, *args, grid, warmup, **kwargs: launches.append(Launch(self, args, kwargs, ""))
kernel.run_plan(kernel.launch_plan(head_dim), q, codes, scales, codes, scales, torch.tensor([448.0]),
                torch.arange(2, dtype=torch.int32).view(1, 2), torch.tensor([2 * page_size], dtype=torch.int32),
                head_dim ** -0.5)
jit.JITFunction.run = run
label, receipt = compile_launch(next(l for l in launches if "nvfp4" in l.kernel.fn.__name__), "sm_90a")
print(label)
"""


@pytest.mark.parametrize("head_dim", [64, 256])
def test_smallest_tiles_compile_for_sm90a(head_dim):
    """Pages of 16 give the smallest half tiles: at D = 64 with 4 warps (and D = 128 with 8) Triton 3.6 aborted
    compiling the scales' ``tl.gather`` for sm_90a (no warp-local layout), and only the H200 saw it.  The plan
    caps its warps there (``LaunchPlan.warps``); this compiles the capped plans on the CPU, for the GPU."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _COMPILE_SMALLEST_TILES, str(head_dim), "16"], capture_output=True,
                         text=True, cwd=pathlib.Path(kernel.__file__).resolve().parents[2], timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f" warps={2 if head_dim == 64 else 8} " in run.stdout   # D = 64 capped from 4; D = 256 keeps its 8


# -- the strategy reaches the NVFP4 hard cases ----------------------------------------------------------
def _attended_slots(call) -> torch.Tensor:
    """``[P, S]``: the cache slots some row attends."""
    from references.attention.paged_decode import attended_tokens

    page_size = call["k_packed"].shape[1]
    attended = attended_tokens(call["page_table"], call["seq_lens"], page_size, call["page_select"])
    row, token = attended.nonzero(as_tuple=True)
    slots = torch.zeros(call["k_packed"].shape[:2], dtype=torch.bool, device=attended.device)
    slots[call["page_table"][row, token // page_size].long(), token % page_size] = True
    return slots


def test_strategy_corners_plant_every_code_zero_and_subnormal_scales_and_nan_garbage():
    """Among the dense cell's corners, in K and V alike: attended slots with all 16 codes, block scales of 0
    and of every e4m3 subnormal; unattended slots with NaN scales beside finite 448 garbage."""
    from references.attention import paged_decode_nvfp4kv_strategy as strategy

    found = {name: {"codes": set(), "scales": set(), "garbage": set()} for name in ("k", "v")}
    cell = ENTRY.cell("dense_nvfp4_kv")
    for recipe in strategy.corners(cell, machine_device()):
        call = strategy.build(recipe, machine_device())
        attended = _attended_slots(call)
        for name, seen in found.items():
            packed, scale_bits = call[f"{name}_packed"], call[f"{name}_scales"].view(torch.uint8)
            live_bytes = packed[attended]
            seen["codes"] |= set(torch.cat([live_bytes & 0xF, live_bytes >> 4]).unique().tolist())
            seen["scales"] |= set(scale_bits[attended].unique().tolist())
            seen["garbage"] |= set(scale_bits[~attended].unique().tolist())
    for name, seen in found.items():
        assert seen["codes"] == set(range(16)), name
        assert {0, *range(1, 8)} <= seen["scales"], name
        assert {0x7F, 0xFF, 0x7E} <= seen["garbage"], name
