"""Test lists and the quarantine ledger read strictly (issue 16.5): duplicate keys, non-scalar keys, text
that is not UTF-8 and nonsense ranges are errors naming file:line — exit 2 in check-test-lists, a pytest
usage error (not INTERNALERROR) for --test-list, a QuarantineError for the ledger."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ops import quarantine
from suites.claims import REPO
from tools.engine.test_lists import ListFormatError, load_list

pytestmark = pytest.mark.cpu

HEAD = "version: 0.0.1\nl0_probe:\n- condition:\n"
TESTS = "  tests:\n  - suites/test_dispatch.py\n"
TERMS = "    terms: {stage: pre_merge, arch: cpu}\n"
# (id, list text, the line the error names, what it says)
BROKEN = [
    ("duplicate_top_key", HEAD + TERMS + TESTS + "l0_probe: []\n", 7, "duplicate key 'l0_probe' (first at line 2)"),
    ("duplicate_block_key", HEAD + TERMS + "    terms: {stage: post_merge, arch: cpu}\n" + TESTS, 5,
     "duplicate key 'terms'"),
    ("complex_key", HEAD + TERMS + "    ? [a, b]\n    : 1\n" + TESTS, 5, "a mapping key must be a plain scalar"),
    ("range_upside_down", HEAD + TERMS + "    ranges:\n      system_gpu_count: {gte: 4, lte: 1}\n" + TESTS, 6,
     "lower bound 4 is above upper bound 1"),
    ("range_not_a_number", HEAD + TERMS + "    ranges:\n      system_gpu_count: {gte: one}\n" + TESTS, 6,
     "gte is 'one', not a number"),
    ("range_unknown_bound", HEAD + TERMS + "    ranges:\n      system_gpu_count: {above: 1}\n" + TESTS, 6,
     "must map some of gte, gt, lte, lt"),
]


def _write(tmp_path, text: str | bytes):
    path = tmp_path / "l0_probe.yml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize("text, line, says", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_broken_list_names_file_and_line(tmp_path, text, line, says):
    with pytest.raises(ListFormatError) as error:
        load_list(_write(tmp_path, text))
    assert str(error.value).startswith(f"l0_probe.yml:{line}:") and says in str(error.value), str(error.value)


def test_a_list_that_is_not_utf8_names_its_line(tmp_path):
    with pytest.raises(ListFormatError, match=r"^l0_probe.yml:4: not UTF-8"):
        load_list(_write(tmp_path, (HEAD + "    terms: {stage: caf\xe9, arch: cpu}\n" + TESTS).encode("latin-1")))


def test_a_sound_range_is_accepted(tmp_path):
    text = HEAD + TERMS + "    ranges:\n      system_gpu_count: {gte: 1, lte: 1}\n" + TESTS
    assert [test.test_id for test in load_list(_write(tmp_path, text))] == ["suites/test_dispatch.py"]


def test_check_test_lists_exits_2_in_one_line(tmp_path):
    path = _write(tmp_path, BROKEN[0][1])
    run = subprocess.run([sys.executable, "tools/check-test-lists", str(path)], cwd=REPO, capture_output=True,
                         text=True)
    assert run.returncode == 2 and "l0_probe.yml:7: duplicate key" in run.stderr, run.stdout + run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_pytest_test_list_is_a_usage_error_not_an_internal_error(tmp_path):
    path = _write(tmp_path, b"version: 0.0.1\nl0_probe: \xff\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                          str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), "--test-list", str(path)],
                         capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    output = run.stdout + run.stderr
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert "INTERNALERROR" not in output and "l0_probe.yml:2: not UTF-8" in output, output


LEDGER_ENTRY = "- {op: greedy_argmax, cell: empty_batch, arch: sm90, issue: 1}\n"


@pytest.mark.parametrize("text, line, says", [
    (b"version: 1\nversion: 1\nquarantine: []\n", 2, "duplicate key 'version'"),
    (b"version: 1\nquarantine:\n- {op: greedy_argmax, op: strict_accept, cell: empty_batch, arch: sm90, issue: 1}\n",
     3, "duplicate key 'op'"),
    (b"version: 1\nquarantine:\n- {[op]: greedy_argmax, cell: empty_batch, arch: sm90, issue: 1}\n", 3,
     "plain scalar"),
    (b"version: 1\nquarantine:\n- {op: greedy_argmax, cell: empty_batch, arch: sm90, reason: \xe9}\n", 3,
     "not UTF-8"),
], ids=["duplicate_top_key", "duplicate_entry_key", "complex_key", "not_utf8"])
def test_the_quarantine_ledger_is_read_strictly(tmp_path, text, line, says):
    path = tmp_path / "quarantine.yml"
    path.write_bytes(text)
    with pytest.raises(quarantine.QuarantineError) as error:
        quarantine.load(path)
    assert str(error.value).startswith(f"{path}:{line}:") and says in str(error.value), str(error.value)
