"""Production shapes are corners (CONTRACTS.md; issue 25.4): a kernel wrong only at real model sizes is
rejected, because each real size a cell's bounds hold is one of the cell's fixed corners."""
from __future__ import annotations

import sys

import pytest
import torch

from oracles.battery import Implementation
from ops.catalog import op
from references.strategies.shapes import PRODUCTION_SIZES
from suites.certification import assert_rejected, certify_cell, judged

pytestmark = pytest.mark.cpu
ENTRY = op("greedy_argmax")
REAL_VOCABULARIES = {32000, 50257, 128256, 151936, 152064}


def wrong_at_real_vocabularies(logits):
    """Right everywhere but at five real vocabularies, where every row answers its last index."""
    ENTRY.validate(logits)
    if logits.shape[1] in REAL_VOCABULARIES:
        return torch.full((logits.shape[0],), logits.shape[1] - 1, dtype=torch.int64, device=logits.device)
    return torch.argmax(logits, dim=-1)


def _vocabularies(cell_id: str, device: str) -> set[int]:
    return {recipe["V"] for recipe in ENTRY.strategy_module.corners(ENTRY.cell(cell_id), torch.device(device))}


def test_a_kernel_wrong_only_at_real_vocabularies_is_rejected_on_the_cpu():
    impl = judged(ENTRY, sys.modules[__name__], "wrong_at_real_vocabularies")
    result = certify_cell(ENTRY, ENTRY.cell("decode_small_batch"), impl, max_examples=1)
    assert_rejected(result, "parity", impl.label)


@pytest.mark.parametrize("cell_id", [cell.id for cell in ENTRY.cells])
def test_every_real_vocabulary_is_a_corner_of_every_cell_on_a_gpu(cell_id):
    assert set(PRODUCTION_SIZES["vocabulary"]) <= _vocabularies(cell_id, "cuda")


def test_what_the_cpu_budget_reaches():
    """R·V <= 2^18 on the CPU: at R = 1 every real vocabulary is a corner (and at R = 0); from R = 17 up the
    budget (V <= 15420) holds none of them, and those corners run on the GPU only."""
    assert set(PRODUCTION_SIZES["vocabulary"]) <= _vocabularies("decode_small_batch", "cpu")
    assert set(PRODUCTION_SIZES["vocabulary"]) <= _vocabularies("empty_batch", "cpu")
    for cell_id in ("decode_mid_batch", "decode_large_batch"):
        assert not set(PRODUCTION_SIZES["vocabulary"]) & _vocabularies(cell_id, "cpu")


# -- the stateful and recurrent ops: a kernel wrong at one real size of one dimension is rejected on the CPU --
ROLLBACK, COMMIT = op("rollback_save"), op("gdn_commit")


def _save_wrong_where(plane, page_table, positions, wrong: bool):
    """rollback_save's answer, or (``wrong``) every entry saved as zeros."""
    saved = ROLLBACK.reference(plane, page_table, positions)
    return torch.zeros_like(saved) if wrong else saved


def save_wrong_at_real_page_sizes(plane, page_table, positions):
    return _save_wrong_where(plane, page_table, positions, plane.shape[1] in (32, 128))


def save_wrong_at_real_depths(plane, page_table, positions):
    return _save_wrong_where(plane, page_table, positions, positions.shape[1] in (3, 7))


def save_wrong_at_real_head_dims(plane, page_table, positions):
    return _save_wrong_where(plane, page_table, positions, plane.dim() > 2 and plane.shape[-1] in (64, 128, 256))


def commit_wrong_at_real_depths(state, slots, checkpoints, num_accepted):
    """gdn_commit's answer, except that drafts of 7 tokens commit nothing."""
    COMMIT.validate(state, slots, checkpoints, num_accepted)
    if checkpoints.shape[1] != 7:
        COMMIT.reference(state, slots, checkpoints, num_accepted)


REAL_SIZE_CASES = [  # (wrong implementation, its op, the cell whose corners pin the real size)
    pytest.param("save_wrong_at_real_page_sizes", ROLLBACK, "row_slots", id="rollback_save-S"),
    pytest.param("save_wrong_at_real_depths", ROLLBACK, "row_slots", id="rollback_save-T"),
    pytest.param("save_wrong_at_real_head_dims", ROLLBACK, "head_slots", id="rollback_save-E"),
    pytest.param("commit_wrong_at_real_depths", COMMIT, "bf16_state", id="gdn_commit-T"),
]


def assert_wrong_at_one_real_size_rejected(name: str, entry, cell_id: str) -> None:
    """Beside the contract's references of its siblings; parity alone is asked (a partial run: the corners
    are what is tested, and the recurrences' other oracles cost seconds per corner on the CPU)."""
    siblings = {sibling: op(sibling).reference for sibling in entry.siblings}
    impl = Implementation(f"{__name__}:{name}", {**siblings, entry.name: globals()[name]})
    result = certify_cell(entry, entry.cell(cell_id), impl, max_examples=1, oracles=("parity",))
    assert_rejected(result, "parity", impl.label)


@pytest.mark.parametrize("name, entry, cell_id", REAL_SIZE_CASES)
def test_a_kernel_wrong_only_at_one_real_size_is_rejected_on_the_cpu(name, entry, cell_id):
    assert_wrong_at_one_real_size_rejected(name, entry, cell_id)


def test_the_cpu_corners_draft_every_real_depth():
    """gdn_verify's corners (whose parity costs seconds each here, beyond a control's budget) on the CPU too:
    1, 3 and 7 drafted tokens, each on a corner of rows."""
    verify = op("gdn_verify")
    for cell in verify.cells:
        corners = verify.strategy_module.corners(cell, torch.device("cpu"))
        assert set(PRODUCTION_SIZES["speculative_depth"]) <= {recipe["T"] for recipe in corners if recipe["B"]}


# Which dimension of which op is a production size of which kind (CONTRACTS.md's list).
PRODUCTION_DIMS = {
    "greedy_argmax": {"V": ("vocabulary",)},
    "strict_accept": {"K": ("speculative_depth",)},
    "rms_norm_gated": {"H": ("hidden",)},
    "nvfp4_quantize": {"K": ("hidden",)},
    "fp8_gemv": {"K": ("hidden",), "N": ("hidden", "vocabulary")},
    "nvfp4_gemv": {"K": ("hidden",), "N": ("hidden", "vocabulary")},
    "paged_decode": {"S": ("page_size",), "group": ("gqa_group",), "D": ("head_dim",)},
    "paged_decode_nvfp4kv": {"S": ("page_size",), "group": ("gqa_group",), "D": ("head_dim",)},
    "rollback_save": {"S": ("page_size",), "T": ("speculative_depth",), "E": ("head_dim",)},
    "rollback_restore": {"S": ("page_size",), "T": ("speculative_depth",), "E": ("head_dim",)},
    "gdn_decode": {"Dk": ("head_dim",), "Dv": ("head_dim",), "group": ("gqa_group",)},
    "gdn_verify": {"T": ("speculative_depth",), "Dk": ("head_dim",), "Dv": ("head_dim",), "group": ("gqa_group",)},
    "gdn_commit": {"T": ("speculative_depth",), "Dk": ("head_dim",), "Dv": ("head_dim",)},
}


@pytest.mark.parametrize("op_name", list(PRODUCTION_DIMS))
def test_every_production_size_a_cell_holds_is_one_of_its_corners_on_a_gpu(op_name):
    entry = op(op_name)
    for cell in entry.cells:
        corners = entry.strategy_module.corners(cell, torch.device("cuda"))
        size_of = getattr(entry.strategy_module, "production_size", lambda recipe, name: recipe[name])
        for name, kinds in PRODUCTION_DIMS[op_name].items():
            held = {size for kind in kinds for size in PRODUCTION_SIZES[kind] if size in cell.bounds[name]}
            reached = {size_of(recipe, name) for recipe in corners}
            assert held <= reached, f"{cell.id}: {name} {sorted(held - reached)} is no corner"
