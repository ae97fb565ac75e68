"""tools/accuracy-simulation: the committed table is the tool's own output, the simulation agrees with
the gate's statistics, and it reports a gate that fires too often."""
import json

import numpy as np
import pytest

from oracles import mcnemar
from tools import accuracy_simulation

pytestmark = pytest.mark.cpu

SEED_PIN = 915111159818138975
RESULTS = accuracy_simulation.DEFAULT_OUT


def test_committed_table_is_what_the_tool_writes(tmp_path, capsys):
    """Re-run the committed command; everything but the first line (the command) must match."""
    committed = (RESULTS / "accuracy_simulation.md").read_text(encoding="utf-8").splitlines()
    assert committed[0] == "Produced by: `tools/accuracy-simulation`"
    assert accuracy_simulation.main(["--out", str(tmp_path)]) == 0
    rerun = (tmp_path / "accuracy_simulation.md").read_text(encoding="utf-8").splitlines()
    assert rerun[1:] == committed[1:]
    assert (tmp_path / "accuracy_simulation.png").stat().st_size > 10_000


def test_paired_rule_detects_smaller_drops_than_the_unpaired_rule(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(accuracy_simulation, "DISCORDANCE_RATES", (0.01, 0.05))
    assert accuracy_simulation.main(["--reps", "4000", "--out", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    assert "FINDING" not in out
    table = (tmp_path / "accuracy_simulation.md").read_text(encoding="utf-8")
    assert table.startswith("Produced by: `tools/accuracy-simulation --reps 4000 --out ")
    report = json.loads(out[out.index('{\n  "pairs"'):])
    assert report["contradictions"] == [] and len(report["rows"]) == 2
    for row in report["rows"]:
        assert row["mcnemar_drop_simulated"] < row["unpaired_drop_simulated"]
        assert row["mcnemar_false_alarm"] <= 0.05 + 4 * np.sqrt(0.05 * 0.95 / 4000)


def test_a_gate_that_fires_too_often_is_a_finding(tmp_path, capsys, monkeypatch):
    """Negative control: make the critical counts three too low (a liberal gate) — the simulation must
    see a false-alarm rate above alpha and exit 1."""
    real = mcnemar.degradation_critical_counts
    monkeypatch.setattr(mcnemar, "degradation_critical_counts",
                        lambda most, alpha: np.maximum(real(most, alpha) - 3, 1))
    monkeypatch.setattr(accuracy_simulation, "DISCORDANCE_RATES", (0.05,))
    assert accuracy_simulation.main(["--reps", "2000", "--out", str(tmp_path)]) == 1
    assert "FINDING: discordance 5.00%: McNemar false-alarm rate" in capsys.readouterr().out


@pytest.mark.parametrize("argv, fragment", [
    (["--pairs", "3"], "--pairs: 3 is too few"),
    (["--reps", "10"], "--reps: 10 gives no usable power estimate"),
    (["--reps", "x"], "argument --reps: invalid int value"),
])
def test_bad_arguments_are_refused_with_one_line(tmp_path, capsys, argv, fragment):
    assert accuracy_simulation.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err


def test_seeds_are_stable_digests():
    # A pinned value: Python's salted hash would change it from one process to the next.
    assert accuracy_simulation.stable_seed("accuracy-simulation", 1319) == SEED_PIN
    assert accuracy_simulation.stable_seed("a", 1) != accuracy_simulation.stable_seed("a", 2)
