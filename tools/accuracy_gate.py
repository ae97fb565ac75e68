"""accuracy-gate: is a candidate significantly less accurate than its baseline on the same items?

Reads per-sample outcomes of two evaluation runs over the same items, pairs them item by item and
judges each table with an exact McNemar test (``oracles.mcnemar``). Two input formats:

* lm-evaluation-harness ``samples_<task>_<date>.jsonl`` (written with ``--log_samples``): one line per
  (doc_id, filter), the outcome in a metric field (``exact_match``, ``acc``, ...; ``--metric``).
  Each filter (``strict-match``, ``flexible-extract``, ...) is judged as its own table; the gate fails
  if any filter fails. When both lines of a pair carry ``doc_hash``/``prompt_hash``/``target_hash``,
  they must agree: a pair whose document, prompt or target differs is a broken pairing (exit 1).
* plain JSONL ``{"id": ..., "correct": true|false|0|1}``, optionally with ``"seed"``.

Several seeds of sampled decoding pair on (seed, id): give each side as ``SEED=FILE,SEED=FILE,...``
(one file per seed) or put a ``"seed"`` field in plain lines.

Decision per filter: without ``--max-drop``, fail when the candidate is significantly worse (exact
one-sided McNemar p <= ``--alpha``). With ``--max-drop PTS`` the question becomes non-inferiority, the
usual one for a lossy format that is allowed to cost a little: fail unless the 95% CI of
candidate - baseline lies wholly above -PTS (one-sided level 0.025, the regulatory convention). A
candidate significantly but provably less than PTS worse then passes; the p-values are still reported.

Exit codes: 0 pass; 1 a finding (a filter significantly worse, or a drop beyond ``--max-drop`` not
ruled out, or a broken pairing); 2 unusable input (unreadable file, bad line, duplicate key, pairs
missing on one side — listed, never dropped), with a one-line reason on stderr.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from typing import Any

from oracles import mcnemar

PROG = "accuracy-gate"
# Tried in order when --metric is not given: what lm-eval's generative (gsm8k: exact_match) and
# multiple-choice (mmlu, arc: acc) tasks write per sample.
DEFAULT_METRICS = ("exact_match", "acc")
# lm-eval's per-sample sha256 digests of the document, the prompt and the target (in its newer releases).
PAIRING_HASHES = ("doc_hash", "prompt_hash", "target_hash")
# The filter name lm-eval gives unfiltered responses; plain JSONL records are judged as this filter.
UNFILTERED = "none"
# How many offending keys a one-line reason lists before "and N more".
LISTED_KEYS = 5


class GateInputError(Exception):
    """Unusable input: the gate cannot judge, so it exits 2 with this one-line reason."""

    def __init__(self, reason: str, details: dict | None = None):
        super().__init__(reason)
        self.details = details or {}


@dataclasses.dataclass(frozen=True)
class Outcome:
    correct: bool
    hashes: dict
    where: str  # "FILE:LINE", for messages


# A pairing key: (filter, seed, item id). seed is None when runs are not split by seed.
Key = tuple


def describe_key(key: Key, item_field: str) -> str:
    filter_name, seed, item = key
    parts = ([] if seed is None else [f"seed {seed}"]) + [f"{item_field} {item!r}"]
    if item_field == "doc_id":
        parts.append(f"filter {filter_name}")
    return "(" + ", ".join(parts) + ")"


def list_keys(keys: list, item_field: str) -> str:
    shown = ", ".join(describe_key(key, item_field) for key in keys[:LISTED_KEYS])
    return shown + (f" and {len(keys) - LISTED_KEYS} more" if len(keys) > LISTED_KEYS else "")


def sort_keys(keys) -> list:
    # Integer ids in numeric order; ids may mix ints, strings and None (no seed), which do not compare.
    return sorted(keys, key=lambda key: tuple((0, part, "") if isinstance(part, int) else (1, 0, str(part))
                                              for part in key))


@dataclasses.dataclass
class SamplesFile:
    """The outcomes of one side (one or several seed files), keyed for pairing."""

    format: str  # "lm-eval" or "plain"
    metric: str  # the field read as the outcome
    outcomes: dict  # Key -> Outcome

    @property
    def item_field(self) -> str:
        return "doc_id" if self.format == "lm-eval" else "id"


def parse_side(argument: str, spec: str) -> list[tuple[Any, str]]:
    """``FILE`` or ``SEED=FILE,SEED=FILE,...`` -> [(seed or None, path)]. An existing file wins, so a
    path that happens to contain '=' still reads as one file."""
    if os.path.isfile(spec) or "=" not in spec:
        return [(None, spec)]
    runs = []
    for part in spec.split(","):
        seed, separator, path = part.partition("=")
        if not separator or not seed or not path:
            raise GateInputError(f"{argument}: {part!r} is not SEED=FILE — give FILE, or SEED=FILE,SEED=FILE,...")
        runs.append((seed, path))
    seeds = [seed for seed, _ in runs]
    if len(set(seeds)) != len(seeds):
        raise GateInputError(f"{argument}: a seed is named twice in {spec!r} — give each seed once")
    return runs


def _line_format(record: dict) -> str | None:
    if "doc_id" in record:
        return "lm-eval"
    if "id" in record and "correct" in record:
        return "plain"
    return None


def _binary_outcome(value: Any, what: str, where: str) -> bool:
    # lm-eval writes 1.0/0.0 (exact_match, acc); plain files may use true/false or 1/0.
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise GateInputError(f"{where}: {what} is {value!r}, not 0/1/true/false — McNemar needs a right/wrong "
                         f"outcome per item; pick a binary metric with --metric")


def _item_id(value: Any, what: str, where: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise GateInputError(f"{where}: {what} is {value!r} — it must be an integer or a string")
    return value


def _choose_metric(record: dict, requested: str | None, argument: str, where: str) -> str:
    if requested is not None:
        return requested
    for name in DEFAULT_METRICS:
        if name in record:
            return name
    listed = record.get("metrics") or sorted(key for key, value in record.items()
                                               if isinstance(value, (bool, int, float)) and key != "doc_id")
    raise GateInputError(f"{argument}: {where} carries none of {', '.join(DEFAULT_METRICS)} "
                         f"(its metrics: {', '.join(map(str, listed)) or 'none'}) — pass --metric NAME")


def read_side(argument: str, spec: str, requested_metric: str | None) -> SamplesFile:
    side: SamplesFile | None = None
    for seed, path in parse_side(argument, spec):
        try:
            with open(path, encoding="utf-8") as handle:
                lines = list(enumerate(handle, start=1))  # read here: a decoding error surfaces while reading
        except (OSError, UnicodeDecodeError) as error:
            raise GateInputError(f"{argument}: cannot read {path!r}: {getattr(error, 'strerror', None) or error}")
        file_seed_mode = None  # for plain files: does every line carry "seed"?
        for number, text in lines:
            if not text.strip():
                continue
            where = f"{argument} {path}:{number}"
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                raise GateInputError(f"{where}: not JSON ({error.msg} at column {error.colno})")
            if not isinstance(record, dict):
                raise GateInputError(f"{where}: expected a JSON object, got {type(record).__name__}")
            line_format = _line_format(record)
            if line_format is None:
                raise GateInputError(f"{where}: neither an lm-eval sample (no \"doc_id\") nor a plain "
                                     f"{{\"id\", \"correct\"}} record")
            if side is None:
                if line_format == "plain" and requested_metric is not None:
                    raise GateInputError(f"--metric: plain JSONL records are judged on their \"correct\" field; "
                                         f"--metric {requested_metric!r} applies to lm-eval samples files — drop it")
                metric = "correct" if line_format == "plain" else _choose_metric(record, requested_metric,
                                                                                  argument, where)
                side = SamplesFile(format=line_format, metric=metric, outcomes={})
            elif line_format != side.format:
                raise GateInputError(f"{where}: a {line_format} record in a side whose first record is {side.format}")
            if line_format == "lm-eval":
                item = _item_id(record["doc_id"], "doc_id", where)
                filter_name = record.get("filter", UNFILTERED)
                if not isinstance(filter_name, str):
                    raise GateInputError(f"{where}: filter is {filter_name!r} — lm-eval writes the filter's name")
                line_seed = seed
            else:
                item = _item_id(record["id"], "id", where)
                filter_name = UNFILTERED
                has_seed = "seed" in record
                if file_seed_mode is None:
                    file_seed_mode = has_seed
                elif has_seed != file_seed_mode:
                    raise GateInputError(f"{where}: {'has' if has_seed else 'has no'} \"seed\" field, unlike "
                                         f"the first record of {path!r} — every record or none carries a seed")
                if has_seed and seed is not None:
                    raise GateInputError(f"{where}: carries \"seed\" and the file was given as {seed}={path} — "
                                         f"give the seed one way")
                line_seed = _item_id(record["seed"], "seed", where) if has_seed else seed
            if side.metric not in record:
                raise GateInputError(f"{where}: no {side.metric!r} field (the metric for this side) — "
                                     f"pass --metric NAME for a metric every line carries")
            correct = _binary_outcome(record[side.metric], side.metric, where)
            key = (filter_name, line_seed, item)
            if key in side.outcomes:
                hint = ("; its lines carry no \"filter\" field, so lines of several filters cannot be told "
                        "apart" if line_format == "lm-eval" and "filter" not in record else "")
                raise GateInputError(f"{argument}: duplicate key {describe_key(key, side.item_field)} at "
                                     f"{side.outcomes[key].where} and {path}:{number}{hint}")
            hashes = {name: record[name] for name in PAIRING_HASHES if name in record}
            side.outcomes[key] = Outcome(correct=correct, hashes=hashes, where=f"{path}:{number}")
    if side is None:
        raise GateInputError(f"{argument}: {spec!r} holds no records")
    return side


@dataclasses.dataclass
class Pairing:
    item_field: str
    by_filter: dict  # filter -> (list of baseline outcomes, list of candidate outcomes)
    broken: list  # (key, [hash names that differ])
    seeds: int


def pair(baseline: SamplesFile, candidate: SamplesFile) -> Pairing:
    if baseline.format != candidate.format:
        raise GateInputError(f"CANDIDATE: is {candidate.format} and BASELINE is {baseline.format} — "
                             f"give two files of one format")
    if baseline.metric != candidate.metric:
        raise GateInputError(f"--metric: BASELINE is judged on {baseline.metric!r} and CANDIDATE on "
                             f"{candidate.metric!r} — pass --metric NAME to judge both on one metric")
    item_field = baseline.item_field
    only_baseline = sort_keys(baseline.outcomes.keys() - candidate.outcomes.keys())
    only_candidate = sort_keys(candidate.outcomes.keys() - baseline.outcomes.keys())
    if only_baseline or only_candidate:
        sides = []
        if only_baseline:
            sides.append(f"{len(only_baseline)} only in BASELINE: {list_keys(only_baseline, item_field)}")
        if only_candidate:
            sides.append(f"{len(only_candidate)} only in CANDIDATE: {list_keys(only_candidate, item_field)}")
        raise GateInputError(
            "pairs missing on one side — " + "; ".join(sides),
            details={"only_in_baseline": [list(key) for key in only_baseline],
                     "only_in_candidate": [list(key) for key in only_candidate]})
    by_filter: dict = {}
    broken = []
    for key in sort_keys(baseline.outcomes):
        before, after = baseline.outcomes[key], candidate.outcomes[key]
        differing = [name for name in PAIRING_HASHES
                     if name in before.hashes and name in after.hashes and before.hashes[name] != after.hashes[name]]
        if differing:
            broken.append((key, differing))
        outcomes = by_filter.setdefault(key[0], ([], []))
        outcomes[0].append(before.correct)
        outcomes[1].append(after.correct)
    seeds = len({key[1] for key in baseline.outcomes})
    return Pairing(item_field=item_field, by_filter=by_filter, broken=broken, seeds=seeds)


@dataclasses.dataclass
class FilterVerdict:
    filter: str
    comparison: mcnemar.PairedComparison
    failures: list  # one-line reasons; empty = pass


def judge(pairing: Pairing, alpha: float, max_drop: float | None) -> list[FilterVerdict]:
    verdicts = []
    for filter_name in sorted(pairing.by_filter):
        baseline_right, candidate_right = pairing.by_filter[filter_name]
        comparison = mcnemar.compare(mcnemar.PairedTable.from_outcomes(baseline_right, candidate_right), alpha)
        failures = []
        ci_low = comparison.difference_ci95[0]
        if max_drop is None:
            if comparison.significantly_worse:
                failures.append(f"significantly worse: one-sided exact p {comparison.p_degradation:.4g} <= "
                                f"alpha {alpha:g}")
        elif not ci_low > -max_drop:
            failures.append(f"a drop beyond the {100 * max_drop:.2f}-pt margin is not ruled out: 95% CI "
                            f"lower end {100 * ci_low:+.2f} pts")
        verdicts.append(FilterVerdict(filter=filter_name, comparison=comparison, failures=failures))
    return verdicts


def render_text(verdicts: list[FilterVerdict], pairing: Pairing, args, metric: str) -> str:
    lines = [f"{PROG}: BASELINE {args.baseline}  CANDIDATE {args.candidate}",
             f"metric {metric}, " + (f"non-inferiority: fail unless the 95% CI rules out a drop beyond "
                                     f"{100 * args.max_drop:.2f} pts" if args.max_drop is not None else
                                     f"fail when significantly worse: one-sided exact McNemar at alpha {args.alpha:g}")]
    for verdict in verdicts:
        result = verdict.comparison
        table = result.table
        seeds = f" ({pairing.seeds} seeds)" if pairing.seeds > 1 else ""
        ci_low, ci_high = result.difference_ci95
        if result.minimum_detectable_drop is None:
            detectable = "none: no drop is detectable with 80% power at this sample size"
        else:
            detectable = f"{100 * result.minimum_detectable_drop:.2f} pts with 80% power"
        lines += [
            "",
            f"filter {verdict.filter}: {table.pairs} pairs{seeds}",
            f"  {'':16}{'candidate right':>17}{'candidate wrong':>17}",
            f"  {'baseline right':16}{table.both_right:>17}{table.baseline_only:>17}",
            f"  {'baseline wrong':16}{table.candidate_only:>17}{table.both_wrong:>17}",
            f"  accuracy        baseline {100 * table.baseline_accuracy:.2f}%, "
            f"candidate {100 * table.candidate_accuracy:.2f}%",
            f"  difference      {100 * table.difference:+.2f} pts (candidate - baseline), "
            f"95% CI [{100 * ci_low:+.2f}, {100 * ci_high:+.2f}]",
            f"  exact McNemar   p {result.p_two_sided:.4g} (two-sided), mid-p {result.mid_p:.4g}, "
            f"p {result.p_degradation:.4g} (one-sided, candidate worse)",
            f"  detectable drop {detectable} (alpha {result.alpha:g}; {table.discordant} discordant pairs, "
            f"{100 * table.discordance_rate:.2f}% of items)",
            "  verdict         " + ("FAIL: " + "; ".join(verdict.failures) if verdict.failures else "pass"),
        ]
    failed = [verdict.filter for verdict in verdicts if verdict.failures]
    lines += ["", f"{PROG}: " + (f"FAIL ({len(failed)} of {len(verdicts)} filters: {', '.join(failed)})"
                                 if failed else f"PASS ({len(verdicts)} filter{'s' * (len(verdicts) != 1)})")]
    return "\n".join(lines)


def verdict_json(verdict: FilterVerdict) -> dict:
    result = verdict.comparison
    table = result.table
    return {
        "filter": verdict.filter,
        "pairs": table.pairs,
        "table": dataclasses.asdict(table),
        "baseline_accuracy": table.baseline_accuracy,
        "candidate_accuracy": table.candidate_accuracy,
        "difference": table.difference,
        "difference_ci95": list(result.difference_ci95),
        "p_two_sided": result.p_two_sided,
        "mid_p": result.mid_p,
        "p_degradation": result.p_degradation,
        "minimum_detectable_drop": result.minimum_detectable_drop,
        "failures": verdict.failures,
        "pass": not verdict.failures,
    }


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus exit 2), like every other refusal of the gate."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Paired accuracy gate: exact McNemar test of a candidate against a baseline evaluated on "
                    "the same items. Exit 0 pass, 1 significantly worse (or, with --max-drop, a drop beyond the "
                    "margin not ruled out) or broken pairing, 2 unusable input.",
        epilog="Inputs: lm-evaluation-harness samples_<task>_<date>.jsonl (paired on doc_id and filter; each "
               "filter judged on its own) or plain JSONL {\"id\", \"correct\"[, \"seed\"]}. Several seeds of "
               "sampled decoding: SEED=FILE,SEED=FILE,... on each side (paired on seed and id).")
    parser.add_argument("baseline", metavar="BASELINE", help="the reference run: FILE or SEED=FILE,...")
    parser.add_argument("candidate", metavar="CANDIDATE", help="the run under test: FILE or SEED=FILE,...")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="significance level of the one-sided degradation test, per filter (default 0.05)")
    parser.add_argument("--max-drop", type=float, default=None, metavar="PTS",
                        help="non-inferiority margin in accuracy points (0..100), replacing the significance "
                             "decision: fail unless the 95%% CI of candidate - baseline lies above -PTS")
    parser.add_argument("--metric", default=None,
                        help="lm-eval per-sample field holding the 0/1 outcome "
                             f"(default: the first of {', '.join(DEFAULT_METRICS)} present)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    return parser


def _refuse(message: str, as_json: bool, details: dict | None = None) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"result": "error", "exit_code": 2, "error": message, **(details or {})}))
    return 2


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help (0) or a one-line usage error (2): a return code, like every path
        return int(stop.code or 0)
    if not (math.isfinite(args.alpha) and 0.0 < args.alpha < 1.0):
        return _refuse(f"--alpha: {args.alpha:g} is not strictly between 0 and 1 — pass e.g. 0.05", args.json)
    if args.max_drop is not None:
        if not (math.isfinite(args.max_drop) and 0.0 <= args.max_drop <= 100.0):
            return _refuse(f"--max-drop: {args.max_drop:g} is not in 0..100 accuracy points — pass e.g. 1.0",
                           args.json)
        args.max_drop /= 100.0
    try:
        baseline = read_side("BASELINE", args.baseline, args.metric)
        candidate = read_side("CANDIDATE", args.candidate, args.metric)
        pairing = pair(baseline, candidate)
    except GateInputError as error:
        return _refuse(str(error), args.json, error.details)

    if pairing.broken:
        names = sorted({name for _, differing in pairing.broken for name in differing})
        reason = (f"broken pairing: {len(pairing.broken)} pairs hold different items in the two runs "
                  f"({', '.join(names)} differ): "
                  f"{list_keys([key for key, _ in pairing.broken], pairing.item_field)}")
        if args.json:
            print(json.dumps({"result": "fail", "exit_code": 1, "broken_pairing": reason,
                              "broken_pairs": [{"key": list(key), "differing": differing}
                                               for key, differing in pairing.broken]}))
        else:
            print(f"{PROG}: FAIL — {reason}")
        return 1

    verdicts = judge(pairing, args.alpha, args.max_drop)
    exit_code = 1 if any(verdict.failures for verdict in verdicts) else 0
    if args.json:
        print(json.dumps({
            "result": "fail" if exit_code else "pass",
            "exit_code": exit_code,
            "baseline": args.baseline,
            "candidate": args.candidate,
            "metric": baseline.metric,
            "alpha": args.alpha,
            "max_drop": args.max_drop,
            "seeds": pairing.seeds,
            "filters": [verdict_json(verdict) for verdict in verdicts],
        }, indent=2))
    else:
        print(render_text(verdicts, pairing, args, baseline.metric))
    return exit_code
