"""The third-party adapters judged on the CPU where their packages run there; the GPU runs are in
``docs/lab/h200_2026-12-01.sh thirdparty`` and ``docs/thirdparty/``.

Each test pins what the battery says of a public implementation, so that a change of the battery or of
the adapter that alters a verdict is seen: torch's own ops answer the sampling, speculative and rollback
contracts exactly (numerics) but refuse nothing the contract refuses (interface); torchao's NVFP4
quantization differs from the contract on blocks whose scale is subnormal (it clamps them to 2**-6) and
asserts on strided rows.
"""
from __future__ import annotations

import importlib
import importlib.util

import pytest
import torch

from oracles.battery import Implementation, run_cell
from ops.catalog import entries

pytestmark = pytest.mark.cpu
DEVICE = torch.device("cpu")


def _adapter(name: str):
    try:
        return importlib.import_module(f"suites.thirdparty.{name}")
    except ImportError as error:
        pytest.skip(f"suites.thirdparty.{name}: its package is not installed here ({error})")


def _judge(op_name: str, module, cell_id: str, oracles=None, max_examples: int = 2):
    entry = entries()[op_name]
    functions = {name: getattr(module, name) for name in (op_name, *entry.siblings) if hasattr(module, name)}
    options = {"oracles": oracles} if oracles else {}
    return run_cell(entry, Implementation(module.__name__, functions), entry.cell(cell_id), DEVICE,
                    max_examples=max_examples, shrink=False, strategy=entry.strategy_module, **options)


def test_every_adapter_names_its_package_its_ops_and_its_own_code():
    for name in ("torch_native", "torch_scaled_mm", "torchao_nvfp4", "fla_rmsnorm", "liger_rmsnorm", "sglang_decode",
                 "vllm_rejection", "vllm_decode", "vllm_gdn", "flashinfer_decode", "flashinfer_fp4"):
        spec = importlib.util.find_spec(f"suites.thirdparty.{name}")
        source = spec.loader.get_source(spec.name)
        assert all(word in source for word in ("PACKAGE =", "JUDGED =", "ADAPTER_CODE =")), name


@pytest.mark.parametrize("op_name, cell_id", [("greedy_argmax", "decode_small_batch"), ("strict_accept", "small_batch"),
                                              ("rollback_save", "row_slots"), ("rollback_restore", "head_slots")])
def test_torch_native_ops_answer_the_contract_but_refuse_nothing(op_name, cell_id):
    result = _judge(op_name, _adapter("torch_native"), cell_id)
    assert [o for o in result.failing() if o != "refusals"] == [], result.summary()
    assert result.verdicts["refusals"]["verdict"] == "fail", result.summary()
    assert result.summary().startswith("numerics: pass; interface: refusals FAIL")


def test_torchao_nvfp4_clamps_subnormal_block_scales_and_asserts_on_strided_rows():
    result = _judge("nvfp4_quantize", _adapter("torchao_nvfp4"), "decode_activations", oracles=("parity", "determinism"),
                    max_examples=4)
    assert "elements differ" in result.failures["parity"].message
    assert "contiguous" in result.failures["determinism"].message   # torchao's AssertionError on a strided x


@pytest.mark.parametrize("name", ["flashinfer_decode", "flashinfer_fp4"])
def test_a_flashinfer_adapter_without_flashinfer_is_an_import_error_naming_it(name):
    """FlashInfer runs on NVIDIA GPUs only (its H200 steps: docs/thirdparty/h200-queue.md); where it is not
    installed its adapters must fail to import, so that every test and tool skips them with that reason."""
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed here: its adapters import")
    with pytest.raises(ImportError, match="flashinfer"):
        importlib.import_module(f"suites.thirdparty.{name}")


def test_rows_not_16_byte_aligned_are_refused_naming_the_argument_and_aligned_ones_pass():
    """FlashInfer's decode dies on a cache whose head vectors are not 16-byte aligned ("misaligned address" on
    the H200, 2026-12-04): its adapter refuses them clearly instead (``paged_pages.require_aligned_rows``)."""
    from suites.thirdparty.paged_pages import require_aligned_rows

    pool = torch.zeros(4, 16, 2, 67, dtype=torch.bfloat16)
    for aligned in (pool[..., :64].contiguous(), torch.zeros(4, 16, 2, 72, dtype=torch.bfloat16)[..., :64],
                    torch.zeros(0, 16, 2, 67), "not a tensor",
                    torch.zeros(1, 16, 2, 72, dtype=torch.bfloat16)[..., :64].as_strided((1, 16, 2, 64), (3, 144, 72, 1))):
        require_aligned_rows("k_cache", aligned)
    for misaligned in (pool[..., :64], pool.view(-1)[1:1 + 4 * 16 * 2 * 64].view(4, 16, 2, 64),
                       torch.zeros(4, 16, 2, 64, dtype=torch.bfloat16).transpose(2, 3)):
        with pytest.raises(ValueError, match="^k_cache: rows not 16-byte aligned"):
            require_aligned_rows("k_cache", misaligned)


def test_the_adapters_own_gdn_commit_refuses_what_the_contract_refuses():
    """Neither fla-core nor vLLM has a commit: both adapters' ``gdn_commit`` is this torch copy, all of it ours, so
    its refusals are ours to meet (the H100's vLLM run of 2026-12-06 failed them before this)."""
    from suites.thirdparty import gdn_slots

    result = _judge("gdn_commit", gdn_slots, "fp32_state", oracles=("parity", "refusals"))
    assert result.failing() == [], result.summary()
    assert result.verdicts["refusals"]["verdict"] == "pass", result.summary()
