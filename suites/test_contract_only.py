"""Implementations written from the contract alone pass; the contract's pinned points reject their
violations (issue #15, "Done when ..." and #15.8).

``suites/contract_only/`` holds plain-PyTorch implementations an outside user would write from
``../shared/CONTRACTS.md`` (no ``references/``, no ``ops/``), one per op and an alternative each where the
contract leaves room: other refusal wording, a refusal of an input beyond its own limits (column-strided
``q``, a plane of two trailing dims, a tensor ``sm_scale``), another summation order inside the band,
a K mismatch that names the weight.  Each is judged by the battery on every cell of its op, on the CPU,
with the first corners and a draw per cell (the full set of corners costs minutes; the pinned cases
have fixed inputs of their own below).  The negative controls: an nvfp4_quantize encoding a NaN ``x * out_scale``
as -0 fails; a gdn implementation misreading column-strided ``q`` fails where one refusing it passes; a
rollback answering a plane of three trailing dims wrongly fails where one refusing it passes.
"""
from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch

import suites.contract_only
from oracles.battery import Implementation, run_cell
from ops.catalog import entries
from suites.contract_only import attention, gemm, norm, quant, sampling, speculative, ssm

pytestmark = pytest.mark.cpu
DEVICE = torch.device("cpu")
DRAWS = 1     # Hypothesis draws per cell, besides the first corners
CORNERS = 2   # corners per cell: the pinned cases have fixed inputs below; CI time is shared

GDN = {"gdn_decode": ssm.gdn_decode, "gdn_verify": ssm.gdn_verify, "gdn_commit": ssm.gdn_commit}
ROLLBACK = {"rollback_save": attention.rollback_save, "rollback_restore": attention.rollback_restore}
ROLLBACK_FLAT = {"rollback_save": attention.rollback_save_flat, "rollback_restore": attention.rollback_restore_flat}
IMPLEMENTATIONS = {
    "greedy_argmax": {"contract": {"greedy_argmax": sampling.greedy_argmax},
                      "explicit": {"greedy_argmax": sampling.greedy_argmax_explicit}},
    "strict_accept": {"contract": {"strict_accept": speculative.strict_accept},
                      "by_row": {"strict_accept": speculative.strict_accept_by_row}},
    "rollback_save": {"contract": ROLLBACK, "refusing_two_trailing_dims": ROLLBACK_FLAT},
    "rollback_restore": {"contract": ROLLBACK, "refusing_two_trailing_dims": ROLLBACK_FLAT},
    "nvfp4_quantize": {"contract": {"nvfp4_quantize": quant.nvfp4_quantize},
                       "nearest": {"nvfp4_quantize": quant.nvfp4_quantize_nearest}},
    "nvfp4_gemv": {"contract": {"nvfp4_gemv": gemm.nvfp4_gemv},
                   "by_blocks_naming_the_weight": {"nvfp4_gemv": gemm.nvfp4_gemv_by_blocks}},
    "fp8_gemv": {"contract": {"fp8_gemv": gemm.fp8_gemv},
                 "naming_the_weight": {"fp8_gemv": gemm.fp8_gemv_naming_the_weight}},
    "rms_norm_gated": {"contract": {"rms_norm_gated": norm.rms_norm_gated},
                       "pairwise": {"rms_norm_gated": norm.rms_norm_gated_pairwise}},
    "paged_decode": {"contract": {"paged_decode": attention.paged_decode},
                     "float64_refusing_a_tensor_sm_scale": {"paged_decode": attention.paged_decode_host_scale}},
    "gdn_decode": {"contract": GDN, "refusing_column_strided_qkv": {**GDN, "gdn_decode": ssm.gdn_decode_unit_stride}},
    "gdn_verify": {"contract": GDN, "refusing_column_strided_qkv": {**GDN, "gdn_verify": ssm.gdn_verify_unit_stride}},
    "gdn_commit": {"contract": GDN},
}


def _registered() -> dict:
    """What contract-only modules register themselves (``CONTRACT_ONLY = {op: {label: functions}}``): the
    modules tools/new-op writes, which need no line here."""
    found = {}
    for info in pkgutil.iter_modules(suites.contract_only.__path__):
        found.update(getattr(importlib.import_module(f"suites.contract_only.{info.name}"), "CONTRACT_ONLY", {}))
    return found


IMPLEMENTATIONS.update(_registered())
CASES = [(op_name, label) for op_name, impls in IMPLEMENTATIONS.items() for label in impls]
# cells an alternative refuses whole (every input beyond its own limits): refusing is allowed input by
# input, but a cell where nothing was answered is not passed — the battery says so
REFUSED_WHOLE = {("rollback_save", "refusing_two_trailing_dims"): {"head_slots"},
                 ("rollback_restore", "refusing_two_trailing_dims"): {"head_slots"}}


class FirstCorners:
    """An op's strategy with only its first ``CORNERS`` corners per cell."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.recipes, self.build = strategy.recipes, strategy.build

    def corners(self, cell, device):
        return self.strategy.corners(cell, device)[:CORNERS]


def judge(op_name: str, functions: dict, strategy=None, max_examples: int = DRAWS, cells=None) -> list:
    """The battery's results on each cell of ``op_name`` (or ``cells``)."""
    entry = entries()[op_name]
    impl = Implementation(f"contract-only {op_name}", functions)
    strategy = strategy or FirstCorners(entry.strategy_module)
    return [run_cell(entry, impl, cell, DEVICE, max_examples=max_examples, shrink=False, strategy=strategy)
            for cell in (cells or entry.cells)]


def _failures(results) -> list[str]:
    return [f"{r.cell_id}: {r.failure.oracle}: {r.failure.message} (recipe {r.failure.recipe})"
            for r in results if r.status != "certified"]


def assert_passes_but_where_refused_whole(op_name: str, label: str, results) -> None:
    """Every cell certified, but the cells ``REFUSED_WHOLE`` says the alternative refuses every input of."""
    refused_whole = REFUSED_WHOLE.get((op_name, label), set())
    assert not _failures([r for r in results if r.cell_id not in refused_whole])
    for result in (r for r in results if r.cell_id in refused_whole):
        assert result.status == "failed" and result.examples == 0 and result.refused_examples > 0, result.record()
        assert "refused all" in result.failure.message


@pytest.mark.parametrize("op_name, label", CASES, ids=[f"{op}-{label}" for op, label in CASES])
def test_an_implementation_written_from_the_contract_passes(op_name, label):
    assert_passes_but_where_refused_whole(op_name, label, judge(op_name, IMPLEMENTATIONS[op_name][label]))


def test_every_contract_op_has_a_contract_only_implementation():
    assert set(IMPLEMENTATIONS) >= set(entries()) - {"paged_decode_nvfp4kv"}


class FixedInputs:
    """A strategy of fixed corner inputs (no draws): ``build`` returns ``inputs[recipe["case"]]()``."""

    def __init__(self, **inputs):
        self.inputs = inputs

    def corners(self, cell, device):
        return [{"case": case, "seed": 0} for case in self.inputs]

    def build(self, recipe, device):
        return self.inputs[recipe["case"]]()


def _one_cell(op_name: str, functions: dict, strategy, cell_id: str):
    [result] = judge(op_name, functions, strategy, max_examples=0, cells=[entries()[op_name].cell(cell_id)])
    return result


# -- nvfp4_quantize: a NaN x * out_scale is code 7 -------------------------------------------------------
def _subnormal_decode_scale():
    """One block whose decode scale ``sf * (1 / global_scale)`` = 2**-9 * 2**-120 is subnormal: its
    reciprocal overflows to inf, and the block's zeros give 0 * inf = NaN."""
    x = torch.zeros(1, 16)
    x[0, 0] = 1.5 * 2.0**-127                      # bmax / 6 * 2**120 = 2**-9: the least e4m3 scale
    return {"x": x.to(torch.bfloat16), "global_scale": torch.tensor([2.0**120])}


NAN_BLOCK = FixedInputs(nan_block=_subnormal_decode_scale)


def test_the_nan_block_reaches_code_7():
    packed, _ = quant.nvfp4_quantize(**_subnormal_decode_scale())
    assert packed[0, 0].item() == 0x77 and packed[0, 1].item() == 0x77   # +6 (inf saturated) then NaN -> 7


def test_nan_encoded_as_code_7_passes_and_as_minus_zero_fails():
    cell = entries()["nvfp4_quantize"].cells[0].id
    assert _one_cell("nvfp4_quantize", {"nvfp4_quantize": quant.nvfp4_quantize}, NAN_BLOCK, cell).status == "certified"
    failed = _one_cell("nvfp4_quantize", {"nvfp4_quantize": quant.nvfp4_quantize_nan_as_minus_zero}, NAN_BLOCK, cell)
    assert failed.status == "failed" and failed.failure.oracle == "parity"


# -- gdn: column-strided q, k, v are answered by the contract ----------------------------------------------
def _column_strided_decode():
    generator = torch.Generator().manual_seed(0)
    batch, heads, heads_v, dk, dv = 2, 1, 2, 64, 64

    def strided(*shape):
        wide = torch.full((*shape[:-1], 2 * shape[-1]), torch.nan).to(torch.bfloat16)
        view = wide[..., ::2]
        view.copy_(torch.nn.functional.normalize(torch.randn(*shape, generator=generator), dim=-1))
        return view

    return {"q": strided(batch, heads, dk), "k": strided(batch, heads, dk), "v": strided(batch, heads_v, dv),
            "g": -torch.rand(batch, heads_v, generator=generator), "beta": torch.rand(batch, heads_v, generator=generator),
            "state": torch.randn(3, heads_v, dk, dv, generator=generator),
            "slots": torch.tensor([2, 0], dtype=torch.int32), "scale": dk ** -0.5}


def _contiguous(inputs: dict) -> dict:
    return {name: value.contiguous() if isinstance(value, torch.Tensor) else value for name, value in inputs.items()}


# the input under test beside one every implementation answers: a cell where all was refused is not passed
STRIDED_Q = FixedInputs(column_strided=_column_strided_decode,
                        contiguous=lambda: _contiguous(_column_strided_decode()))


@pytest.mark.parametrize("decode, status", [
    (ssm.gdn_decode, "certified"),                      # answers right
    (ssm.gdn_decode_unit_stride, "certified"),          # refuses clearly
    (ssm.gdn_decode_misreading_strides, "failed"),      # answers wrong
])
def test_column_strided_q_is_answered_right_or_refused(decode, status):
    result = _one_cell("gdn_decode", {**GDN, "gdn_decode": decode}, STRIDED_Q, "fp32_state")
    assert result.status == status, _failures([result])
    assert result.refused_examples == (decode is ssm.gdn_decode_unit_stride)


# -- rollback: [P, S, *E] takes any number of trailing dims --------------------------------------------------
def _plane_of_three_trailing_dims():
    generator = torch.Generator().manual_seed(1)
    plane = torch.randn(4, 8, 2, 3, 5, generator=generator).to(torch.bfloat16)
    page_table = torch.tensor([[1, -1, 3], [0, 2, -1]], dtype=torch.int32)
    positions = torch.tensor([[0, 5, 9, 17], [3, 8, -1, 20]], dtype=torch.int32)
    return {"plane": plane, "page_table": page_table, "positions": positions}


def _plane_of_one_trailing_dim():
    inputs = _plane_of_three_trailing_dims()
    return {**inputs, "plane": inputs["plane"].flatten(2)}


THREE_TRAILING = FixedInputs(three_trailing_dims=_plane_of_three_trailing_dims, one_trailing_dim=_plane_of_one_trailing_dim)


def _save_first_trailing_row_only(plane, page_table, positions):
    """Negative control: a save that copies only the first [*E[1:]] block of each slot."""
    saved = attention.rollback_save(plane, page_table, positions)
    if plane.dim() > 3:
        saved[:, :, 1:] = 0
    return saved


@pytest.mark.parametrize("save, status", [
    (attention.rollback_save, "certified"),              # answers right
    (attention.rollback_save_flat, "certified"),         # refuses clearly
    (_save_first_trailing_row_only, "failed"),           # answers wrong
])
def test_a_plane_of_three_trailing_dims_is_answered_right_or_refused(save, status):
    result = _one_cell("rollback_save", {**ROLLBACK, "rollback_save": save}, THREE_TRAILING, "head_slots")
    assert result.status == status, _failures([result])


def test_a_save_answering_two_trailing_dims_wrongly_fails_the_head_slots_cell():
    [result] = judge("rollback_save", {**ROLLBACK, "rollback_save": _save_first_trailing_row_only},
                     cells=[entries()["rollback_save"].cell("head_slots")])
    assert result.status == "failed" and result.failure.oracle == "parity"
