"""greedy_argmax: every cell through the whole battery, and the battery against wrong kernels."""
from __future__ import annotations

import os
import subprocess

import pytest

from ops.sampling.greedy_argmax import ENTRY
from suites.certification import arch_marks, assert_certified, certify_cell, certify_cells_here, judged
from suites.op_suite import OpSuite
from suites.sampling import greedy_argmax_impls as impls

pytestmark = arch_marks(ENTRY.archs)
IMPLS = "suites.sampling.greedy_argmax_impls"

# (wrong implementation, the cell whose corners reach its bug, the oracle that must catch it)
WRONG = [
    ("last_index_on_ties", "decode_small_batch", "parity"),
    ("nan_ignored", "decode_small_batch", "parity"),
    ("strided_rows_read_as_contiguous", "decode_small_batch", "parity"),
    ("int32_output", "decode_small_batch", "parity"),
    ("dropped_tail", "decode_small_batch", "parity"),
    ("negative_zero_below_positive", "decode_small_batch", "parity"),
    ("large_batch_bug", "decode_large_batch", "parity"),
    ("missing_refusal", "decode_small_batch", "refusals"),
    ("later_block_wins_ties", "decode_small_batch", "parity"),
    ("bug_between_1000_and_4000_columns", "decode_mid_batch", "parity"),  # its 10th draw: docs/draws.md
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_via_max")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=10)
test_battery_accepts_another_correct_implementation = SUITE.accepts_test()


def test_large_batch_bug_hides_from_small_batches():
    """The large-batch control is right below 256 rows: only a cell reaching that path exposes it."""
    impl = judged(ENTRY, impls, "large_batch_bug")
    assert_certified(certify_cell(ENTRY, ENTRY.cell("decode_mid_batch"), impl, max_examples=4), impl.label)


def _certify(capsys, *words) -> tuple[int, str, str]:
    return certify_cells_here(["--op", "greedy_argmax", "--device", "cpu", *words], capsys)


def test_cli_rejects_a_wrong_impl_with_a_reproduction(tmp_path, capsys):
    status, out, err = _certify(capsys, "--impl", f"{IMPLS}:dropped_tail", "--cell", "decode_small_batch", "--no-shrink")
    assert status == 1, out + err
    reproduce = next(line for line in out.splitlines() if "reproduce:" in line)
    command = reproduce.split("reproduce:", 1)[1].strip()
    # from another directory, without this session's PYTHONPATH, in a process of its own: the line carries all
    # it needs
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    replayed = subprocess.run(command, shell=True, capture_output=True, text=True, cwd=tmp_path, env=environment)
    assert replayed.returncode == 1 and "oracle:  parity" in replayed.stdout, replayed.stdout + replayed.stderr


def test_cli_accepts_a_correct_impl_and_writes_no_certificate(tmp_path, capsys):
    status, out, err = _certify(capsys, "--impl", f"{IMPLS}:correct_via_max", "--max-examples", "1",
                                "--report", str(tmp_path / "r.json"))
    assert status == 0, out + err
    assert "wrote" not in out and (tmp_path / "r.json").exists()


@pytest.mark.parametrize("words, reason", [
    (("--impl", "no_such_module_here"), "cannot import"),
    (("--impl", f"{IMPLS}:no_such_function"), "no callable"),
    (("--cell", "no_such_cell"), "no cell"),
    (("--max-examples", "-1"), "negative"),
    (("--replay", "{not json"), "--replay"),
    (("--oracles", "numerics,bogus"), "--oracles: no oracle or group 'bogus'"),
])
def test_cli_usage_errors_exit_2_in_one_line(words, reason, capsys):
    status, _, stderr = _certify(capsys, *words)
    assert status == 2 and reason in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
