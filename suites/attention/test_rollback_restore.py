"""rollback_restore: every cell through the whole battery, the battery and the stateful oracle alone
against wrong restores, and ``tools/certify-cells --impl`` judging a module that provides both ops."""
from __future__ import annotations

import sys

import pytest
import torch

from oracles.battery import Implementation
from oracles.failures import OracleFailure
from ops.attention.rollback_restore import ENTRY
from ops.certificates import used_sources
from references.attention.paged_slots import bits, rollback_restoration
from references.attention.rollback_save import rollback_save as reference_save
from references.attention.rollback_restore_strategy import build, corners
from suites.attention import rollback_restore_impls as impls
from suites.attention import rollback_save_impls
from suites.certification import arch_marks, assert_rejected, certify_cell, certify_cells_here, machine_device
from suites.op_suite import OpSuite
from tools.engine.worker import load_implementation

pytestmark = arch_marks(ENTRY.archs)
IMPLS = "suites.attention.rollback_restore_impls"


def test_a_new_seed_changes_the_step_but_no_shape():
    """Graph parity replays the captured call on the recipe under new seeds: positions, pages, masks and
    values must all change, shapes and layouts must not."""
    recipe = corners(ENTRY.cell("head_slots"), machine_device())[0]
    first, second = build(recipe, machine_device()), build({**recipe, "seed": recipe["seed"] + 1}, machine_device())
    for name in first:
        assert first[name].shape == second[name].shape and first[name].stride() == second[name].stride(), name
        assert not torch.equal(_bits_or_self(first[name]), _bits_or_self(second[name])), name


def _bits_or_self(tensor):
    return tensor if tensor.dtype == torch.bool else bits(tensor)


@pytest.mark.parametrize("name", ["rollback_save", "rollback_restore"])
def test_each_corner_falls_in_its_cell_and_the_stock_fallback_keeps_the_contract(name):
    """Certified dispatch maps an input to its cell; uncertified here, it runs the stock op, which must
    agree with the reference on every corner (no table, no entries, all rejected included)."""
    from ops.catalog import op
    from oracles.bitwise import check_bitwise
    from oracles.determinism import run_on_copy

    entry = op(name)
    for cell in entry.cells:
        for recipe in corners(cell, machine_device()):
            step = build(recipe, machine_device())
            kwargs = {argument: step[argument] for argument in entry.signature.parameters}
            assert entry.cell_of(**kwargs) is cell
            check_bitwise(run_on_copy(entry.stock, kwargs, entry.in_place),
                          run_on_copy(entry.reference, kwargs, entry.in_place), f"{name} stock on {recipe}")


def test_certificate_digest_covers_the_shared_kernel_and_contract_helpers():
    """rollback_restore runs rollback_save's kernel and both references share paged_slots: a change to
    either must make the certificate stale."""
    assert {"rollback_save.py", "paged_slots.py"} <= {path.name for path in used_sources(ENTRY)}


def _wrong(name: str) -> Implementation:
    return Implementation(f"{IMPLS}:{name}", {"rollback_restore": getattr(impls, name),
                                              "rollback_save": reference_save})


# (wrong restore, the cell whose corners reach its bug, the oracle of the battery that catches it first)
WRONG = [
    ("restores_all_rows", "head_slots", "parity"),
    ("restores_kept_rows", "head_slots", "parity"),
    ("writes_through_minus_one_position", "head_slots", "parity"),
    ("ignores_minus_one_page", "head_slots", "parity"),
    ("past_table_lands_in_last_page", "head_slots", "parity"),
    ("mask_read_with_positions_strides", "head_slots", "parity"),
    ("writes_slot_padding", "head_slots", "stateful"),      # right on every element: only the whole-storage check sees it
]
SUITE = OpSuite(ENTRY, _wrong, wrong=WRONG, correct=Implementation(
    IMPLS, {"rollback_save": impls.rollback_save, "rollback_restore": impls.rollback_restore}))

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test()
test_battery_accepts_another_correct_pair = SUITE.accepts_test(max_examples=2)


@pytest.mark.parametrize("name", [w[0] for w in WRONG])
def test_stateful_oracle_alone_rejects(name):
    """The restoration property, run without parity, catches each wrong restore on some corner step."""
    findings = []
    for cell_id in ("row_slots", "head_slots"):
        for recipe in corners(ENTRY.cell(cell_id), machine_device()):
            try:
                rollback_restoration(_wrong(name), build(recipe, machine_device()))
            except OracleFailure as failure:
                findings.append(failure)
    assert findings, f"the restoration property accepted {name} on every corner"
    assert all(failure.oracle == "stateful" for failure in findings)


def test_stateful_oracle_needs_the_sibling_save_from_the_implementation():
    """A right restore beside a wrong save breaks the property: the pair is judged, not the restore alone."""
    impl = Implementation("wrong save sibling", {"rollback_restore": impls.rollback_restore,
                                                 "rollback_save": rollback_save_impls.saves_the_next_slot})
    assert_rejected(certify_cell(ENTRY, ENTRY.cell("head_slots"), impl, max_examples=0), "stateful", impl.label)


# -- tools/certify-cells --impl MODULE with both functions -----------------------------------------
def test_impl_module_provides_both_ops_or_the_reference_stands_in(tmp_path, monkeypatch):
    from ops.catalog import op

    both = load_implementation(IMPLS, [ENTRY])["rollback_restore"]
    assert both["rollback_restore"] is impls.rollback_restore and both["rollback_save"] is impls.rollback_save
    (tmp_path / "restore_only.py").write_text(f"from {IMPLS} import rollback_restore\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    alone = load_implementation("restore_only", [ENTRY])["rollback_restore"]
    assert alone["rollback_save"] is op("rollback_save").reference


def _certify(capsys, *words) -> tuple[int, str, str]:
    return certify_cells_here(["--device", "cpu", "--cell", "head_slots", "--max-examples", "0", "--no-shrink", *words],
                              capsys)


@pytest.mark.parametrize("op_name", ["rollback_restore", "rollback_save"])
def test_cli_judges_a_module_of_both_ops(op_name, capsys):
    status, out, err = _certify(capsys, "--op", op_name, "--impl", IMPLS)
    assert status == 0, out + err
    assert "PASSED" in out and "CERTIFIED" not in out and "wrote" not in out


def test_cli_rejects_a_module_whose_save_is_wrong(tmp_path, monkeypatch, capsys):
    (tmp_path / "wrong_save_pair.py").write_text(
        "from suites.attention.rollback_save_impls import saves_the_next_slot as rollback_save\n"
        f"from {IMPLS} import rollback_restore\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))   # where the tool and its host look for an --impl module
    monkeypatch.setattr(sys, "path", list(sys.path))  # the tool puts it on this process's path
    status, out, err = _certify(capsys, "--op", "rollback_restore", "--impl", "wrong_save_pair")
    assert status == 1 and "oracle:  stateful" in out, out + err


def test_bench_case_and_its_variants_keep_the_contract():
    """The bench's step (scaled down) is a valid step, and every launch-plan variant restores it right."""
    from oracles.bitwise import check_bitwise
    from oracles.determinism import run_on_copy
    from ops.attention.rollback_restore import _bench_step, bench_variants

    step = _bench_step(8, 16, 4, 2, 4)(machine_device())
    expected = run_on_copy(ENTRY.reference, step, ENTRY.in_place)
    assert ENTRY.cell_of(**step) is ENTRY.cell("head_slots")
    for label, variant in bench_variants(**step).items():
        check_bitwise(run_on_copy(variant, step, ENTRY.in_place), expected, f"variant {label}")
