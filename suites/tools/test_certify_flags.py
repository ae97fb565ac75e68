"""tools/certify-cells fails closed on bad flags and recipes (issue 16.3): exit 2 in one line, before any
work, never a certificate, never a parity failure of the kernel."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import torch

from ops.catalog import op

from suites.claims import REPO
from tools import certify_cells
from tools.engine.certify import check_policy, writes_certificates
from tools.engine.isolation import cpu_slots, gpu_slots, thread_share
from tools.cli import UsageError

pytestmark = pytest.mark.cpu
ENTRY = op("greedy_argmax")
CELL = "decode_small_batch"


def _corner() -> dict:
    return ENTRY.strategy_module.corners(ENTRY.cell(CELL), torch.device("cpu"))[0]


def _refused(*words: str) -> str:
    with pytest.raises(UsageError) as refused:
        certify_cells.main(["--device", "cpu", *words])
    return str(refused.value)


@pytest.mark.parametrize("words, says", [
    (("--impl", ""), "--impl: empty"),
    (("--impl", "   "), "--impl: empty"),
    (("--cell-timeout", "nan"), "--cell-timeout: nan"),
    (("--cell-timeout", "inf"), "--cell-timeout: inf"),
    (("--cell-timeout", "-1"), "--cell-timeout: -1"),
    (("--op", "greedy_argmax", "--max-examples", "0"), "a certifying run draws at least"),
    (("--op", "greedy_argmax", "--max-examples", str(10 ** 30)), "--max-examples: 1e+30 is above 100000"),
    (("--op", "greedy_argmax", "--max-examples", "100001"), "is above 100000 draws per cell"),
    (("--op", "greedy_argmax", "--report", "/no/such/folder/report.json"), "folder /no/such/folder does not exist"),
    (("--op", "greedy_argmax", "--junit", "."), "--junit: . is a folder"),
    (("--workers", "0"), "--workers 0: expected a positive number"),
    (("--workers", "2", "--no-isolate"), "--no-isolate: --workers runs cells in worker processes"),
])
def test_bad_flags_are_usage_errors(words, says):
    assert says in _refused(*words)


def test_zero_draws_are_allowed_where_no_certificate_is_written():
    options = certify_cells.parse_args(["--op", "greedy_argmax", "--cell", CELL, "--max-examples", "0"])
    assert options.examples == 0 and not writes_certificates(options)
    check_policy(options)  # no UsageError: nothing is certified


def test_an_unwritable_report_is_refused_before_any_work(tmp_path):
    run = subprocess.run([sys.executable, "tools/certify-cells", "--op", "greedy_argmax", "--device", "cpu",
                          "--cell", CELL, "--max-examples", "0", "--report", str(tmp_path / "missing" / "r.json")],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "does not exist" in run.stderr


@pytest.mark.parametrize("change, says", [
    ({"colour": "red"}, "unknown key 'colour'"),
    ({"V": None}, "missing key 'V'"),
    ({"seed": "7"}, "key 'seed'"),
    ({"R": 10 ** 9}, "key 'R' = 1000000000 is outside cell decode_small_batch"),
    ({"R": 2.5}, "key 'R' = 2.5"),
    ({"dtype": "complex64"}, "--replay"),
])
def test_a_malformed_replay_recipe_is_a_usage_error_naming_the_key(change, says):
    recipe = {key: value for key, value in {**_corner(), **change}.items() if value is not None}
    refusal = _refused("--op", "greedy_argmax", "--cell", CELL, "--replay", json.dumps(recipe))
    assert says in refusal, refusal


def test_a_corner_recipe_replays():
    assert certify_cells.main(["--device", "cpu", "--op", "greedy_argmax", "--cell", CELL, "--replay",
                         json.dumps(_corner())]) == 0


def test_workers_on_cuda_share_each_gpu(monkeypatch):
    """--workers N on cuda: N workers on each GPU --gpus chooses, each seeing only its own GPU (isolated), each
    knowing its GPU's memory (what the cells it runs must fit into)."""
    import types

    options = certify_cells.parse_args(["--device", "cuda", "--workers", "3"])
    assert options.workers == 3 and options.isolate
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(total_memory=(80 + index) << 30))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    slots = gpu_slots(2, 2)   # four workers share the 16 cores
    assert [(slot.label, slot.env) for slot in slots] == [
        ("gpu0.0", {"CUDA_VISIBLE_DEVICES": "3", "OMP_NUM_THREADS": "4"}),
        ("gpu0.1", {"CUDA_VISIBLE_DEVICES": "3", "OMP_NUM_THREADS": "4"}),
        ("gpu1.0", {"CUDA_VISIBLE_DEVICES": "5", "OMP_NUM_THREADS": "4"}),
        ("gpu1.1", {"CUDA_VISIBLE_DEVICES": "5", "OMP_NUM_THREADS": "4"})]
    assert [slot.memory_bytes >> 30 for slot in slots] == [80, 80, 81, 81]
    assert [slot.label for slot in gpu_slots(None)] == ["gpu0", "gpu1", "gpu2"]
    with pytest.raises(UsageError, match="expected a positive number"):
        certify_cells.parse_args(["--device", "cuda", "--workers", "0"])
    with pytest.raises(UsageError, match="--no-isolate: --workers"):
        certify_cells.parse_args(["--device", "cuda", "--workers", "2", "--no-isolate"])


def test_dump_saves_a_failing_recipes_inputs_and_outputs_for_a_debugger(tmp_path, capsys):
    """--dump DIR: the implementation's outputs differ from the reference's exactly where the finding says;
    a passing cell leaves no file (negative control: only failures are dumped)."""
    impl = "suites.sampling.greedy_argmax_impls"
    words = ["--op", "greedy_argmax", "--device", "cpu", "--cell", CELL, "--max-examples", "0", "--no-shrink",
             "--dump", str(tmp_path / "dump")]
    assert certify_cells.main([*words, "--impl", f"{impl}:correct_via_max"]) == 0
    assert list((tmp_path / "dump").iterdir()) == []
    assert certify_cells.main([*words, "--impl", f"{impl}:last_index_on_ties"]) == 1
    path = tmp_path / "dump" / f"greedy_argmax.{CELL}.parity.pt"
    assert f"dump: parity: {path}" in capsys.readouterr().out
    saved = torch.load(path, map_location="cpu", weights_only=False)
    assert saved["oracle"] == "parity" and "--replay" in saved["reproduce"] and saved["outputs"]["truth"] is None
    logits = ENTRY.strategy_module.build(saved["recipe"], torch.device("cpu"))["logits"]
    assert torch.equal(saved["inputs"]["logits"], logits) and saved["inputs"]["logits"].stride() == logits.stride()
    (got,), (expected,) = saved["outputs"]["implementation"], saved["outputs"]["reference"]
    assert torch.equal(expected, ENTRY.reference(logits)) and not torch.equal(got, expected)


def test_dump_into_a_file_is_a_usage_error(tmp_path):
    (tmp_path / "file").write_text("")
    assert "--dump: " in _refused("--op", "greedy_argmax", "--cell", CELL, "--dump", str(tmp_path / "file"))


def test_a_run_stopped_by_its_time_limit_keeps_the_ops_it_finished(monkeypatch):
    """SIGTERM (a time limit) after one op's cells and before the next one's: the finished op's section is
    written, the unfinished one's is not (the control), and the run still ends by the signal."""
    from oracles.battery import CellResult
    from tools.engine import certify

    def stopped_after_greedy_argmax(options, tasks, on_result, costs=None, peaks=None):
        for task in tasks:
            if task.op == "greedy_argmax":
                on_result(task, CellResult(task.op, task.cell_id, "certified", examples=24), 0.1)
        on_result(tasks[-1], CellResult("strict_accept", tasks[-1].cell_id, "certified", examples=24), 0.1)  # one of its cells
        raise SystemExit(128 + 15)

    written = []
    monkeypatch.setattr(certify, "run_tasks", stopped_after_greedy_argmax)
    monkeypatch.setattr("ops.certificates.write_section",
                        lambda entry, arch, section, report: written.append((entry.name, sorted(section["cells"]))) or "x")
    with pytest.raises(SystemExit) as stopped:
        certify_cells.main(["--device", "cpu", "--op", "greedy_argmax", "--op", "strict_accept",
                            "--max-examples", "24"])
    assert stopped.value.code == 143
    assert written == [("greedy_argmax", sorted(cell.id for cell in op("greedy_argmax").cells))]


def test_a_run_ended_by_an_internal_error_keeps_the_ops_judged_whole_before_it(monkeypatch):
    """The judge's error in strict_accept's cell (out of memory, say) after greedy_argmax's cells all ended:
    greedy_argmax's section is written, strict_accept's is not (the control), and the run ends as the internal
    error it is (exit 3)."""
    from oracles.battery import CellResult
    from oracles.judge_errors import JudgeError
    from tools.engine import certify

    def judge_error_in_strict_accept(options, tasks, on_result, costs=None, peaks=None):
        for task in tasks:
            if task.op == "greedy_argmax":
                on_result(task, CellResult(task.op, task.cell_id, "certified", examples=24), 0.1)
        on_result(tasks[-1], CellResult("strict_accept", tasks[-1].cell_id, "certified", examples=24), 0.1)  # one of its cells
        raise JudgeError("the implementation's call ran out of memory (injected)", "parity")

    written = []
    monkeypatch.setattr(certify, "run_tasks", judge_error_in_strict_accept)
    monkeypatch.setattr("ops.certificates.write_section",
                        lambda entry, arch, section, report: written.append((entry.name, sorted(section["cells"]))) or "x")
    code = certify_cells.main(["--device", "cpu", "--op", "greedy_argmax", "--op", "strict_accept",
                               "--max-examples", "24"])
    assert code == 3
    assert written == [("greedy_argmax", sorted(cell.id for cell in op("greedy_argmax").cells))]


def test_workers_sharing_the_cores_get_their_share_of_threads(monkeypatch):
    """cpu_slots(N) gives each worker cores / N OpenMP threads (at least one); one worker, or a caller that
    chose OMP_NUM_THREADS itself, is left as it is."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert [slot.env for slot in cpu_slots(2)] == [{"OMP_NUM_THREADS": "1"}] * 2
    assert [slot.env for slot in cpu_slots(3)] == [{"OMP_NUM_THREADS": "1"}] * 3
    assert cpu_slots(1)[0].env == {} and thread_share(1) == {}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert thread_share(3) == {"OMP_NUM_THREADS": "5"}
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert thread_share(3) == {} and cpu_slots(2)[0].env == {}


def test_a_log_shows_each_new_kind_of_note_and_the_rest_once_a_minute():
    """Where stderr is a log, not a terminal: a cell that runs for minutes must show whether it draws,
    shrinks or waits (the H200 run that OOM'd a paged cell and re-ran it alone said nothing for 7 minutes)."""
    import io

    from tools.engine.certify import LoggedProgress

    now, log = [0.0], io.StringIO()
    logged = LoggedProgress(every_s=60, clock=lambda: now[0], stream=log)
    for second, worker, line in [(0, "gpu0.0", "op/a: 1/40 examples"), (1, "gpu0.0", "op/a: 2/40 examples"),
                                 (2, "gpu0.1", "op/b: 1/40 examples"), (30, "gpu0.0", "op/a: 9/40 examples"),
                                 (31, "gpu0.0", "op/a: parity failed after 9 examples; shrinking it"),
                                 (63, "gpu0.1", "op/b: 30/40 examples"), (64, "gpu0.0", "op/a: parity failed "
                                                                                        "after 9 examples; shrinking it")]:
        now[0] = second
        logged(worker, line)
    assert log.getvalue().splitlines() == [
        "  [gpu0.0] op/a: 1/40 examples", "  [gpu0.1] op/b: 1/40 examples",
        "  [gpu0.0] op/a: parity failed after 9 examples; shrinking it", "  [gpu0.1] op/b: 30/40 examples"]


def test_a_logged_run_says_when_a_cell_starts_shrinking(capsys):
    """The whole path, worker to log (stderr captured: not a terminal); negative control: a passing
    implementation's log has no shrink line."""
    impl = "suites.sampling.greedy_argmax_impls"
    words = ["--op", "greedy_argmax", "--device", "cpu", "--cell", CELL, "--max-examples", "2"]
    assert certify_cells.main([*words, "--impl", f"{impl}:last_index_on_ties"]) == 1
    wrong = capsys.readouterr().err
    assert certify_cells.main([*words, "--impl", f"{impl}:correct_via_max"]) == 0
    right = capsys.readouterr().err
    assert f"greedy_argmax/{CELL}: parity failed after" in wrong, wrong
    assert "shrinking" not in right and f"greedy_argmax/{CELL}: 1/" in right, right


def test_every_backends_cells_run_in_one_pool_and_each_result_reaches_its_own_backend(monkeypatch):
    """An op's kernels share their cells' ids: both backends' tasks go to the workers in one run (a backend run
    after another left the workers idle at each one's end: 2026-12-06f), and each result is announced to and
    concluded by the backend whose task it was (the control: the same op and cell answered differently by
    each backend)."""
    from oracles.battery import CellResult
    from tools.engine import certify
    from tools.engine.worker import CellTask

    pooled = []

    def run_tasks(options, tasks, on_result, costs=None, peaks=None):
        pooled.append([task.key for task in tasks])
        found = {}
        for task in tasks:
            found[task.key] = CellResult(task.op, task.cell_id, "certified" if task.backend == "triton" else "failed")
            on_result(task, found[task.key], 1.0, None)
        return found

    monkeypatch.setattr(certify, "run_tasks", run_tasks)
    seen, runs = {}, []
    for backend in ("triton", "cute"):
        results, announced = {}, []
        seen[backend] = (results, announced)
        runs.append(certify.KernelRun(
            backend, [], [("op", "a", None)], [CellTask("op", "a", "cpu", backend=backend)], results, [],
            lambda result, seconds, peak, announced=announced: announced.append(result.status),
            lambda rows, results=results: results["op", "a"].status == "failed", lambda: None))
    assert certify.run_kernels(certify.RunOptions(device="cpu"), runs, None) == (True, 2)
    assert pooled == [[("op", "a", "triton"), ("op", "a", "cute")]]
    assert [seen[backend][1] for backend in ("triton", "cute")] == [["certified"], ["failed"]]
    assert [seen[backend][0]["op", "a"].status for backend in ("triton", "cute")] == ["certified", "failed"]


def test_a_judge_error_is_reproduced_with_its_own_backends_flags(monkeypatch):
    """The judge's error in one backend's cell of a pooled run: its reproduction names that backend's flags (the
    control: the other backend's cell of the same op and cell would name the other's), and every backend keeps
    the ops it finished."""
    from oracles.judge_errors import JudgeError
    from tools.engine import certify
    from tools.engine.worker import CellTask

    kept = []
    runs = [certify.KernelRun(backend, [], [], [CellTask("op", "a", "cpu", backend=backend)], {},
                              ["--backend", backend], None, None, lambda backend=backend: kept.append(backend))
            for backend in ("triton", "cute")]
    for backend in ("cute", "triton"):
        def run_tasks(options, tasks, on_result, costs=None, peaks=None, backend=backend):
            error = JudgeError("the judge's own error (injected)", "parity")
            error.op, error.cell_id, error.backend = "op", "a", backend
            raise error

        monkeypatch.setattr(certify, "run_tasks", run_tasks)
        with pytest.raises(JudgeError) as raised:
            certify.run_kernels(certify.RunOptions(device="cpu"), runs, None)
        assert f"--backend {backend}" in raised.value.reproduce, raised.value.reproduce
    assert kept == ["triton", "cute"] * 2


def test_several_workers_start_the_slowest_cells_first(tmp_path, monkeypatch):
    """A run on several workers ends with its last cell: the cells the committed reports show slowest a draw
    start first, a cell of no report before all, the catalog's order among equals; one worker keeps the
    catalog's order (the control)."""
    from ops import catalog, certificates
    from tools.engine import certify
    from tools.engine.worker import CellTask

    entry = catalog.kernels("greedy_argmax")[0]
    report = tmp_path / "greedy_argmax.sm90.report.json"
    report.write_text(json.dumps({"results": [
        {"op": entry.name, "backend": entry.backend, "cell": "empty_batch", "seconds": 1.0, "examples": 10},
        {"op": entry.name, "backend": entry.backend, "cell": "decode_small_batch", "seconds": 30.0, "examples": 10},
        {"op": entry.name, "backend": entry.backend, "cell": "decode_mid_batch", "seconds": 1.0, "examples": 10}]}))
    monkeypatch.setattr(certificates, "report_path", lambda found, arch: report)
    costs = certify.seconds_a_draw([entry], catalog.Arch.SM90)
    assert costs == {(entry.name, "empty_batch"): 0.1, (entry.name, "decode_small_batch"): 3.0,
                     (entry.name, "decode_mid_batch"): 0.1}
    tasks = [CellTask(entry.name, cell.id, "cpu", backend=entry.backend) for cell in entry.cells]
    costs = {(*key, entry.backend): value for key, value in costs.items()}   # as run_kernels keys them
    assert [task.cell_id for task in certify.longest_first(tasks, costs)] == \
        ["decode_large_batch", "decode_small_batch", "empty_batch", "decode_mid_batch"]

    seen = []
    monkeypatch.setattr(certify, "run_isolated", lambda tasks, slots, **kw: seen.append([t.cell_id for t in tasks]))
    for workers in (2, 1):
        certify.run_tasks(certify.RunOptions(device="cpu", workers=workers, isolate=True), tasks, None, costs)
    assert seen == [["decode_large_batch", "decode_small_batch", "empty_batch", "decode_mid_batch"],
                    [cell.id for cell in entry.cells]]
    report.write_text("not json")
    assert certify.seconds_a_draw([entry], catalog.Arch.SM90) == {}
    # a FIFO in the report's place is refused at once, never waited on for a writer
    report.unlink()
    os.mkfifo(report)
    read = threading.Thread(target=lambda: seen.append(certify.seconds_a_draw([entry], catalog.Arch.SM90)), daemon=True)
    read.start()
    read.join(timeout=30)
    assert not read.is_alive() and seen[-1] == {}, "seconds_a_draw waited on a FIFO"
