"""tools/accuracy-gate end to end: exit codes, messages, pairing, per-filter decisions, seeds, JSON.

Sample lines are written the way lm-evaluation-harness writes ``samples_<task>_<date>.jsonl``
(EvaluationTracker.save_results_samples): one JSON object per (doc_id, filter) with doc, target (a
string), arguments as {"gen_args_i": {"arg_j": ...}}, resps, filtered_resps, filter, metrics, the
three sha256 digests, and the metric values (1.0 / 0.0).
"""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar as statsmodels_mcnemar

from tools.accuracy_gate import main

pytestmark = pytest.mark.cpu

REPO_ROOT = Path(__file__).resolve().parents[2]
GSM8K_ITEMS = 1319
GSM8K_FILTERS = ("strict-match", "flexible-extract")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def lm_eval_line(doc_id: int, filter_name: str, right: bool, question: str | None = None) -> dict:
    question = question or f"Natalia sold clips to {doc_id} of her friends. How many clips?"
    answer = str(doc_id * 2)
    prompt = f"Question: {question}\nAnswer:"
    response = f"The answer is {answer if right else 'unknown'}.\n#### {answer if right else '0'}"
    return {
        "doc_id": doc_id,
        "doc": {"question": question, "answer": f"... #### {answer}"},
        "target": answer,
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {"until": ["Question:"], "do_sample": False}}},
        "resps": [[response]],
        "filtered_resps": [answer if right else "0"],
        "filter": filter_name,
        "metrics": ["exact_match"],
        "doc_hash": sha256(json.dumps({"question": question}, indent=2, ensure_ascii=False)),
        "prompt_hash": sha256(prompt),
        "target_hash": sha256(answer),
        "exact_match": 1.0 if right else 0.0,
    }


def write_jsonl(path: Path, records) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


def write_lm_eval(path: Path, outcomes: dict) -> str:
    """outcomes: filter -> sequence of 0/1 per doc_id."""
    return write_jsonl(path, (lm_eval_line(doc_id, filter_name, bool(right))
                              for filter_name, rights in outcomes.items() for doc_id, right in enumerate(rights)))


def baseline_outcomes(seed: int = 7, items: int = GSM8K_ITEMS, accuracy: float = 0.75) -> np.ndarray:
    return (np.random.default_rng(seed).random(items) < accuracy).astype(int)


def perturb(outcomes: np.ndarray, seed: int, noise: float, extra_breakage: float) -> np.ndarray:
    """A candidate that disagrees with the baseline on a fraction ``noise`` of all items, half each way
    (equal quality), and also gets wrong a further fraction ``extra_breakage`` of all items (a real drop)."""
    rng = np.random.default_rng(seed)
    right, draw = outcomes == 1, rng.random(outcomes.size)
    accuracy = right.mean()
    loses = right & (draw < (noise / 2 + extra_breakage) / accuracy)
    gains = ~right & (draw < (noise / 2) / (1 - accuracy))
    return np.where(loses, 0, np.where(gains, 1, outcomes))


def run_gate(capsys, *argv):
    code = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_refusal(err: str, *fragments):
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("accuracy-gate: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


# --- decisions ------------------------------------------------------------------------------------

def test_identical_runs_pass(tmp_path, capsys):
    outcomes = {name: baseline_outcomes() for name in GSM8K_FILTERS}
    baseline = write_lm_eval(tmp_path / "samples_gsm8k_2025-01-01T00-00-00.jsonl", outcomes)
    code, out, _ = run_gate(capsys, baseline, baseline)
    assert code == 0
    assert "filter strict-match: 1319 pairs" in out and "filter flexible-extract: 1319 pairs" in out
    assert out.rstrip().endswith("accuracy-gate: PASS (2 filters)")


def test_equal_quality_noise_passes(tmp_path, capsys):
    """Two implementations that disagree on 4% of items, evenly both ways: not a drop."""
    base = baseline_outcomes()
    candidate = perturb(base, seed=11, noise=0.04, extra_breakage=0.0)
    code, out, _ = run_gate(capsys, write_lm_eval(tmp_path / "b.jsonl", {"strict-match": base}),
                            write_lm_eval(tmp_path / "c.jsonl", {"strict-match": candidate}))
    assert code == 0, out


def test_truly_worse_candidate_is_rejected(tmp_path, capsys):
    """Negative control: the candidate breaks 3% of the baseline's right answers on top of the noise."""
    base = baseline_outcomes()
    candidate = perturb(base, seed=11, noise=0.04, extra_breakage=0.03)
    code, out, _ = run_gate(capsys, write_lm_eval(tmp_path / "b.jsonl", {"strict-match": base}),
                            write_lm_eval(tmp_path / "c.jsonl", {"strict-match": candidate}))
    assert code == 1
    assert "FAIL: significantly worse" in out
    assert out.rstrip().endswith("FAIL (1 of 1 filters: strict-match)")


def test_each_filter_is_judged_on_its_own(tmp_path, capsys):
    base = baseline_outcomes()
    broken_extraction = perturb(base, seed=3, noise=0.0, extra_breakage=0.04)
    code, out, _ = run_gate(
        capsys,
        write_lm_eval(tmp_path / "b.jsonl", {"strict-match": base, "flexible-extract": base}),
        write_lm_eval(tmp_path / "c.jsonl", {"strict-match": broken_extraction, "flexible-extract": base}))
    assert code == 1
    assert out.rstrip().endswith("FAIL (1 of 2 filters: strict-match)")
    flexible = out.split("filter flexible-extract:")[1].split("filter strict-match:")[0]
    assert "verdict         pass" in flexible


def test_better_candidate_passes(tmp_path, capsys):
    base = baseline_outcomes()
    better = base.copy()
    better[np.flatnonzero(base == 0)[:40]] = 1
    code, _, _ = run_gate(capsys, write_lm_eval(tmp_path / "b.jsonl", {"strict-match": base}),
                          write_lm_eval(tmp_path / "c.jsonl", {"strict-match": better}))
    assert code == 0


def test_max_drop_fails_when_a_larger_drop_is_not_ruled_out(tmp_path, capsys):
    """Few items, no significant drop, but the CI is too wide to rule out a 1-point drop."""
    base = baseline_outcomes(items=200)
    candidate = perturb(base, seed=5, noise=0.05, extra_breakage=0.0)
    files = (write_lm_eval(tmp_path / "b.jsonl", {"strict-match": base}),
             write_lm_eval(tmp_path / "c.jsonl", {"strict-match": candidate}))
    code, _, _ = run_gate(capsys, *files)
    assert code == 0
    code, out, _ = run_gate(capsys, *files, "--max-drop", "1")
    assert code == 1 and "a drop beyond the 1.00-pt margin is not ruled out" in out
    code, _, _ = run_gate(capsys, *files, "--max-drop", "20")
    assert code == 0


def test_max_drop_replaces_significance_with_non_inferiority(tmp_path, capsys):
    """A lossy candidate 1 pt worse on 5000 items: significantly worse, yet provably within a 2-pt
    margin (passes with --max-drop 2); a 4-pt drop is beyond it (negative control: fails)."""
    base = baseline_outcomes(items=5000)
    files = {drop: write_lm_eval(tmp_path / f"c{drop}.jsonl",
                                 {"strict-match": perturb(base, seed=9, noise=0.02, extra_breakage=drop)})
             for drop in (0.01, 0.04)}
    baseline = write_lm_eval(tmp_path / "b.jsonl", {"strict-match": base})
    code, out, _ = run_gate(capsys, baseline, files[0.01])
    assert code == 1 and "significantly worse" in out
    code, out, _ = run_gate(capsys, baseline, files[0.01], "--max-drop", "2")
    assert code == 0 and "non-inferiority" in out
    code, out, _ = run_gate(capsys, baseline, files[0.04], "--max-drop", "2")
    assert code == 1 and "a drop beyond the 2.00-pt margin is not ruled out" in out


def test_alpha_moves_the_decision(tmp_path, capsys):
    # 9 against, 2 for: one-sided exact p = 67/2048 = 0.0327.
    base = np.array([1] * 9 + [0] * 2 + [1] * 50)
    candidate = np.array([0] * 9 + [1] * 2 + [1] * 50)
    files = (write_lm_eval(tmp_path / "b.jsonl", {"strict-match": base}),
             write_lm_eval(tmp_path / "c.jsonl", {"strict-match": candidate}))
    assert run_gate(capsys, *files)[0] == 1
    assert run_gate(capsys, *files, "--alpha", "0.01")[0] == 0


def test_json_report_matches_the_table_and_statsmodels(tmp_path, capsys):
    base = baseline_outcomes()
    candidate = perturb(base, seed=2, noise=0.03, extra_breakage=0.01)
    code, out, _ = run_gate(capsys, write_lm_eval(tmp_path / "b.jsonl", {"strict-match": base}),
                            write_lm_eval(tmp_path / "c.jsonl", {"strict-match": candidate}), "--json")
    report = json.loads(out)
    assert report["exit_code"] == code and report["result"] == ("fail" if code else "pass")
    (only,) = report["filters"]
    table = only["table"]
    assert table["baseline_only"] == int(np.sum((base == 1) & (candidate == 0)))
    assert table["candidate_only"] == int(np.sum((base == 0) & (candidate == 1)))
    expected = statsmodels_mcnemar([[table["both_right"], table["baseline_only"]],
                                    [table["candidate_only"], table["both_wrong"]]], exact=True).pvalue
    assert only["p_two_sided"] == pytest.approx(expected, rel=1e-10)
    assert only["candidate_accuracy"] - only["baseline_accuracy"] == pytest.approx(only["difference"])


def test_acc_is_the_default_for_multiple_choice_lines(tmp_path, capsys):
    def line(doc_id, right):
        return {"doc_id": doc_id, "doc": {"q": doc_id}, "target": "1", "arguments": {},
                "resps": [[[-1.0, right]], [[-2.0, not right]]], "filtered_resps": [[-1.0, right], [-2.0, not right]],
                "filter": "none", "metrics": ["acc", "acc_norm"], "acc": float(right), "acc_norm": 1.0}
    base = write_jsonl(tmp_path / "b.jsonl", (line(i, True) for i in range(30)))
    worse = write_jsonl(tmp_path / "c.jsonl", (line(i, i >= 10) for i in range(30)))
    code, out, _ = run_gate(capsys, base, worse)
    assert code == 1 and "metric acc," in out
    code, out, _ = run_gate(capsys, base, worse, "--metric", "acc_norm")
    assert code == 0 and "metric acc_norm," in out


# --- broken and missing pairs ---------------------------------------------------------------------

def test_broken_pairing_is_a_failure(tmp_path, capsys):
    """Negative control: same doc_ids, but doc 3 is a different question in the candidate's run."""
    base = [lm_eval_line(doc_id, "strict-match", True) for doc_id in range(20)]
    shuffled = [lm_eval_line(doc_id, "strict-match", True) for doc_id in range(20)]
    shuffled[3] = lm_eval_line(3, "strict-match", True, question="A different question entirely")
    code, out, _ = run_gate(capsys, write_jsonl(tmp_path / "b.jsonl", base), write_jsonl(tmp_path / "c.jsonl", shuffled))
    assert code == 1
    assert "broken pairing: 1 pairs" in out and "doc_hash" in out and "(doc_id 3, filter strict-match)" in out


def test_pairs_missing_on_either_side_are_listed(tmp_path, capsys):
    base = write_lm_eval(tmp_path / "b.jsonl", {"strict-match": [1] * 10})
    fewer = write_jsonl(tmp_path / "c.jsonl", [lm_eval_line(i, "strict-match", True) for i in range(8)]
                        + [lm_eval_line(42, "strict-match", True)])
    code, out, err = run_gate(capsys, base, fewer)
    assert code == 2 and out == ""
    assert_one_line_refusal(err, "pairs missing on one side", "2 only in BASELINE: (doc_id 8, filter strict-match), "
                            "(doc_id 9, filter strict-match)", "1 only in CANDIDATE: (doc_id 42, filter strict-match)")


def test_long_lists_of_missing_pairs_are_counted_in_one_line_and_given_in_full_as_json(tmp_path, capsys):
    base = write_lm_eval(tmp_path / "b.jsonl", {"strict-match": [1] * 100, "flexible-extract": [1] * 100})
    one_filter = write_lm_eval(tmp_path / "c.jsonl", {"strict-match": [1] * 100})
    code, _, err = run_gate(capsys, base, one_filter)
    assert code == 2
    assert_one_line_refusal(err, "100 only in BASELINE", "and 95 more")
    code, out, _ = run_gate(capsys, base, one_filter, "--json")
    report = json.loads(out)
    assert code == 2 and report["exit_code"] == 2 and len(report["only_in_baseline"]) == 100


def test_duplicate_keys_are_refused(tmp_path, capsys):
    lines = [lm_eval_line(i, "strict-match", True) for i in range(5)] + [lm_eval_line(2, "strict-match", False)]
    code, _, err = run_gate(capsys, write_jsonl(tmp_path / "b.jsonl", lines), write_jsonl(tmp_path / "c.jsonl", lines))
    assert code == 2
    assert_one_line_refusal(err, "BASELINE: duplicate key (doc_id 2, filter strict-match)", "b.jsonl:3 and",
                            "b.jsonl:6")


def test_duplicates_without_a_filter_field_say_why(tmp_path, capsys):
    """lm-eval before the "filter" field wrote every filter's lines with the same doc_ids."""
    lines = [{key: value for key, value in lm_eval_line(i % 3, name, True).items() if key != "filter"}
             for name in GSM8K_FILTERS for i in range(3)]
    code, _, err = run_gate(capsys, write_jsonl(tmp_path / "b.jsonl", lines), write_jsonl(tmp_path / "c.jsonl", lines))
    assert code == 2
    assert_one_line_refusal(err, "duplicate key (doc_id 0, filter none)", "carry no \"filter\" field")


# --- plain JSONL and seeds ------------------------------------------------------------------------

def test_plain_jsonl_pairs_on_id(tmp_path, capsys):
    ids = [f"q{i}" for i in range(300)]
    base = write_jsonl(tmp_path / "b.jsonl", ({"id": i, "correct": True} for i in ids))
    reordered_worse = write_jsonl(tmp_path / "c.jsonl", ({"id": i, "correct": n % 10 != 0}
                                                         for n, i in reversed(list(enumerate(ids)))))
    code, out, _ = run_gate(capsys, base, base)
    assert code == 0 and "metric correct" in out
    code, out, _ = run_gate(capsys, base, reordered_worse)
    assert code == 1 and "30 discordant pairs" in out


def test_seed_files_pair_on_seed_and_id(tmp_path, capsys):
    base_outcomes = {seed: baseline_outcomes(seed=seed, items=400) for seed in range(3)}
    base = ",".join(f"{seed}=" + write_lm_eval(tmp_path / f"b{seed}.jsonl", {"strict-match": rights})
                    for seed, rights in base_outcomes.items())
    same = ",".join(f"{seed}=" + write_lm_eval(tmp_path / f"c{seed}.jsonl", {"strict-match": rights})
                    for seed, rights in base_outcomes.items())
    worse = ",".join(f"{seed}=" + write_lm_eval(tmp_path / f"w{seed}.jsonl", {"strict-match": perturb(
        rights, seed=seed, noise=0.02, extra_breakage=0.03)}) for seed, rights in base_outcomes.items())
    code, out, _ = run_gate(capsys, base, same)
    assert code == 0 and "1200 pairs (3 seeds)" in out
    assert run_gate(capsys, base, worse)[0] == 1
    two_seeds = ",".join(same.split(",")[:2])
    code, _, err = run_gate(capsys, base, two_seeds)
    assert code == 2
    assert_one_line_refusal(err, "400 only in BASELINE: (seed 2, doc_id 0, filter strict-match)")


def test_plain_records_may_carry_their_seed(tmp_path, capsys):
    records = [{"seed": seed, "id": i, "correct": (i + seed) % 4 != 0} for seed in range(4) for i in range(50)]
    path = write_jsonl(tmp_path / "b.jsonl", records)
    code, out, _ = run_gate(capsys, path, path)
    assert code == 0 and "200 pairs (4 seeds)" in out
    code, _, err = run_gate(capsys, f"0={path}", f"0={path}")
    assert code == 2
    assert_one_line_refusal(err, "carries \"seed\" and the file was given as 0=")


# --- unusable input -------------------------------------------------------------------------------

@pytest.mark.parametrize("content, fragments", [
    ("", ["holds no records"]),
    ("{not json\n", ["b.jsonl:1: not JSON"]),
    ("[1, 2]\n", ["expected a JSON object, got list"]),
    ('{"question": "x"}\n', ["neither an lm-eval sample", "plain"]),
    ('{"doc_id": 0, "filter": "none", "exact_match": 0.5}\n', ["exact_match is 0.5", "--metric"]),
    ('{"doc_id": 0, "filter": "none", "f1": 1.0}\n', ["carries none of exact_match, acc", "f1", "--metric NAME"]),
    ('{"doc_id": [0], "filter": "none", "acc": 1}\n', ["doc_id is [0]", "integer or a string"]),
    ('{"doc_id": 0, "filter": null, "acc": 1}\n', ["filter is None"]),
    ('{"doc_id": 0, "acc": 1}\n{"doc_id": 1}\n', ["b.jsonl:2: no 'acc' field"]),
    ('{"doc_id": 0, "acc": 1}\n{"id": 1, "correct": true}\n', ["b.jsonl:2: a plain record", "lm-eval"]),
    ('{"id": 0, "correct": true, "seed": 1}\n{"id": 1, "correct": true}\n', ["has no \"seed\" field"]),
    ('{"id": 0, "correct": "yes"}\n', ["correct is 'yes'"]),
])
def test_bad_lines_are_refused_with_one_line(tmp_path, capsys, content, fragments):
    bad = tmp_path / "b.jsonl"
    bad.write_text(content, encoding="utf-8")
    good = write_jsonl(tmp_path / "c.jsonl", [{"id": 0, "correct": True}])
    code, out, err = run_gate(capsys, bad, good)
    assert code == 2 and out == ""
    assert_one_line_refusal(err, "BASELINE", *fragments)


@pytest.mark.parametrize("argv, fragments", [
    (["missing.jsonl", "c"], ["BASELINE: cannot read 'missing.jsonl'"]),
    (["b", "c", "--alpha", "0"], ["--alpha: 0 is not strictly between 0 and 1"]),
    (["b", "c", "--alpha", "nan"], ["--alpha"]),
    (["b", "c", "--max-drop", "-1"], ["--max-drop: -1 is not in 0..100"]),
    (["b", "c", "--alpha", "x"], ["argument --alpha: invalid float value"]),
    (["b"], ["CANDIDATE"]),
    (["b", "0=x.jsonl,1"], ["CANDIDATE: '1' is not SEED=FILE"]),
    (["b", "0=x.jsonl,0=y.jsonl"], ["CANDIDATE: a seed is named twice"]),
])
def test_bad_arguments_are_refused_with_one_line(tmp_path, capsys, monkeypatch, argv, fragments):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "b", [{"id": 0, "correct": True}])
    write_jsonl(tmp_path / "c", [{"id": 0, "correct": True}])
    code, _, err = run_gate(capsys, *argv)
    assert code == 2
    assert_one_line_refusal(err, *fragments)


def test_help_exits_zero(capsys):
    code, out, _ = run_gate(capsys, "--help")
    assert code == 0 and "BASELINE" in out and "--max-drop" in out


def test_metric_option_is_refused_for_plain_records(tmp_path, capsys):
    path = write_jsonl(tmp_path / "b.jsonl", [{"id": 0, "correct": True}])
    code, _, err = run_gate(capsys, path, path, "--metric", "acc")
    assert code == 2
    assert_one_line_refusal(err, "--metric", "plain JSONL")


def test_formats_must_match(tmp_path, capsys):
    plain = write_jsonl(tmp_path / "b.jsonl", [{"id": 0, "correct": True}])
    lm_eval = write_jsonl(tmp_path / "c.jsonl", [lm_eval_line(0, "none", True)])
    code, _, err = run_gate(capsys, lm_eval, plain)
    assert code == 2
    assert_one_line_refusal(err, "CANDIDATE: is plain and BASELINE is lm-eval")


def test_executable_runs_from_anywhere(tmp_path):
    """The script puts the repo root on sys.path itself; exit codes come through the process."""
    path = write_jsonl(tmp_path / "b.jsonl", [{"id": i, "correct": i % 2 == 0} for i in range(10)])
    worse = write_jsonl(tmp_path / "c.jsonl", [{"id": i, "correct": False} for i in range(10)])
    script = REPO_ROOT / "tools" / "accuracy-gate"
    same = subprocess.run([sys.executable, script, path, path], cwd=tmp_path, capture_output=True, text=True)
    assert same.returncode == 0, same.stderr
    assert "PASS" in same.stdout
    fails = subprocess.run([sys.executable, script, path, worse], cwd=tmp_path, capture_output=True, text=True)
    assert fails.returncode == 1 and "significantly worse" in fails.stdout
