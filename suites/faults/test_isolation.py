"""Isolation: a kernel that crashes its process or never ends fails its own cell — with the oracle and
the example that were running and a reproduction — and certification goes on in a fresh worker;
results never depend on which worker finished first.  What is the machine's or the judge's is never the
kernel's: running out of memory, the judge's own code outlasting ``--cell-timeout`` and a worker that cannot
start end the run as an internal error (exit 3), concluding nothing about the implementation.

The faults are real Triton kernels (``faulty_kernels.py``): out of bounds is an illegal address on the
H200 and a segfault under the CPU interpreter; the spinning kernel never returns on either.  The judge's
own faults are planted in its worker as it starts (``judge_side/sitecustomize.py``).
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import types

import pytest

from ops.sampling.greedy_argmax import ENTRY
from oracles.battery import CellResult
from oracles.judge_errors import JudgeError
from suites.certification import certify_cells_here, machine_device
from suites.claims import REPO
from suites.processes import finished, started
from tools.engine.certify import certificate_section
from tools.engine.impl_executor import HostFault
from tools.engine.worker import CellTask, execute
from tools.engine import activity, isolation
from tools.engine.isolation import Slot, WorkerStartError, cpu_slots, gpu_slots, run_isolated

pytestmark = [pytest.mark.cpu, pytest.mark.sm90]
FAULTY = "suites.faults.faulty_kernels"
CORRECT = "suites.sampling.greedy_argmax_impls:correct_via_max"
DEVICE = machine_device().type
# The hanging cell costs this much; every other cell of the run ends far inside it (empty_batch, the
# slowest, took under 5 s in a fresh worker on a loaded 2-core CPU).
HANG_LIMIT_S = 12
JUDGE_SIDE = REPO / "suites" / "faults" / "judge_side"


def _certify_command(*words) -> list[str]:
    return [sys.executable, "tools/certify-cells", "--op", "greedy_argmax", *words]


def _certify(*words):
    return subprocess.run(_certify_command(*words), capture_output=True, text=True, cwd=REPO)


def _plant_judge_side_faults(monkeypatch, **faults) -> None:
    """The Python processes this test starts load ``judge_side/sitecustomize.py``, with ``faults`` in their
    environment."""
    path = os.pathsep.join(p for p in (str(JUDGE_SIDE), str(REPO), os.environ.get("PYTHONPATH")) if p)
    for name, value in {"PYTHONPATH": path, **faults}.items():
        monkeypatch.setenv(name, value)


def test_a_crash_and_a_hang_fail_their_cells_and_the_run_goes_on(tmp_path):
    report = tmp_path / "report.json"
    # two workers: the hang's limit runs out while the crash and the cell after it are judged beside it, and
    # the crash's reproduction is replayed as soon as its line is printed (stderr to a file: a pipe read only
    # at the end could fill and stop the run)
    with open(tmp_path / "stderr", "w+") as stderr:
        run = subprocess.Popen(_certify_command(
            "--device", DEVICE, "--isolate", "-n", "2", "--impl", f"{FAULTY}:faulty_by_batch", "--max-examples", "1",
            "--cell", "decode_small_batch", "--cell", "decode_mid_batch", "--cell", "empty_batch",
            "--cell-timeout", str(HANG_LIMIT_S), "--report", str(report)),
            stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=REPO)
        stdout, replay = "", None
        for line in run.stdout:
            stdout += line
            if replay is None and "reproduce:" in line and "decode_small_batch" in line:
                replay = started(line.split("reproduce:", 1)[1], REPO / "docs", shell=True)  # any directory
        run.wait()
        stderr.seek(0)
        run = subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr.read())
    replayed = replay and finished(replay)
    assert run.returncode == 1, run.stdout + run.stderr
    results = {record["cell"]: record for record in json.loads(report.read_text())["results"]}
    crash, hang, after = results["decode_small_batch"], results["decode_mid_batch"], results["empty_batch"]

    # out of bounds: a dead worker under the interpreter, a CUDA error on the GPU; either way parity's
    # finding, on the small-batch example that faulted
    assert crash["status"] == "failed" and crash["failure"]["oracle"] == "parity", crash
    assert 1 <= crash["failure"]["recipe"]["R"] <= 16
    if DEVICE == "cpu":
        assert crash["fault"]["kind"] == "crash" and "SIGSEGV" in crash["fault"]["worker"], crash
        assert any("wild_store" in line for line in crash["fault"]["stderr_tail"]), crash["fault"]
    else:
        assert "illegal memory access" in crash["failure"]["message"], crash
    # never terminates: killed at the limit, named with the oracle and example that were running
    assert hang["status"] == "failed" and hang["fault"]["kind"] == "hang", hang
    assert hang["failure"]["oracle"] == "parity" and 17 <= hang["failure"]["recipe"]["R"] <= 255
    assert "in the implementation's call (running for " in hang["failure"]["message"], hang
    # a fresh worker passes the next cell (an --impl is judged, never certified): nothing of the dead ones reached it
    assert after["status"] == "passed", after

    assert replayed, f"no reproduction of decode_small_batch: {run.stdout}"
    assert replayed.returncode == 1 and "oracle:  parity" in replayed.stdout, replayed.stdout + replayed.stderr


def test_a_hang_is_named_in_its_call_when_the_parent_looks_late(monkeypatch):
    """The parent looks at a cell's limit only now and then (about once a second; later on a loaded machine,
    as beside the reproduction above, where this was flaky): a worker given the limit as a call limit of its
    own (as certify-cells gives every task) must not kill its host first, go on to the next oracle's draw and
    be killed there, its hang reported as a call that returned, on another oracle's example."""
    limit_s, late_s = 8, 4
    start = isolation._Worker.start

    def looked_at_late(worker, task, cell_timeout):
        start(worker, task, cell_timeout)
        worker.deadline += late_s   # the parent looks late_s after the cell's limit ran out

    monkeypatch.setattr(isolation._Worker, "start", looked_at_late)
    task = CellTask(ENTRY.name, "decode_mid_batch", DEVICE, f"{FAULTY}:spins_on_mid_batches", max_examples=1,
                    call_limit_s=limit_s)
    hang = run_isolated([task], _slots()[:1], cell_timeout=limit_s)[task.key].record()
    assert hang["status"] == "failed" and hang["fault"]["kind"] == "hang", hang
    assert hang["failure"]["oracle"] == "parity" and 17 <= hang["failure"]["recipe"]["R"] <= 255, hang
    assert "in the implementation's call (running for " in hang["failure"]["message"], hang


def _slots() -> list[Slot]:
    """Two workers at once: the CPU twice, or every GPU."""
    return cpu_slots(2) if DEVICE == "cpu" else gpu_slots(None)


def test_workers_give_the_results_one_process_gives():
    tasks = [CellTask(ENTRY.name, cell, DEVICE, CORRECT, max_examples=1)
             for cell in ("empty_batch", "decode_small_batch", "decode_mid_batch")]
    finished = []
    parallel = run_isolated(tasks, _slots(), cell_timeout=600, on_result=lambda task, result, *_: finished.append(result))
    assert len(finished) == len(tasks) and all(result.status == "certified" for result in finished), finished
    assert {key: result.record() for key, result in parallel.items()} == \
        {task.key: execute(task).record() for task in tasks}


def test_a_cell_out_of_memory_beside_other_workers_runs_again_alone_then_ends_the_run(monkeypatch):
    """Workers sharing a GPU: a cell out of its memory runs again alone; out of memory alone too, the run ends
    as the judge's internal error (a fact about the machine, no finding against the kernel), after the other
    cells; on a slot of its own (the control) it ends the run at once, not run again.  Alone means alone: the
    other workers have ended on their own (exit 0, their implementation hosts ended before them) before the
    rerun's worker starts; a killed worker (-9) would leave its hosts holding the GPU's memory a moment longer
    (a 2026-12-05 H100 run's rerun met 73 GB still in use)."""
    started = []   # per worker started: the exit statuses of the workers started before it, as it starts

    class Recorded(isolation._Worker):
        def __init__(self, *args, **kwargs):
            started.append([worker.process.poll() for worker in started_workers])
            super().__init__(*args, **kwargs)
            started_workers.append(self)

    started_workers = []
    monkeypatch.setattr(isolation, "_Worker", Recorded)
    tasks = [CellTask(ENTRY.name, cell, DEVICE, f"{FAULTY}:out_of_memory_on_small_batches", max_examples=1)
             for cell in ("decode_small_batch", "empty_batch")]
    shared = gpu_slots(1, 2) if DEVICE == "cuda" else [Slot(f"gpu0.{i}", {"CUDA_VISIBLE_DEVICES": ""}) for i in (0, 1)]
    for slots, again in ((shared, True), (cpu_slots(1) if DEVICE == "cpu" else gpu_slots(1), False)):
        notes, finished = [], []
        started.clear(), started_workers.clear()
        with pytest.raises(JudgeError) as raised:
            run_isolated(tasks, slots, cell_timeout=600, on_note=lambda slot, line: notes.append(line),
                         on_result=lambda task, result, *_: finished.append(result))
        message = raised.value.message
        assert message.startswith("the implementation's call ran out of memory (OutOfMemoryError: CUDA out of "
                                  "memory. Tried to allocate 2.00 GiB (a control)"), message
        # on a GPU, what the judge's own process held then (its CUDA memory), before the run's end
        assert ("; the judge process: " in message) == (DEVICE == "cuda") and "); now the " in message, message
        assert message.endswith("nothing is concluded about the implementation"), message
        assert (raised.value.cell_id, raised.value.oracle) == ("decode_small_batch", "parity")
        assert [(result.cell_id, result.status) for result in finished] == \
            ([("empty_batch", "certified")] if again else []), finished
        # beside a running neighbour first a run again beside the others, once it ended (whether empty_batch still
        # ran when the small batch ran out is the workers' timing), then alone
        out = "greedy_argmax/decode_small_batch: out of memory beside other workers; it runs again "
        reruns = [line for line in notes if "out of memory" in line]
        assert reruns in ([out + "alone at the end"], [out + "once the cells it ran beside have ended",
                                                       out + "alone at the end"]) if again else reruns == [], notes
        # no worker is started for a cell that must wait; the alone rerun's worker starts after the others ended
        # on their own
        assert started == ([[], [None], [0, 0]] if again else [[]]), started


_FAULT = "raised AcceleratorError: CUDA error: an illegal memory access was encountered"
_GPU_SLOT = Slot("gpu0.1", {"CUDA_VISIBLE_DEVICES": "0"}, 80 << 30)


@pytest.mark.parametrize("message, slot, shared, caused", [
    (_FAULT, _GPU_SLOT, True, "a GPU fault"),
    (_FAULT, _GPU_SLOT, False, None),                    # alone on its GPU: the kernel's own
    (_FAULT, Slot("cpu1", {}), True, None),              # CPU workers share no device state
    ("output 0: 3 of 8 elements differ", _GPU_SLOT, True, None),   # a wrong answer is no neighbour's
    ("raised OutOfMemoryError: CUDA out of memory.", _GPU_SLOT, True, "out of memory"),
    ("raised OutOfMemoryError: CUDA out of memory.", Slot("cpu1", {}), True, "out of memory"),
    ("raised OutOfMemoryError: CUDA out of memory.", _GPU_SLOT, False, None),
])
def test_what_neighbours_may_have_caused_runs_again(message, slot, shared, caused):
    """A kernel fault beside other workers on one GPU may be a neighbour's (an H100, 2026-12-06g: a kernel spinning
    in one process ended as another met an illegal memory access), as running out of memory may: such a result
    is no claim about its cell, which runs again; the rest stands."""
    assert isolation.neighbours_may_have_caused(message, slot, shared) == caused


def test_the_cells_running_beside_a_gpu_fault_run_again_whatever_their_result(monkeypatch):
    """A GPU fault can end the kernel of another process on that GPU without an error there (an H200, 2026-12-06h:
    the crash-and-hang test's spinning kernel returned as the crash faulted beside it, and parity passed): the
    cell running beside a fault when it is reported is no claim about its kernel either, and runs again, here
    though it passed; the faulting cell runs again once its neighbour ended, then alone, where it stands as the
    implementation's finding. The implementations order themselves (``faulty_kernels``): the fault waits until
    its neighbour is inside its call, which returns only once the judge has noted the fault."""
    barrier = tempfile.mkdtemp(prefix="kparity-barrier-")
    os.chmod(barrier, 0o777)   # the implementations' hosts may run as a uid of their own
    monkeypatch.setenv("FAULT_BARRIER", barrier)
    fault = CellTask(ENTRY.name, "decode_small_batch", DEVICE, f"{FAULTY}:faults_once_its_neighbour_runs",
                     max_examples=0, shrink=False)
    beside = CellTask(ENTRY.name, "decode_mid_batch", DEVICE, f"{FAULTY}:answers_once_its_neighbours_fault_is_seen",
                      max_examples=0, shrink=False)
    slots = gpu_slots(1, 2) if DEVICE == "cuda" else \
        [Slot(f"gpu0.{i}", {"CUDA_VISIBLE_DEVICES": ""}, 80 << 30) for i in (0, 1)]   # a GPU's slots, on the CPU
    notes = []

    def noted(slot, line):
        notes.append(line)
        if "decode_small_batch: a GPU fault" in line:
            pathlib.Path(barrier, "fault_seen").touch()

    try:
        results = run_isolated([fault, beside], slots, cell_timeout=600, on_note=noted)
    finally:
        shutil.rmtree(barrier, ignore_errors=True)
    assert results[fault.key].status == "failed" and results[fault.key].failure.oracle == "parity", results
    assert results[beside.key].status == "certified", results[beside.key]
    reruns = [line for line in notes if "runs again" in line]
    assert reruns == [
        "greedy_argmax/decode_small_batch: a GPU fault beside other workers; it runs again once the cells it ran "
        "beside have ended",
        "greedy_argmax/decode_mid_batch: a neighbour's GPU fault was reported while it ran; it runs again alone at "
        "the end",
        "greedy_argmax/decode_small_batch: a GPU fault beside other workers; it runs again alone at the end"], notes


def test_a_cell_out_of_memory_beside_running_cells_waits_for_them_then_goes_first():
    """The queue of ``run_isolated``: a cell out of memory beside running cells (the paged cells' float64
    truths hold tens of GB for minutes) starts again only once every one of them has ended, before the cells
    not started yet; out of memory a second time, or beside no running cell, it waits for the end, alone."""
    small, mid, large, empty = (CellTask(ENTRY.name, cell, DEVICE, CORRECT) for cell in
                                ("decode_small_batch", "decode_mid_batch", "decode_large_batch", "empty_batch"))
    queue = isolation._CellQueue([small, mid, large, empty])
    assert queue.next(set()) is small and queue.next({small.key}) is mid
    assert queue.defer(small, {mid.key, large.key}) == "once the cells it ran beside have ended"
    assert queue.next({mid.key, large.key}) is large         # small waits: its neighbours still run
    assert queue.next({large.key}) is empty                  # one of them still runs
    assert queue and queue.startable({large.key}) == 0 and queue.next({large.key}) is None   # nothing may start now
    assert queue.startable(set()) == 1 and queue.next(set()) is small and not queue   # both ended: small goes
    assert queue.defer(small, {empty.key}) == "alone at the end"   # out of memory again
    assert queue.defer(mid, set()) == "alone at the end"     # beside no running cell: no neighbour to wait for
    assert queue.alone == [small, mid] and not queue

    queue = isolation._CellQueue([small, mid, empty])        # a waiting cell goes before the cells not started
    queue.next(set()), queue.defer(small, {large.key})
    assert queue.startable({large.key}) == 2 and queue.startable(set()) == 3
    assert [queue.next(set()), queue.next(set()), queue.next(set())] == [small, mid, empty]


def test_the_judges_own_code_slower_than_the_cell_timeout_is_an_internal_error(tmp_path, capsys, monkeypatch):
    """The judge's reference outlasting --cell-timeout (as paged_decode's float64 truth did on an H200): exit 3,
    naming the judge's part that ran, no finding, no report; the kernel's own hang is the test above.  The judge
    runs in this process (the fault is planted in the worker it starts)."""
    report = tmp_path / "report.json"
    _plant_judge_side_faults(monkeypatch, KPARITY_FAULT_SLOW_REFERENCE_S="600")
    status, out, err = certify_cells_here(
        ["--op", "greedy_argmax", "--device", DEVICE, "--isolate", "--impl", CORRECT, "--cell", "decode_small_batch",
         "--max-examples", "0", "--no-shrink", "--cell-timeout", str(HANG_LIMIT_S), "--report", str(report)], capsys)
    assert status == 3, out + err
    assert f"internal error: the judge's own reference did not finish within --cell-timeout {HANG_LIMIT_S}s " \
           f"(after 0 examples; the implementation's calls took " in err, err
    assert "nothing is concluded about the implementation; raise --cell-timeout" in err, err
    reproduce = next(line for line in err.splitlines() if line.strip().startswith("reproduce: "))
    assert "--cell decode_small_batch" in reproduce and "--replay" in reproduce, reproduce
    assert "FAILED" not in out and not report.exists()


def _record(implementation_s: float, ending: type[BaseException] | None = None):
    """A cell's activity record as a worker leaves it: the implementation's calls took ``implementation_s``
    (the last ending by raising ``ending``, or returning), then the judge drew the inputs.  The worker's side
    and the parent's memory."""
    descriptor, record = activity.shared_record()
    doing = activity.Activity(os.dup(descriptor))   # the worker's side of the record (it closes its copy)
    os.close(descriptor)
    doing.cell()
    with contextlib.suppress(Exception), doing.implementation_call(host_failure=HostFault):
        if ending is HostFault:
            raise HostFault("crash", "the implementation's process ended", -11, [])
        if ending is not None:
            raise ending("the implementation's own error")
    doing.implementation_s = implementation_s   # the calls' time so far, as implementation_call adds it up
    doing.judge("drawing of the inputs")
    return doing, record


def _killed_worker(tmp_path, record):
    log = tmp_path / "worker.log"
    log.write_text("")
    return types.SimpleNamespace(activity=record, oracle="determinism", recipe={"R": 17}, log=log,
                                 process=types.SimpleNamespace(returncode=-9),
                                 task=CellTask(ENTRY.name, "decode_mid_batch", DEVICE, backend="triton"))


@pytest.mark.parametrize("implementation_s, judges", [(12.2, False), (3.0, True)])
def test_a_limit_the_implementations_calls_took_whole_is_theirs_though_the_judge_ran_last(tmp_path, implementation_s,
                                                                                        judges):
    """A call that returns past --cell-timeout before the parent looks leaves the judge's code running when the
    worker is killed (an H100 run, 2026-12-06g: the spinning call ended at 12.2 s of a 12 s limit, and the hang
    was named the judge's drawing of the inputs).  Its calls took the whole limit: the implementation's hang;
    the control: with the judge's code holding most of the limit it stays the judge's internal error."""
    worker = _killed_worker(tmp_path, _record(implementation_s)[1])
    if judges:
        with pytest.raises(JudgeError, match="the judge's own drawing of the inputs did not finish") as raised:
            isolation._timed_out(worker, HANG_LIMIT_S, None)
        assert (raised.value.op, raised.value.cell_id, raised.value.backend) == worker.task.key   # its reproduction's
        return
    result = isolation._timed_out(worker, HANG_LIMIT_S, None)
    assert result.status == "failed" and result.annotations["fault"]["kind"] == "hang", result
    assert "the implementation's calls took 12.2s of it, the last returning past the limit (" \
           in result.failure.message, result.failure.message
    assert result.failure.oracle == "determinism" and result.failure.recipe == {"R": 17}


@pytest.mark.parametrize("ending, says", [
    (ValueError, "the last ending past the limit as it raised ValueError ("),
    (HostFault, "the last ending past the limit as its host failed ("),
])
def test_a_hang_says_how_the_last_call_ended_as_the_record_keeps_it(tmp_path, ending, says):
    """The record tells a call that returned from one an exception ended (the implementation's error, its host
    failing); past the limit, the hang says which, and never that a call which raised returned."""
    worker = _killed_worker(tmp_path, _record(12.2, ending)[1])
    result = isolation._timed_out(worker, HANG_LIMIT_S, None)
    assert result.status == "failed" and result.annotations["fault"]["kind"] == "hang", result
    assert f"the implementation's calls took 12.2s of it, {says}" in result.failure.message, result.failure.message
    assert "returning" not in result.failure.message, result.failure.message


def test_the_record_keeps_how_the_last_call_ended():
    """Returned, or ended by an exception (which goes on up, the record written); a new cell forgets it."""
    doing, record = _record(0.0)
    assert (activity.read(record).ended, activity.read(record).last_call_ended()) == (activity.RETURNED,
                                                                                     "it returned")
    with pytest.raises(ValueError, match="refused"), doing.implementation_call(host_failure=HostFault):
        raise ValueError("refused")
    read = activity.read(record)
    assert (read.state, read.ended, read.raised) == (activity.JUDGE, activity.RAISED, "ValueError"), read
    assert read.last_call_ended() == "it raised ValueError"
    with pytest.raises(HostFault), doing.implementation_call(host_failure=HostFault):
        raise HostFault("hang", "no answer within 2s", None, [])
    assert activity.read(record).last_call_ended() == "its host failed"
    with doing.implementation_call(host_failure=HostFault):   # the host answered that the implementation raised
        doing.implementation_raised("KernelRefused")
    assert activity.read(record).last_call_ended() == "it raised KernelRefused"
    long_named = type("E" * 48, (Exception,), {})   # past the record's room: no name, rather than a cut one
    with pytest.raises(long_named), doing.implementation_call():
        raise long_named()
    assert activity.read(record).last_call_ended() == "it raised an exception"
    with doing.implementation_call():
        pass
    assert activity.read(record).ended == activity.RETURNED
    doing.cell()
    assert activity.read(record).ended == activity.NO_CALL


@pytest.mark.parametrize("faults, survives", [
    (("out-of-memory", None), True),              # the run goes on in the other slot
    (("out-of-memory", "out-of-memory"), False),  # no slot can start: an internal error, with the reason
    (("broken", None), False),                    # the control: any other start failure ends the run at once
])
def test_a_worker_that_cannot_start_out_of_memory_gives_up_its_slot(faults, survives, monkeypatch):
    _plant_judge_side_faults(monkeypatch)
    slots = [Slot(f"{DEVICE}{i}", {"KPARITY_FAULT_START": fault} if fault else {}) for i, fault in enumerate(faults)]
    tasks = [CellTask(ENTRY.name, cell, DEVICE, CORRECT, max_examples=0, shrink=False)
             for cell in ("empty_batch", "decode_small_batch")]
    notes = []
    if survives:
        results = run_isolated(tasks, slots, cell_timeout=600, on_note=lambda slot, line: notes.append(line))
        assert [results[task.key].status for task in tasks] == ["certified", "certified"], results
        assert notes.count(f"its worker could not start, out of memory; the run goes on without {DEVICE}0") == 1
        return
    with pytest.raises(WorkerStartError) as raised:
        run_isolated(tasks, slots, cell_timeout=600)
    assert f"a certification worker ({DEVICE}" in raised.value.message and "ended before it was ready (exit " \
        "status 1): " in raised.value.message, raised.value.message
    assert raised.value.message.endswith("CUDA error: out of memory" if faults[0] == "out-of-memory" else
                                         "a broken installation (a control)"), raised.value.message


def test_a_certificate_section_does_not_depend_on_completion_order():
    results = [((ENTRY.name, cell.id), CellResult(ENTRY.name, cell.id, "certified", examples=i))
               for i, cell in enumerate(ENTRY.cells)]
    sections = [certificate_section(ENTRY, dict(order), {"device": "d"}, command="c", max_examples=1, seed=0,
                                    date="2026-01-01")
                for order in (results, results[::-1], results[1:] + results[:1])]
    assert len({json.dumps(section) for section in sections}) == 1
    assert list(sections[0]["cells"]) == [cell.id for cell in ENTRY.cells]


@pytest.mark.parametrize("words, reason", [
    (("--device", "cpu", "--gpus", "2"), "--gpus needs --device cuda"),
    (("--device", "cuda", "--gpus", "two"), "expected 'all' or a positive number"),
    (("--device", "cpu", "--sanitize", "memcheck"), "needs --device cuda"),
    (("--device", "cpu", "--sanitize", "leakcheck"), "invalid choice"),
    (("--device", "cpu", "--no-isolate", "--cell-timeout", "5"), "--no-isolate: --cell-timeout"),
    (("--device", "cpu", "--no-isolate", "--check-quarantine"), "--no-isolate: --check-quarantine"),
    (("--device", "cpu", "--cell-timeout", "0"), "not positive"),
    (("--device", "cpu", "--shard", "0/2"), "1..N"),
    (("--device", "cpu", "--shard", "2"), "expected I/N"),
])
def test_isolation_usage_errors_exit_2_in_one_line(words, reason):
    run = _certify(*words)
    assert run.returncode == 2 and reason in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


# The child's niceness, its new session's (a sleep it leaves to be ended), keep_niceness called or not.
_SESSION_PROBE = """import os, subprocess, sys
from tools.engine.sessions import keep_niceness
os.nice(int(sys.argv[1]))
child = subprocess.Popen(["sleep", "30"], start_new_session=True)
if sys.argv[2] == "keep":
    keep_niceness(child.pid)
print(open(f"/proc/{child.pid}/autogroup").read().split()[-1])
child.kill()
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroup scheduling on this machine")
def test_a_session_the_tools_start_keeps_the_niceness_of_its_starter():
    """Where Linux schedules by autogroup, a new session's group starts at nice 0 whatever its leader's nice
    value, so a worker or host of a job run at nice 19 took the cores at full priority (docs/ci.md,
    2026-12-06d).  Negative control: without ``keep_niceness`` the group of a niced starter's session is at 0."""
    for how, group in (("keep", "7"), ("leave", "0")):
        run = subprocess.run([sys.executable, "-c", _SESSION_PROBE, "7", how], cwd=REPO, capture_output=True, text=True)
        assert run.stdout.split() == [group], (how, run.stdout + run.stderr)
