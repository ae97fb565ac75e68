"""tools/verdict-table: each oracle's verdict aggregated over the cells a run judged, ours first."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.engine.verdict_table import OURS, markdown, rows_of

pytestmark = pytest.mark.cpu


def _run(tmp_path, name: str, impl: str | None, verdicts: list[dict]) -> str:
    results = [{"op": "greedy_argmax", "cell": f"cell{i}", "examples": 3, "worst_kernel_error_ulp": 0,
                "worst_stock_error_ulp": 0, "verdicts": v} for i, v in enumerate(verdicts)]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"impl": impl, "results": results}))
    return str(path)


def test_a_failure_in_one_cell_of_two_reads_fail_1_of_2_and_ours_comes_first(tmp_path):
    passing, failing = {"parity": {"verdict": "pass"}}, {"parity": {"verdict": "fail", "finding": "x"}}
    theirs = _run(tmp_path, "theirs", "pkg.mod:argmax", [passing, failing])
    ours = _run(tmp_path, "ours", None, [passing, {**passing, "stateful": {"verdict": "not applicable"}}])
    rows = rows_of([theirs, ours])
    assert [row.implementation for row in rows] == [OURS, "pkg.mod:argmax"]
    assert rows[0].verdicts["parity"] == "pass" and rows[1].verdicts["parity"] == "FAIL 1/2"
    assert rows[0].verdicts["stateful"] == "n/a" and rows[0].verdicts["refusals"] == "-"
    assert "FAIL 1/2" in markdown(rows)


def test_the_tool_refuses_a_file_that_is_no_run_report_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    run = subprocess.run([sys.executable, "tools/verdict-table", str(bad)], capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
