"""The quarantine ledger: known-bad cells are never launched and shown as such everywhere, a ledger
entry whose cell now passes is an error, and every schema problem names ``file:line``."""
from __future__ import annotations

import json
import textwrap
from xml.etree import ElementTree

import pytest

from ops import quarantine
from ops.catalog import Arch
from ops.sampling.greedy_argmax import ENTRY
from oracles.battery import CellResult
from suites import certification
from suites.certification import certify_cells_here
from tools import certify_cells
from tools.engine.certify import certificate_section

pytestmark = pytest.mark.cpu
IMPLS = "suites.sampling.greedy_argmax_impls"
ENTRY_TEXT = "- {op: greedy_argmax, cell: decode_small_batch, arch: cpu-interp, issue: 10, reason: a control}\n"


def _ledger(tmp_path, body: str):
    path = tmp_path / "quarantine.yml"
    path.write_text(textwrap.dedent(body))
    return path


def test_the_committed_ledger_is_valid():
    for held in quarantine.load():
        assert held.reason or held.issue


ONE = "version: 1\nquarantine:\n- "  # a ledger of one entry, on line 3
# (id, ledger text, the line the error names, what it says)
BROKEN = [
    ("not_yaml", "version: 1\nquarantine: [\n", None, "not readable YAML"),
    ("version_2", "version: 2\nquarantine: []\n", 1, "'version: 1'"),
    ("wrong_top_key", "version: 1\nquarantined: []\n", 1, "top-level keys"),
    ("not_a_list", "version: 1\nquarantine: {op: greedy_argmax}\n", 2, "a list of entries"),
    ("entry_not_a_mapping", ONE + "greedy_argmax\n", 3, "an entry is a mapping"),
    ("missing_arch", ONE + "{op: greedy_argmax, cell: empty_batch, reason: x}\n", 3, "missing ['arch']"),
    ("unknown_key", ONE + "{op: greedy_argmax, cell: empty_batch, arch: sm90, why: x}\n", 3, "unknown ['why']"),
    ("no_issue_or_reason", ONE + "{op: greedy_argmax, cell: empty_batch, arch: sm90}\n", 3, "cite an 'issue'"),
    ("unknown_op", ONE + "{op: greedy_argmx, cell: empty_batch, arch: sm90, issue: 1}\n", 3, "no op named"),
    ("unknown_cell", ONE + "{op: greedy_argmax, cell: big, arch: sm90, issue: 1}\n", 3, "has no cell 'big'"),
    ("unknown_arch", ONE + "{op: greedy_argmax, cell: empty_batch, arch: sm91, issue: 1}\n", 3, "no arch 'sm91'"),
    ("empty_reason", ONE + "{op: greedy_argmax, cell: empty_batch, arch: sm90, reason: '  '}\n", 3, "non-empty"),
    ("duplicate", "version: 1\nquarantine:\n" + ENTRY_TEXT + "# the same cell again\n" + ENTRY_TEXT, 5,
     "is already quarantined at"),
]


@pytest.mark.parametrize("text, line, says", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_broken_ledger_names_file_and_line(tmp_path, text, line, says):
    path = _ledger(tmp_path, text)
    with pytest.raises(quarantine.QuarantineError) as error:
        quarantine.load(path)
    where = f"{path}:{line}:" if line else f"{path}:"
    assert str(error.value).startswith(where) and says in str(error.value), str(error.value)


def test_an_arch_the_op_does_not_claim_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(ENTRY, "archs", frozenset({Arch.SM90}))
    with pytest.raises(quarantine.QuarantineError, match=r":3: greedy_argmax does not claim cpu-interp"):
        quarantine.load(_ledger(tmp_path, "version: 1\nquarantine:\n" + ENTRY_TEXT))


def _certify(capsys, *words) -> tuple[int, str, str]:
    return certify_cells_here(["--op", "greedy_argmax", "--device", "cpu", *words], capsys)


def test_a_quarantined_cell_is_not_launched_and_is_reported(tmp_path, capsys):
    ledger = _ledger(tmp_path, "version: 1\nquarantine:\n" + ENTRY_TEXT)
    status, out, err = _certify(capsys, "--quarantine", str(ledger), "--cell", "empty_batch", "--cell",
                                "decode_small_batch", "--max-examples", "0", "--report", str(tmp_path / "report.json"))
    assert status == 0, out + err
    assert f"greedy_argmax/decode_small_batch: QUARANTINED ({ledger}:3: a control; issue 10): not launched" in out
    results = {r["cell"]: r for r in json.loads((tmp_path / "report.json").read_text())["results"]}
    assert results["decode_small_batch"]["status"] == "quarantined"
    assert results["decode_small_batch"]["examples"] == 0 and results["decode_small_batch"]["oracles"] == []
    assert results["decode_small_batch"]["quarantine"] == {"issue": "10", "reason": "a control",
                                                           "ledger": f"{ledger}:3"}
    assert results["empty_batch"]["status"] == "certified"


def test_the_html_report_and_junit_show_a_quarantined_cell(tmp_path, capsys):
    ledger = _ledger(tmp_path, "version: 1\nquarantine:\n" + ENTRY_TEXT)
    page, xml = tmp_path / "report.html", tmp_path / "cells.xml"
    assert certify_cells.main(["--op", "greedy_argmax", "--device", "cpu", "--quarantine", str(ledger), "--max-examples", "0",
                         "--cell", "empty_batch", "--cell", "decode_small_batch", "--report", str(page),
                         "--junit", str(xml)]) == 0
    assert "QUARANTINED" in capsys.readouterr().out
    assert '<td class="status s-quarantined">quarantined</td>' in page.read_text()
    cases = {case.get("name"): case for case in ElementTree.parse(xml).getroot().iter("testcase")}
    assert cases["decode_small_batch"].find("skipped").get("message") == f"quarantined ({ledger}:3): a control; issue 10"


def test_a_quarantined_cell_says_so_in_the_certificate(tmp_path):
    held = quarantine.load(_ledger(tmp_path, "version: 1\nquarantine:\n" + ENTRY_TEXT))[0]
    results = {(ENTRY.name, "decode_small_batch"): CellResult(ENTRY.name, "decode_small_batch", "quarantined",
                                                              annotations=held.record())}
    section = certificate_section(ENTRY, results, {}, command="c", max_examples=0, seed=0, date="d")
    assert section["cells"]["decode_small_batch"]["status"] == "quarantined"
    assert section["cells"]["decode_small_batch"]["quarantine"]["reason"] == "a control"


def test_a_suite_skips_a_quarantined_cell_with_the_reason(tmp_path, monkeypatch):
    held = quarantine.load(_ledger(tmp_path, "version: 1\nquarantine:\n" + ENTRY_TEXT))
    monkeypatch.setattr(certification, "_ledger", lambda: held)
    with pytest.raises(pytest.skip.Exception, match="quarantined: .*:3: a control; issue 10"):
        certification.certify_cell(ENTRY, ENTRY.cell("decode_small_batch"))


@pytest.mark.parametrize("impl, code, says", [
    ("int32_output", 0, "each still fails"),
    ("correct_via_max", 1, "now passes on cpu-interp: delete its entry"),
])
def test_check_quarantine_fails_when_a_quarantined_cell_passes(tmp_path, capsys, impl, code, says):
    ledger = _ledger(tmp_path, "version: 1\nquarantine:\n" + ENTRY_TEXT)
    status, out, err = _certify(capsys, "--quarantine", str(ledger), "--check-quarantine", "--impl",
                                f"{IMPLS}:{impl}", "--max-examples", "0", "--no-shrink")
    assert status == code and says in out + err, out + err
    if code:
        assert f"{ledger}:3: greedy_argmax/decode_small_batch now passes" in err


def test_a_broken_ledger_stops_certify_cells_in_one_line(tmp_path, capsys):
    ledger = _ledger(tmp_path, "version: 1\nquarantine:\n- {op: greedy_argmax, cell: big, arch: sm90, issue: 1}\n")
    status, _, err = _certify(capsys, "--quarantine", str(ledger), "--list")
    assert status == 2 and f"{ledger}:3: greedy_argmax has no cell 'big'" in err, err
    assert len(err.strip().splitlines()) == 1
