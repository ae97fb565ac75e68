"""tools/verdict-table: each oracle's verdict aggregated over the cells a run judged, ours first."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.engine.verdict_table import OURS, markdown, rows_of, table

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


def test_each_row_says_how_deep_and_where_it_was_judged(tmp_path):
    """Issue 29 asks every verdict at the policy's depth: a row of 14 draws and one of 220 must read apart (the
    control: the same verdicts, told apart by the column alone); a report that names neither leaves it empty."""
    passing = {"parity": {"verdict": "pass"}}
    shallow, deep, bare = (tmp_path / f"{name}.json" for name in ("shallow", "deep", "bare"))
    for path, impl, facts in [(shallow, "a.mod:argmax", {"max_examples": 14, "device": "NVIDIA H200"}),
                              (deep, "b.mod:argmax", {"max_examples": 220, "device": "NVIDIA H100 80GB HBM3"}),
                              (bare, "c.mod:argmax", {})]:
        path.write_text(json.dumps({"impl": impl, **facts, "results": [
            {"op": "greedy_argmax", "cell": "c", "examples": 3, "verdicts": passing}]}))
    rows = rows_of([shallow, deep, bare])
    assert [row.verdicts for row in rows[:2]] == [rows[0].verdicts] * 2
    assert [row.judged for row in rows] == ["14 draws a cell; NVIDIA H200",
                                            "220 draws a cell; NVIDIA H100 80GB HBM3", ""]
    assert "| 220 draws a cell; NVIDIA H100 80GB HBM3 |" in markdown(rows)


def test_the_tool_refuses_a_file_that_is_no_run_report_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    run = subprocess.run([sys.executable, "tools/verdict-table", str(bad)], capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr


def _bench(tmp_path, name: str, device: str, rows: list[tuple[str, str, float]]) -> str:
    """A ``tools/bench --out`` table of ``(op label, impl, time us)`` rows, as the tool heads it."""
    head = "| op | case | impl | time (us) | adapter glue (us) | timed as | vs stock | GB/s | % of copy | target |"
    lines = [f"`tools/bench --op paged_decode` on {device}, 2026-12-06 02:37 UTC, torch 2.11.0+cu130; copy bandwidth "
             "3028 GB/s (device-to-device, read + write, same run)", "", head, "|" + "---|" * 10]
    lines += [f"| {op} | B=64 | {impl} | {us:.2f} |  | graph | 1.00x | 2000 | 66.0% |  |" for op, impl, us in rows]
    path = tmp_path / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_time_names_its_device_and_ours_takes_only_its_own_backends_time(tmp_path):
    """Times of two machines side by side must say so (issue #29's fair timing), and a backend that was not
    benched gets no time of another backend's."""
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"impl": None, "results": [
        {"op": "paged_decode", "cell": "c", "backend": backend, "examples": 3, "verdicts": {}}
        for backend in ("triton", "cute")]}))
    theirs = tmp_path / "theirs.json"
    theirs.write_text(json.dumps({"impl": "pkg.mod:paged_decode", "results": [
        {"op": "paged_decode", "cell": "c", "examples": 3, "verdicts": {}}]}))
    h200 = _bench(tmp_path, "a", "NVIDIA H200", [("paged_decode [triton]", "kernel", 520.7)])
    h100 = _bench(tmp_path, "b", "NVIDIA H100 80GB HBM3", [("paged_decode [triton]", "kernel", 729.7),
                                                           ("paged_decode [triton]", "pkg.mod:paged_decode", 753.1)])
    rows = {row.implementation: row.bench for row in table([str(ours), str(theirs)], [h200, h100])}
    assert rows[f"{OURS}, triton"] == "520.7 us (66% of copy; B=64; NVIDIA H200)"
    assert rows["pkg.mod:paged_decode"] == "753.1 us (66% of copy; B=64; NVIDIA H100 80GB HBM3)"
    assert rows[f"{OURS}, cute"] == ""   # the table timed the triton kernel only
