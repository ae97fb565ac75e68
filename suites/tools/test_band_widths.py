"""tools/band-widths: bad flags are usage errors, a run tabulates the bands, a vacuous band is a finding."""
from __future__ import annotations

import dataclasses

import pytest

from oracles.band_limit import BandLimit
from tools import band_widths
from tools.cli import UsageError

pytestmark = [pytest.mark.cpu]
ONE_CELL = ["--op", "rms_norm_gated", "--cell", "plain_rms_norm", "--examples", "1"]


def test_a_bitwise_op_or_a_negative_count_is_a_usage_error():
    with pytest.raises(UsageError, match="not a band op"):
        band_widths.main(["--op", "greedy_argmax"])
    with pytest.raises(UsageError, match="--examples -1"):
        band_widths.main(["--examples", "-1"])


def test_a_cell_is_tabulated_and_a_vacuous_band_exits_1(tmp_path, monkeypatch):
    out = tmp_path / "widths.md"
    assert band_widths.main([*ONE_CELL, "--out", str(out)]) == 0
    [row] = [line for line in out.read_text().splitlines() if line.startswith("| rms_norm_gated ")]
    assert "| plain_rms_norm | 0 |" in row and row.rstrip().split("|")[-3].strip() == "0"   # none vacuous
    # the control: below the floor every band is vacuous, and the tool says so
    tight = {name: dataclasses.replace(entry, band_limit=BandLimit(0.5, "control"))
             for name, entry in band_widths.entries().items()}
    monkeypatch.setattr(band_widths, "entries", lambda: tight)
    assert band_widths.main([*ONE_CELL, "--out", str(out)]) == 1
    [row] = [line for line in out.read_text().splitlines() if line.startswith("| rms_norm_gated ")]
    assert int(row.rstrip().split("|")[-3]) > 0
