"""vLLM's Triton kernels, carried as source files (``suites/thirdparty/vendored.py``), judged on the CPU under
the interpreter: each test pins one verdict of ``docs/thirdparty/vllm.md`` on a recipe the battery found it
on, and its opposite where the kernel is right, so that a change of the battery, the adapter or the
carried files that alters a verdict is seen.  Where ``.thirdparty/`` holds no vLLM sources (CI: they are
never committed) the tests that run vLLM skip with the command that brings them.
"""
from __future__ import annotations

import types

import pytest
import torch
import triton
import triton.language as tl

from oracles.battery import Battery, Implementation
from ops.catalog import entries
from references.attention import paged_decode as paged_contract
from references.attention import paged_decode_strategy
from suites.thirdparty import vendored
from suites.thirdparty.paged_pages import attended_pages

pytestmark = pytest.mark.cpu
CPU = torch.device("cpu")


def _adapter(name: str):
    try:
        import importlib

        return importlib.import_module(f"suites.thirdparty.{name}")
    except ImportError as error:
        pytest.skip(f"suites.thirdparty.{name}: {error}")


def _failures(op_name: str, module, cell_id: str, recipe: dict, oracles=("parity",)) -> dict:
    entry = entries()[op_name]
    functions = {name: getattr(module, name) for name in (op_name, *entry.siblings) if hasattr(module, name)}
    battery = Battery(entry, Implementation(module.__name__, functions), CPU, entry.strategy_module,
                      graph_parity_skipped="not asked here", cell=entry.cell(cell_id))
    return battery.judge(recipe, oracles)


# -- the carried files --------------------------------------------------------------------------------------
def test_a_carried_file_is_refused_when_missing_or_not_the_manifests(tmp_path, monkeypatch):
    monkeypatch.setattr(vendored, "ROOT", tmp_path)
    path = "vllm/v1/sample/rejection_sampler.py"
    with pytest.raises(ImportError, match="python -m suites.thirdparty.vendored vllm"):
        vendored.carried_file("vllm", path)
    target = vendored.SOURCES["vllm"].folder / path
    target.parent.mkdir(parents=True)
    target.write_text("def rejection_greedy_sample_kernel(): pass\n")   # a file of that name, other code
    with pytest.raises(RuntimeError, match="sha256 differs"):
        vendored.carried_file("vllm", path)


def test_a_builtin_alias_forwards_to_the_builtin_of_the_moment(monkeypatch):
    """The interpreter swaps ``tl.exp`` for its own during a launch: the forwarded alias must reach that one."""
    import triton.language as tl

    module = types.ModuleType("carried")
    module.exp, module.name = tl.exp, "exp"
    vendored._forward_builtin_aliases(module)
    assert module.exp is not tl.exp and module.name == "exp"   # the alias forwards, nothing else changes
    calls = []
    monkeypatch.setattr(tl, "exp", lambda *args, **kwargs: calls.append(args) or "patched")
    assert module.exp(1.0) == "patched" and calls == [(1.0,)]


# -- the attended set as page lists (vLLM's and FlashInfer's adapters) ---------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_the_listed_pages_hold_exactly_the_attended_tokens(seed):
    generator = torch.Generator().manual_seed(seed)
    batch, width, page_size, pages = 5, 6, 4, 9
    table = torch.randint(-1, pages, (batch, width), generator=generator, dtype=torch.int32)
    seq_lens = torch.randint(-2, width * page_size + 6, (batch,), generator=generator, dtype=torch.int32)
    select = torch.randint(-2, width + 2, (batch, 3), generator=generator, dtype=torch.int32) if seed % 2 else None
    listed = attended_pages(table, seq_lens, page_size, select)
    mask = paged_contract.attended_tokens(table, seq_lens, page_size, select)
    for row in range(batch):
        token = mask[row].nonzero()[:, 0]
        expected = sorted(zip((table[row, token // page_size]).tolist(), (token % page_size).tolist()))
        count, length = int(listed.counts[row]), int(listed.tokens[row])
        got = sorted((int(listed.pages[row, t // page_size]), t % page_size) for t in range(length))
        assert got == expected and length == len(token), row
        if count:   # every listed page full but the last, which holds last_page_len tokens
            assert length == page_size * (count - 1) + int(listed.last_page_len[row])


# -- strict acceptance ---------------------------------------------------------------------------------------
SMALL_IDS = {"B": 200, "K": 7, "layout": "every_other_row", "rows": "mixed", "seed": 12, "vocab": "small"}
WIDE_IDS = {"B": 65, "K": 0, "layout": "padded_rows", "rows": "all_accepted", "seed": 8885417621017664632,
            "vocab": "wide"}


def test_vllms_rejection_kernel_is_exact_on_token_ids_of_int32_and_narrows_wider_ones():
    rejection = _adapter("vllm_rejection")
    assert _failures("strict_accept", rejection, "large_batch", SMALL_IDS) == {}
    found = _failures("strict_accept", rejection, "large_batch", WIDE_IDS)
    assert "elements differ" in found["parity"].message   # ids past int32 come back narrowed
    draft = torch.tensor([[2**40 + 5]])
    out, accepted = rejection.strict_accept(draft, torch.tensor([[2**40 + 5, 9]]), torch.tensor([1], dtype=torch.int32))
    assert out.tolist() == [[5, 9]] and accepted.tolist() == [2]   # accepted, the target narrowed to its low bits
    out, accepted = rejection.strict_accept(draft[:, :0], torch.tensor([[-1]]), torch.tensor([0], dtype=torch.int32))
    assert out.tolist() == [[-1]] and accepted.tolist() == [0]     # a -1 target reads as vLLM's placeholder


# -- decode attention ----------------------------------------------------------------------------------------
def _decode_recipe(group: int, kv_dtype: str, **fields) -> dict:
    kv_scale = 0.0173 if kv_dtype == "float8_e4m3fn" else 1.0
    return {"B": 3, "D": 128, "Hkv": 2, "M": 4, "S": 32, "T": None, "group": group, "holes": True,
            "kv_dtype": kv_dtype, "kv_scale": kv_scale, "layout": "interleaved", "lengths": "mixed", "seed": 1,
            "sm_scale": 0.0884, "values": "normal", **fields}


def test_vllms_decode_sums_the_scores_of_a_single_query_head_in_bf16():
    decode = _adapter("vllm_decode")
    found = _failures("paged_decode", decode, "dense_bf16_kv", _decode_recipe(1, "bfloat16"))
    assert "exceeds the band" in found["parity"].message   # scores: tl.sum(q * k) over bf16 products, in bf16
    assert _failures("paged_decode", decode, "dense_bf16_kv", _decode_recipe(4, "bfloat16")) == {}   # tensor-core dot


def test_vllms_decode_rounds_a_dequantized_e4m3_cache_to_bf16():
    decode = _adapter("vllm_decode")
    recipe = _decode_recipe(4, "float8_e4m3fn")
    assert "output 1: error" in _failures("paged_decode", decode, "dense_e4m3_kv", recipe)["parity"].message   # lse
    inputs = paged_decode_strategy.build(recipe, CPU)
    _, lse = decode.paged_decode(**inputs)
    _, exact = paged_contract.truth(**inputs)
    rounded = {name: (inputs[name].float() * recipe["kv_scale"]).bfloat16() for name in ("k_cache", "v_cache")}
    _, of_rounded = paged_contract.truth(**{**inputs, **rounded, "kv_scale": 1.0})
    live = exact.isfinite()
    # the lse is the exact attention over K and V rounded to bf16 after the dequantization, not over K and V
    assert (lse.double() - of_rounded)[live].abs().max() * 100 < (lse.double() - exact)[live].abs().max()


def test_vllms_decode_is_given_no_tensor_sm_scale():
    decode = _adapter("vllm_decode")
    inputs = paged_decode_strategy.build(_decode_recipe(4, "bfloat16"), CPU)
    with pytest.raises(ValueError, match="sm_scale"):
        decode.paged_decode(**{**inputs, "sm_scale": torch.tensor(0.0884)})


# -- the gated delta rule ------------------------------------------------------------------------------------
SIGNED_ZERO_STATE = {"B": 1, "Dk": 64, "Dv": 128, "H": 1, "free_slots": 3, "group": 4, "layout": "contiguous",
                     "padding": "none", "qk_l2norm": False, "scale": "inv_sqrt_dk", "seed": 140, "slots": "shuffled",
                     "state_dtype": "float32", "values": "edges"}
EIGHT_TOKENS = {"B": 1, "Dk": 64, "Dv": 128, "H": 1, "T": 8, "free_slots": 1, "group": 1, "layout": "contiguous",
                "padding": "none", "qk_l2norm": False, "scale": "inv_sqrt_dk", "seed": 7283959653469614181,
                "slots": "last_slot_live", "state_dtype": "bfloat16", "tokens": "mixed", "values": "edges"}


def test_vllms_gated_delta_rule_reloads_a_negative_zero_state_as_positive_zero():
    gdn = _adapter("vllm_gdn")
    assert _failures("gdn_decode", gdn, "fp32_state", SIGNED_ZERO_STATE, ("parity",)) == {}
    found = _failures("gdn_decode", gdn, "fp32_state", SIGNED_ZERO_STATE, ("stateful",))
    # a decode step loads its state as 0 + h (-0.0 becomes +0.0); verify carries -0.0 from one token to the next
    assert "got 0.0 (bits 0x00000000), expected -0.0 (bits 0x80000000)" in found["stateful"].message


def test_vllms_verify_keeps_its_running_state_in_fp32_where_the_contract_rounds_it():
    gdn = _adapter("vllm_gdn")
    assert _failures("gdn_verify", gdn, "fp32_state", {**EIGHT_TOKENS, "state_dtype": "float32"}) == {}
    found = _failures("gdn_verify", gdn, "bf16_state", EIGHT_TOKENS)
    assert "exceeds the band" in found["parity"].message   # o of later tokens: from an unrounded state


# a verify recipe with rows whose only change is a decay g = -80 (q, k, v zero): checkpoint = state * exp(-80)
STRONG_DECAY = {"B": 15, "Dk": 64, "Dv": 64, "H": 1, "T": 1, "free_slots": 1, "group": 1, "layout": "contiguous",
                "padding": "none", "qk_l2norm": False, "scale": "inv_sqrt_dk", "seed": 0, "slots": "shuffled",
                "state_dtype": "float32", "tokens": "full", "values": "edges"}


@triton.jit
def _exp_of_a_rounded_argument(x):
    """``tl.exp`` as Triton compiles it for an NVIDIA GPU, less ``ex2.approx``'s own error: exp2 of ``x * log2(e)``
    rounded to fp32."""
    return tl.exp2(x * 1.4426950408889634)


def test_vllms_exp_as_a_gpu_compiles_it_puts_a_strongly_decayed_state_past_the_band(monkeypatch):
    """On NVIDIA GPUs ``tl.exp`` is ``ex2.approx`` of ``x * log2(e)`` rounded to fp32; at g = -80 that rounding alone
    moves exp(g) by 4 ULP.  The interpreter takes exp exactly, so the CPU passes; with the GPU's argument rounding
    (not its approximation, which adds up to 2 ULP more) the checkpoints fail as on the H100 (6 ULP, band 2)."""
    gdn = _adapter("vllm_gdn")
    assert _failures("gdn_verify", gdn, "fp32_state", STRONG_DECAY) == {}
    kernel_module = vendored.load_module("vllm", "vllm/third_party/flash_linear_attention/ops/fused_recurrent.py")
    monkeypatch.setattr(kernel_module, "exp", _exp_of_a_rounded_argument)
    found = _failures("gdn_verify", gdn, "fp32_state", STRONG_DECAY)
    assert "output 1: error" in found["parity"].message and "g[6] = [-80.0]" in found["parity"].message
