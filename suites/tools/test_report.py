"""The certification report (tools/engine/report.py, ``tools/certify-cells --report PATH.html --junit PATH``):
what the grid reads from certificate files, a self-contained page, a browser that shows the grid, and
JUnit XML a CI system can read."""
from __future__ import annotations

import dataclasses
import html
import json
import pathlib
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from ops import certificates
from ops.catalog import Arch, entries, kernels
from suites.certification import routable_section
from tools import bench
from tools import certify_cells
from tools.engine import report

pytestmark = pytest.mark.cpu

IMPLS = "suites.sampling.greedy_argmax_impls"


def record(status="certified", examples=None, kernel=0.0, stock=0.0, **extra) -> dict:
    """A cell's record; by default drawn as deep as the policy asks on every arch."""
    examples = certificates.POLICY.examples_on_every_arch() if examples is None else examples
    return {"status": status, "examples": examples, "worst_kernel_error_ulp": kernel, "worst_stock_error_ulp": stock,
            "stock_disagreements": 0, "oracles": list(certificates.POLICY.oracles), "skipped": {}, "exercised": {},
            **extra}


def section(entry, cells: dict, digest: str | None = None) -> dict:
    """A section meeting the certification policy, holding ``cells``."""
    return {**routable_section(entry, {}, digest), "cells": cells}


def test_the_grid_reads_every_certificate_section_as_it_is_now(tmp_path, monkeypatch):
    entry = entries()["greedy_argmax"]
    monkeypatch.setattr(certificates, "certificate_path", lambda entry: tmp_path / f"{entry.name}.cert.json")
    cells = {"empty_batch": record(), "decode_small_batch": record("failed"), "decode_mid_batch": record()}
    certificates.write_section(entry, Arch.CPU_INTERP, section(entry, cells))
    certificates.write_section(entry, Arch.SM90, section(entry, cells, "0" * 64))
    only_two_archs = dataclasses.replace(entry, archs=frozenset({Arch.CPU_INTERP, Arch.SM90}))
    status = {(square.cell, square.arch): square.status for square in report.collect_grid([only_two_archs])}
    assert status[("empty_batch", "cpu-interp")] == "certified"
    assert status[("decode_small_batch", "cpu-interp")] == "failing"
    assert status[("decode_large_batch", "cpu-interp")] == "unknown"   # the section records no such cell
    assert {status[(cell, "sm90")] for cell in cells} == {"stale"}     # earned on other sources
    assert status[("decode_large_batch", "sm90")] == "unknown"
    assert status[("empty_batch", "sm100")] == "not claimed"


def test_a_cell_in_the_quarantine_ledger_reads_quarantined_whatever_its_certificate_says(tmp_path, monkeypatch):
    from ops import quarantine

    entry = entries()["greedy_argmax"]
    monkeypatch.setattr(certificates, "certificate_path", lambda entry: tmp_path / f"{entry.name}.cert.json")
    certificates.write_section(entry, Arch.SM90, section(entry, {"empty_batch": record("failed"),
                                                                 "decode_small_batch": record("failed")}))
    ledger = tmp_path / "quarantine.yml"
    ledger.write_text("version: 1\nquarantine:\n  - {op: greedy_argmax, cell: empty_batch, arch: sm90, issue: 10}\n")
    load = quarantine.load
    monkeypatch.setattr(quarantine, "load", lambda path=ledger: load(path))
    status = {(square.cell, square.arch): square.status for square in report.collect_grid([entry])}
    assert status[("empty_batch", "sm90")] == "quarantined"
    assert status[("decode_small_batch", "sm90")] == "failing"   # the control: only the ledger's cell


def test_each_kernel_of_an_op_has_its_own_rows_read_from_its_own_certificate(tmp_path, monkeypatch):
    monkeypatch.setattr(certificates, "certificate_path", lambda entry: tmp_path / f"{entry.name}_{entry.backend}.json")
    cute, triton = kernels("rms_norm_gated")
    certificates.write_section(triton, Arch.SM90, section(triton, {"empty_batch": record()}))
    # the cute section was earned on other sources: it, and not the triton one, must read stale
    certificates.write_section(cute, Arch.SM90, section(cute, {"empty_batch": record()}, "0" * 64))
    status = {(square.op, square.arch): square.status for square in report.collect_grid([cute, triton])
              if square.cell == "empty_batch"}
    assert status[("rms_norm_gated [triton]", "sm90")] == "certified"
    assert status[("rms_norm_gated [cute]", "sm90")] == "stale"
    assert status[("rms_norm_gated [cute]", "cpu-interp")] == "not claimed"
    assert {square.op for square in report.collect_grid([entries()["greedy_argmax"]])} == {"greedy_argmax"}


def test_a_kernel_left_out_of_the_catalog_is_listed_as_not_judged():
    left_out = {"module": "ops.norm.rms_norm_gated_cute", "kernel_file": "ops/norm/rms_norm_gated_cute.py",
                "why": "nvidia-cutlass-dsl is not installed", "certificate_archs": ["sm90"]}
    page = report.render_html(synthetic_grid(), None, [], [], unjudged=[left_out])
    assert "Kernels not in the catalog on this machine" in page
    assert "<td>sm90</td>" in page and "ops.norm.rms_norm_gated_cute" in page and "nvidia-cutlass-dsl" in page
    assert "Kernels not in the catalog" not in report.render_html(synthetic_grid(), None, [], [])


def synthetic_grid() -> list[report.GridCell]:
    """Two ops x two cells x four archs holding every status, a band op's errors among them."""
    section = {"device": "NVIDIA H200", "date": "2026-11-29", "command": "tools/certify-cells --device cuda",
               "versions": {"torch": "2.11.0"}}
    layout = {("band_op", "decode"): ["certified", "stale", "failing", "unknown"],
              ("band_op", "prefill"): ["certified", "certified", "quarantined", "below policy"],
              ("exact_op", "small"): ["failing", "stale", "unknown", "not claimed"],
              ("exact_op", "large"): ["certified", "unknown", "stale", "not claimed"]}
    grid = []
    for (op, cell), statuses in layout.items():
        for arch, status in zip(("cpu-interp", "sm90", "sm100", "sm103"), statuses):
            has_record = status in ("certified", "stale", "failing", "quarantined", "below policy")
            kernel = float("inf") if status == "failing" else 1.5
            grid.append(report.GridCell(op, cell, "a regime", arch, "band" if op == "band_op" else "bitwise", status,
                                        record(status, kernel=kernel, stock=2.0) if has_record else None,
                                        section if has_record else None))
    return grid


def test_every_certificate_string_on_the_page_is_escaped():
    hostile = "<script>alert(1)</script>"
    grid = [dataclasses.replace(square, why=hostile, record={**square.record, "examples": hostile}
                                if square.record else None,
                                section={**square.section, "command": hostile, "device": hostile,
                                         "versions": {"torch": hostile}} if square.section else None)
            for square in synthetic_grid()]
    run = {"arch": "sm90", "device": hostile, "impl": hostile, "max_examples": hostile, "seed": hostile,
           "results": [{"op": "band_op", "cell": hostile, "status": hostile, "examples": hostile}]}
    page = report.render_html(grid, run, [], [hostile])
    assert "<script" not in page
    assert html.escape(hostile) in page


def test_the_page_is_self_contained_and_plots_errors_against_the_band():
    tables, unreadable = report.bench_tables()
    page = report.render_html(synthetic_grid(), None, tables, unreadable)
    for external in ("<script", "<link", "src=", "href=", "url(", "@import", "http://", "https://"):
        assert external not in page, external
    for status in report.STATUS_COLOURS:
        assert f'class="status s-{status.replace(" ", "-")}"' in page
    # band op: kernel 1.5 ULP under the band max(2 x 2.0, 1) = 4; the failing one infinite, drawn red
    assert 'aria-label="kernel 1.5 ULP, stock 2 ULP, allowed 4 ULP"' in page
    assert 'aria-label="kernel inf ULP, stock 2 ULP, allowed 4 ULP"' in page
    assert "bitwise: exact bits required" in page
    assert unreadable == [] and "copy 4257 GB/s" in page   # the committed greedy_argmax bench table


def test_a_bench_table_reads_back_as_written():
    rows = [bench.Row("op_a", "bf16 [4, 8]", "kernel", 2.5, "graph", 10_000_000, 4000.0, 5.0, ">= 85% of copy"),
            bench.Row("op_a", "bf16 [4, 8]", "stock", 5.0, "eager", 10_000_000, 4000.0, 5.0, "")]
    copy_gbps, read = bench.read_table(f"`tools/bench` on X; copy bandwidth 4000 GB/s (same run)\n\n{bench.table(rows)}\n")
    assert copy_gbps == 4000.0
    assert [(r["impl"], r["time (us)"], r["timed as"], r["vs stock"], r["GB/s"], r["% of copy"], r["target"])
            for r in read] == [("kernel", 2.5, "graph", 2.0, 4000.0, 100.0, ">= 85% of copy"),
                               ("stock", 5.0, "eager", 1.0, 2000.0, 50.0, "")]
    with pytest.raises(ValueError, match="not a tools/bench table"):
        bench.read_table("# notes\n\n| a | b |\n|---|---|\n")


def test_certify_cells_writes_the_page_and_junit_with_the_reproduction(tmp_path, capsys):
    page, xml = tmp_path / "report.html", tmp_path / "cells.xml"
    code = certify_cells.main(["--op", "greedy_argmax", "--impl", f"{IMPLS}:last_index_on_ties", "--cell", "decode_small_batch",
                         "--cell", "empty_batch", "--max-examples", "0", "--no-shrink",
                         "--report", str(page), "--junit", str(xml)])
    assert code == 1
    reproduce = next(line for line in capsys.readouterr().out.splitlines() if "reproduce:" in line).strip()
    text = html.unescape(page.read_text())
    assert "<h2>This run</h2>" in text and reproduce in text
    suite = ET.parse(xml).getroot().find("testsuite")
    # a testcase per (cell, oracle): 7 oracles of 2 cells, graph parity and stateful skipped with why
    assert suite.get("tests") == "14" and suite.get("failures") == "1" and suite.get("skipped") == "4"
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert cases["empty_batch/parity"].find("failure") is None
    assert "no CUDA graphs" in cases["decode_small_batch/graph_parity"].find("skipped").get("message")
    failure = cases["decode_small_batch/parity"].find("failure")
    assert failure.get("message").startswith("parity: vs the contract's reference")
    assert reproduce in failure.text and "oracle:  parity" in failure.text
    json_path = tmp_path / "report.json"
    assert certify_cells.main(["--op", "greedy_argmax", "--impl", f"{IMPLS}:correct_via_max", "--cell", "empty_batch",
                         "--max-examples", "0", "--report", str(json_path)]) == 0
    # judged, not certified: an --impl run writes no certificate and never says CERTIFIED
    assert json.loads(json_path.read_text())["results"][0]["status"] == "passed"
    assert "CERTIFIED" not in capsys.readouterr().out


def test_a_partial_run_is_labelled_everywhere_and_writes_no_certificate(tmp_path, capsys):
    page, xml, report = tmp_path / "report.html", tmp_path / "cells.xml", tmp_path / "report.json"
    before = {path: path.read_bytes() for path in pathlib.Path("ops").rglob("*.cert.json")}
    assert certify_cells.main(["--op", "greedy_argmax", "--cell", "empty_batch", "--oracles", "numerics",
                         "--max-examples", "0", "--report", str(page), "--junit", str(xml)]) == 0
    assert certify_cells.main(["--op", "greedy_argmax", "--oracles", "refusals", "--max-examples", "0",
                         "--report", str(report)]) == 0
    out = capsys.readouterr().out
    label = "partial: not a certificate"
    assert label in out and "wrote" not in out and "CERTIFIED" not in out
    assert label in html.unescape(page.read_text()) and label in ET.parse(xml).getroot().find("testsuite").get("name")
    run = json.loads(report.read_text())
    assert run["partial"].startswith(label) and run["oracles"] == ["refusals"]
    assert {result["verdicts"]["parity"]["verdict"] for result in run["results"]} == {"not asked"}
    assert {path: path.read_bytes() for path in pathlib.Path("ops").rglob("*.cert.json")} == before


# -- in a browser ---------------------------------------------------------------------------------------
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)),
                None)


def screenshot(page: pathlib.Path, png: pathlib.Path, profile: pathlib.Path, size=(1280, 900)) -> None:
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={profile}",
                          f"--screenshot={png}", f"--window-size={size[0]},{size[1]}", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert png.exists(), run.stderr[-2000:]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install -y chromium)")
def test_chromium_shows_the_grid(tmp_path):
    from PIL import Image
    from scipy import ndimage

    grid = synthetic_grid()
    page = tmp_path / "report.html"
    page.write_text(report.render_html(grid, None, [], []))
    png = tmp_path / "report.png"
    screenshot(page, png, tmp_path / "profile")
    pixels = np.asarray(Image.open(png).convert("RGB"))
    boxes = []
    for status in ("certified", "stale", "failing", "unknown"):
        colour = np.array([int(report.STATUS_COLOURS[status][i:i + 2], 16) for i in (1, 3, 5)])
        labels, count = ndimage.label((pixels == colour).all(axis=-1))
        # the grid's squares are over 30 px tall: the legend's swatches are 14, the error bars 13
        squares = [box for box in ndimage.find_objects(labels) if box[0].stop - box[0].start > 30]
        assert len(squares) == sum(square.status == status for square in grid), status
        boxes += squares
    # the squares line up: one column per arch, one row per (op, cell), all the same size
    columns = {round((box[1].start + box[1].stop) / 2) for box in boxes}
    rows = {round((box[0].start + box[0].stop) / 2) for box in boxes}
    assert len(columns) == 4 and len(rows) == 4
    assert len({(box[0].stop - box[0].start, box[1].stop - box[1].start) for box in boxes}) == 1


def failing_run() -> dict:
    """A run whose failing cell carries a long finding and recipe: the widest thing the page shows."""
    finding = "vs the contract's reference: output 0: 3 of 512 elements differ; " + "x" * 300
    return {"arch": "sm90", "device": "NVIDIA H200", "impl": None, "max_examples": 100, "seed": 0,
            "results": [{"op": "band_op", "cell": "decode", "status": "failed", "examples": 12, "seconds": 3.5,
                         "verdicts": {"parity": {"verdict": "fail", "finding": finding,
                                                 "recipe": {"T": 4056, "seed": 123456789, "values": "v" * 200}}}},
                        {"op": "band_op", "cell": "prefill", "status": "certified", "examples": 106,
                         "verdicts": {"parity": {"verdict": "pass"}}}]}


def rich_grid() -> list[report.GridCell]:
    """The synthetic grid with regions, errors against size, a 457-ULP band and a failing cell's finding."""
    grid = []
    for square in synthetic_grid():
        if square.record is None:
            grid.append(square)
            continue
        extra = {"exercised": {"T": [1, 256]}, "errors_by_size": [[2 ** k, 0.5 * k, 0.25 * k] for k in range(1, 12)]}
        if square.status == "failing":
            extra["failure"] = {"oracle": "parity", "message": "158 ULP off on zero block scales", "recipe": {"T": 9}}
        if (square.op, square.cell, square.arch) == ("band_op", "prefill", "cpu-interp"):
            extra["worst_stock_error_ulp"] = 228.5   # a band of 457 ULP
        grid.append(dataclasses.replace(square, record={**square.record, **extra}, bounds={"T": (1, 4096)}))
    return grid


def test_the_run_comes_first_failing_cells_carry_their_finding_and_wide_bands_are_flagged():
    page = report.render_html(rich_grid(), failing_run(), [], [])
    assert page.index("<h2>This run</h2>") < page.index("<h2>Status: kernel x cell x architecture</h2>")
    assert '<tr class="failing">' in page and "158 ULP off on zero block scales" in page
    assert "kernel inf ULP" not in page   # a failing cell's record draws its finding, not bars of its worst error
    assert "wide band: 457 ULP is over 8 ULP" in page and page.count("wide band:") == 1
    assert 'aria-label="exercised T 1..256 of 1..4096"' in page
    assert 'class="by-size" aria-label="error against size, 11 examples"' in page
    assert report.size_svg(None).startswith('<span class="note">') and report.band_flag(8.0) == ""


def measured(page_text: str, tmp_path: pathlib.Path, width: int) -> dict:
    """Layout facts Chromium computes for the page at ``width`` px: a measuring script is added to a copy
    (the report itself has none) and its answer read back from the DOM Chromium dumps."""
    probe = """<script>
    const h2 = [...document.querySelectorAll('h2')].map(h => [h.textContent, h.getBoundingClientRect().top]);
    const failing = document.querySelector('tr.failing td.status');
    document.title = JSON.stringify({scroll: document.documentElement.scrollWidth, inner: window.innerWidth, h2,
                                     failing: failing && getComputedStyle(failing).backgroundColor});
    </script>"""
    page = tmp_path / "measured.html"
    page.write_text(page_text.replace("</body>", probe + "</body>"))
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900",
                          "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    title = run.stdout.split("<title>", 1)[1].split("</title>", 1)[0] if "<title>" in run.stdout else ""
    assert title.startswith("{"), run.stderr[-2000:]
    return json.loads(html.unescape(title))


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install -y chromium)")
def test_chromium_reads_the_page_without_sideways_scroll_at_1400_px_the_run_first_and_failures_red(tmp_path):
    page = report.render_html(rich_grid(), failing_run(), *report.bench_tables())
    facts = measured(page, tmp_path, 1400)
    assert facts["inner"] == 1400 and facts["scroll"] <= 1400, facts
    tops = dict(facts["h2"])
    assert tops["This run"] < tops["Status: kernel x cell x architecture"]
    assert facts["failing"] == "rgb(198, 40, 40)"   # STATUS_COLOURS["failing"]
    # negative control: the measure sees sideways scroll where there is some
    assert measured(page.replace("</body>", '<div style="width:2000px">wide</div></body>'), tmp_path, 1400)["scroll"] > 1400
