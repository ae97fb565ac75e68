"""accuracy-simulation: the paired McNemar gate against the unpaired threshold rule, by simulation.

TensorRT-LLM's accuracy suite fails a run when its accuracy falls below
``threshold = reference + z_alpha * sqrt(2 * sigma**2 / n)`` (z_alpha = Phi^-1(alpha) < 0; sigma = 50
on the 0..100 scale, the largest standard deviation of a 0/1 score). That rule treats the two runs as
independent samples. An A/B of two kernels is not: both runs see the same n items and agree on most
of them, so the noise in their difference is set by how often they disagree (the discordance rate),
not by 2 sigma^2 / n. This tool measures, for n = 1319 (GSM8K's test set) and a range of discordance
rates, what each rule can detect and how often it fires on an equal candidate.

Model (the same one ``oracles.mcnemar.detection_power`` uses): per item, the two implementations
disagree with probability ``background`` split evenly both ways, and the candidate additionally gets
wrong a fraction ``drop`` of all items (items the baseline gets right). Both rules judge the same
simulated tables (common random numbers), with the reference taken as the baseline's accuracy on
those same items. Neither rule's decision depends on the baseline accuracy itself, only on
``baseline_only - candidate_only`` (unpaired) or on both counts (McNemar); it only bounds which
discordance rates are possible (at most 2 (1 - accuracy)).

Outputs: a markdown table and a PNG plot under ``--out`` (default docs/results). Exit 1 when the
simulation contradicts the gate's own statistics (the McNemar false-alarm rate above alpha beyond
Monte Carlo error, or the simulated 80%-power drop away from ``minimum_detectable_drop``): the
numbers the gate prints would then be wrong.
"""
from __future__ import annotations

import json
import math
import pathlib
import sys

import numpy as np

from oracles import mcnemar
from references.bounds import stable_seed
from tools import accuracy_gate

PROG = "accuracy-simulation"
GSM8K_PAIRS = 1319
ALPHA = 0.05
TARGET_POWER = mcnemar.DETECTION_POWER
# TensorRT-LLM's sigma for 0/1 scores on the 0..100 scale (sqrt(0.5 * 0.5) * 100).
UNPAIRED_SIGMA = 50.0
# A typical GSM8K score for the 8B-class models those suites gate; it bounds the feasible tables only.
BASELINE_ACCURACY = 0.75
# Rates at which two equally good implementations disagree: 0 (bitwise-identical outputs), the
# 0.5-5% typical of two kernels differing in rounding, up to 2 p (1 - p) = 0.375, what two
# *independent* runs at 75% accuracy disagree on (the case the unpaired rule's variance assumes).
DISCORDANCE_RATES = (0.0, 0.005, 0.01, 0.02, 0.05, 0.10, 0.20, 0.30, 2 * BASELINE_ACCURACY * (1 - BASELINE_ACCURACY))
# True drops tried, in accuracy fractions: 0 to 8 points in 0.05-point steps (8 points is beyond
# what the unpaired rule needs at every rate above).
DROP_STEP = 0.0005
DROPS = np.round(np.arange(0.0, 0.08 + DROP_STEP / 2, DROP_STEP), 6)
DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "docs" / "results"


def simulate_tables(pairs: int, background: float, drop: float, reps: int) -> np.ndarray:
    """``reps`` paired tables as rows of (both_right, baseline_only, candidate_only, both_wrong)."""
    baseline_only, candidate_only = background / 2 + drop, background / 2
    both_right = BASELINE_ACCURACY - baseline_only
    probabilities = [both_right, baseline_only, candidate_only, 1.0 - both_right - baseline_only - candidate_only]
    rng = np.random.default_rng(stable_seed(PROG, pairs, f"{background:.6f}", f"{drop:.6f}", reps))
    return rng.multinomial(pairs, probabilities, size=reps)


def mcnemar_rejects(tables: np.ndarray, critical: np.ndarray) -> np.ndarray:
    """The gate's decision on each table (exact one-sided McNemar at ALPHA)."""
    return tables[:, 1] >= critical[tables[:, 1] + tables[:, 2]]


def unpaired_margin_points(pairs: int) -> float:
    """How far below the reference TensorRT-LLM's threshold sits, in accuracy points."""
    from scipy.stats import norm  # here, not at the top: --help does without scipy
    return -norm.ppf(ALPHA) * math.sqrt(2 * UNPAIRED_SIGMA ** 2 / pairs)


def unpaired_nominal_drop(pairs: int) -> float:
    """The minimum detectable effect the unpaired rule claims (TensorRT-LLM's theta), as a fraction."""
    from scipy.stats import norm
    return (norm.ppf(TARGET_POWER) - norm.ppf(ALPHA)) * math.sqrt(2 * UNPAIRED_SIGMA ** 2 / pairs) / 100


def unpaired_rejects(tables: np.ndarray, pairs: int) -> np.ndarray:
    """TensorRT-LLM's rule: fail when candidate accuracy < reference - margin (reference = baseline's)."""
    candidate_points = 100.0 * (tables[:, 0] + tables[:, 2]) / pairs
    reference_points = 100.0 * (tables[:, 0] + tables[:, 1]) / pairs
    return candidate_points < reference_points - unpaired_margin_points(pairs)


def smallest_detected_drop(powers: np.ndarray) -> float | None:
    reached = np.flatnonzero(powers >= TARGET_POWER)
    return float(DROPS[reached[0]]) if reached.size else None


def simulate_rate(pairs: int, background: float, reps: int, critical: np.ndarray) -> dict:
    """Power curves of both rules over DROPS at one discordance rate, and what they imply."""
    mcnemar_power, unpaired_power = np.empty(DROPS.size), np.empty(DROPS.size)
    for index, drop in enumerate(DROPS):
        tables = simulate_tables(pairs, background, float(drop), reps)
        mcnemar_power[index] = mcnemar_rejects(tables, critical).mean()
        unpaired_power[index] = unpaired_rejects(tables, pairs).mean()
    return {
        "discordance_rate": background,
        "mcnemar_drop_simulated": smallest_detected_drop(mcnemar_power),
        "mcnemar_drop_analytic": mcnemar.minimum_detectable_drop(pairs, background, ALPHA),
        "unpaired_drop_simulated": smallest_detected_drop(unpaired_power),
        # DROPS[0] == 0: the rate at which an equally good candidate is rejected.
        "mcnemar_false_alarm": float(mcnemar_power[0]),
        "unpaired_false_alarm": float(unpaired_power[0]),
    }


def contradictions(rows: list[dict], reps: int) -> list[str]:
    """Where the simulation disagrees with the statistics the gate prints (empty = consistent)."""
    found = []
    false_alarm_slack = 4 * math.sqrt(ALPHA * (1 - ALPHA) / reps)
    # The simulated drop is the first grid point at >= 80% power: at most one step above the exact
    # one, give or take Monte Carlo error in the power (a fraction of a step at these reps).
    for row in rows:
        rate = f"discordance {100 * row['discordance_rate']:.2f}%"
        if row["mcnemar_false_alarm"] > ALPHA + false_alarm_slack:
            found.append(f"{rate}: McNemar false-alarm rate {row['mcnemar_false_alarm']:.4f} exceeds alpha {ALPHA}")
        simulated, analytic = row["mcnemar_drop_simulated"], row["mcnemar_drop_analytic"]
        if simulated is None or analytic is None or not (analytic - DROP_STEP <= simulated <= analytic + 2 * DROP_STEP):
            found.append(f"{rate}: simulated 80%-power drop {simulated} vs analytic {analytic}")
    return found


def points(value: float | None) -> str:
    return f"> {100 * DROPS[-1]:.2f}" if value is None else f"{100 * value:.2f}"


def write_table(rows: list[dict], pairs: int, reps: int, command: str, path: pathlib.Path) -> None:
    margin = unpaired_margin_points(pairs)
    nominal = 100 * unpaired_nominal_drop(pairs)
    comparable = [row for row in rows if row["unpaired_drop_simulated"] is not None and row["discordance_rate"] > 0]
    ratios = [row["unpaired_drop_simulated"] / row["mcnemar_drop_simulated"] for row in comparable]
    lines = [
        f"Produced by: `{command}`",
        "",
        f"# Paired McNemar gate vs the unpaired threshold rule, n = {pairs}",
        "",
        f"Both rules at alpha = {ALPHA} judge the same simulated tables ({reps} per point; seeds from sha256 "
        f"digests of the point). Unpaired rule (TensorRT-LLM): fail when candidate accuracy < reference "
        f"- {margin:.2f} pts (z_alpha sqrt(2 sigma^2 / n), sigma = {UNPAIRED_SIGMA:g}); its nominal minimum "
        f"detectable effect at 80% power is {nominal:.2f} pts whatever the discordance. McNemar: exact "
        f"one-sided test, as `tools/accuracy-gate` decides. Discordance = the rate at which two equally good "
        f"implementations disagree (half each way); a drop of d makes the candidate wrong on a further "
        f"fraction d of items. Drops tried: 0 to {100 * DROPS[-1]:.0f} pts in {100 * DROP_STEP:.2f}-pt steps.",
        "",
        "| discordance rate | McNemar: smallest drop detected with 80% power (pts, simulated) "
        "| McNemar: same, analytic (what the gate prints) | unpaired rule: smallest drop detected with 80% "
        "power (pts, simulated) | McNemar false-alarm rate | unpaired false-alarm rate |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {100 * row['discordance_rate']:.2f}% | {points(row['mcnemar_drop_simulated'])} "
            f"| {points(row['mcnemar_drop_analytic'])} | {points(row['unpaired_drop_simulated'])} "
            f"| {row['mcnemar_false_alarm']:.4f} | {row['unpaired_false_alarm']:.4f} |")
    lines += [
        "",
        f"At discordance rates from {100 * comparable[0]['discordance_rate']:.1f}% to "
        f"{100 * comparable[-1]['discordance_rate']:.1f}% the unpaired rule needs a drop "
        f"{min(ratios):.1f}x to {max(ratios):.1f}x larger than McNemar to catch it 80% of the time, and its "
        f"false-alarm rate stays at most {max(row['unpaired_false_alarm'] for row in rows):.4f} (it reaches "
        f"alpha only for independent runs at 50% accuracy, the case sigma = 50 describes); McNemar's stays at most "
        f"{max(row['mcnemar_false_alarm'] for row in rows):.4f} (alpha {ALPHA}).",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_plot(rows: list[dict], pairs: int, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on CI machines
    from matplotlib import pyplot

    rates = [100 * row["discordance_rate"] for row in rows]

    def series(name):
        return [np.nan if row[name] is None else 100 * row[name] for row in rows]

    figure, (drops_axis, alarms_axis) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    drops_axis.plot(rates, series("mcnemar_drop_simulated"), "o-", label="paired McNemar (simulated)")
    drops_axis.plot(rates, series("mcnemar_drop_analytic"), "k--", lw=1, label="paired McNemar (analytic)")
    drops_axis.plot(rates, series("unpaired_drop_simulated"), "s-", label="unpaired threshold rule (simulated)")
    drops_axis.axhline(100 * unpaired_nominal_drop(pairs), color="gray", ls=":",
                       label="unpaired rule, nominal (sigma = 50)")
    drops_axis.set(ylim=(0, None), xlabel="discordance rate between equal implementations (%)",
                   ylabel="smallest drop detected with 80% power (pts)",
                   title=f"What each rule can detect (n = {pairs}, alpha = {ALPHA})")
    drops_axis.legend()
    drops_axis.grid(alpha=0.3)
    alarms_axis.plot(rates, [row["mcnemar_false_alarm"] for row in rows], "o-", label="paired McNemar")
    alarms_axis.plot(rates, [row["unpaired_false_alarm"] for row in rows], "s-", label="unpaired threshold rule")
    alarms_axis.axhline(ALPHA, color="gray", ls=":", label=f"alpha = {ALPHA}")
    alarms_axis.set(xlabel="discordance rate between equal implementations (%)",
                    ylabel="false-alarm rate (equal candidate rejected)", title="How often each rule fires on noise")
    alarms_axis.legend()
    alarms_axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata={"Software": None})
    pyplot.close(figure)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = accuracy_gate.OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("--pairs", type=int, default=GSM8K_PAIRS, help=f"items per run (default {GSM8K_PAIRS}, GSM8K)")
    parser.add_argument("--reps", type=int, default=20000, help="simulated tables per (rate, drop) point (default 20000)")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="folder for the table and the plot")
    parser.add_argument("--json", action="store_true", help="also print the rows as one JSON object")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    if args.pairs < 5 * math.ceil(1 / (1 - BASELINE_ACCURACY)):
        return _refuse(f"--pairs: {args.pairs} is too few to detect anything — pass at least 20")
    if args.reps < 100:
        return _refuse(f"--reps: {args.reps} gives no usable power estimate — pass at least 100")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return _refuse(f"--out: cannot create {str(args.out)!r}: {error.strerror}")

    critical = mcnemar.degradation_critical_counts(args.pairs, ALPHA)
    rows = []
    for background in DISCORDANCE_RATES:
        print(f"{PROG}: discordance {100 * background:.2f}% ...", file=sys.stderr, flush=True)
        rows.append(simulate_rate(args.pairs, background, args.reps, critical))
    command = " ".join(["tools/accuracy-simulation", *argv])
    write_table(rows, args.pairs, args.reps, command, args.out / "accuracy_simulation.md")
    write_plot(rows, args.pairs, args.out / "accuracy_simulation.png")
    print((args.out / "accuracy_simulation.md").read_text(encoding="utf-8"))
    found = contradictions(rows, args.reps)
    if args.json:
        print(json.dumps({"pairs": args.pairs, "reps": args.reps, "alpha": ALPHA, "rows": rows,
                          "contradictions": found}, indent=2))
    for finding in found:
        print(f"{PROG}: FINDING: {finding}")
    return 1 if found else 0


def _refuse(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2
