"""tools/band-widths: bad flags are usage errors, a run tabulates the bands, a vacuous band is a finding, and an
input the stock op cannot take is counted and judged on the reference's orders, as certification judges it."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from oracles.band_limit import BandLimit
from tools import band_widths
from tools.cli import UsageError

pytestmark = [pytest.mark.cpu]
ONE_CELL = ["--op", "rms_norm_gated", "--cell", "plain_rms_norm", "--examples", "1"]
VACUOUS, NO_STOCK, BEFORE = "vacuous", "stock op could not", "before"


def _column(row: str, name: str) -> str:
    header = [cell.strip() for cell in band_widths.table([], torch.device("cpu")).splitlines()[2].split("|")]
    return row.split("|")[header.index(name)].strip()


def test_a_bitwise_op_or_a_negative_count_is_a_usage_error():
    with pytest.raises(UsageError, match="not a band op"):
        band_widths.main(["--op", "greedy_argmax"])
    with pytest.raises(UsageError, match="--examples -1"):
        band_widths.main(["--examples", "-1"])


def test_a_cell_is_tabulated_and_a_vacuous_band_exits_1(tmp_path, monkeypatch):
    out = tmp_path / "widths.md"
    assert band_widths.main([*ONE_CELL, "--out", str(out)]) == 0
    [row] = [line for line in out.read_text().splitlines() if line.startswith("| rms_norm_gated ")]
    assert "| plain_rms_norm | 0 |" in row and _column(row, VACUOUS) == "0"   # none vacuous
    # the control: below the floor every band is vacuous, and the tool says so
    tight = {name: dataclasses.replace(entry, band_limit=BandLimit(0.5, "control"))
             for name, entry in band_widths.entries().items()}
    monkeypatch.setattr(band_widths, "entries", lambda: tight)
    assert band_widths.main([*ONE_CELL, "--out", str(out)]) == 1
    [row] = [line for line in out.read_text().splitlines() if line.startswith("| rms_norm_gated ")]
    assert int(_column(row, VACUOUS)) > 0


def _with_stock(stock) -> dict:
    return {name: dataclasses.replace(entry, stock=stock) for name, entry in band_widths.entries().items()}


def test_an_input_the_stock_op_cannot_take_is_counted_and_judged_on_the_orders(tmp_path, monkeypatch):
    """SDPA's "cutlassF: no kernel found to launch!" stopped the tool with a traceback on the H100 (2026-12-06c)
    where certification judges such an input on the reference's orders."""
    def no_kernel(**_):
        raise RuntimeError("cutlassF: no kernel found to launch!")
    entries = _with_stock(no_kernel)
    monkeypatch.setattr(band_widths, "entries", lambda: entries)
    out = tmp_path / "widths.md"
    assert band_widths.main([*ONE_CELL, "--out", str(out)]) == 0
    [row] = [line for line in out.read_text().splitlines() if line.startswith("| rms_norm_gated ")]
    assert int(_column(row, NO_STOCK)) == int(_column(row, "examples")) > 0 and _column(row, BEFORE) == "-"
    assert "stock" not in _column(row, "E set by")


def test_a_stock_op_out_of_memory_is_not_a_limit_of_the_stock_op(monkeypatch):
    """Running out of memory is the judge's failure, never an input the stock op 'cannot take': leaving the stock op
    out would narrow the band."""
    def out_of_memory(**_):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    entries = _with_stock(out_of_memory)
    monkeypatch.setattr(band_widths, "entries", lambda: entries)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        band_widths.main(ONE_CELL)
