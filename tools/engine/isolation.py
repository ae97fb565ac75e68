"""Run certification tasks in worker processes: a crash or a hang fails its cell, not the run.

Each *slot* (one GPU, or the CPU) holds one worker at a time: a fresh interpreter started with
``subprocess`` (spawn semantics: nothing of this process, CUDA state least of all, is inherited),
``python -m tools.engine.worker``, talking back over a unix socket.  Spawn, not ``multiprocessing``'s
own launcher, because ``--sanitize`` must put ``compute-sanitizer`` in front of the interpreter.

- A worker tells which oracle runs on which recipe before each one starts; when it dies (an illegal
  address, a device assert, a segfault) the running cell fails with that oracle, that recipe, how the
  process ended and the last lines it wrote.
- A cell with no result within ``cell_timeout`` seconds has its worker's process group killed.  What
  the worker was doing then (``tools/engine/activity.py``) says whose delay it was: in the implementation's
  call, a hang that fails the cell the same way; in the judge's own code (its float64 truth, say), the
  judge's internal error, which ends the run and concludes nothing about the implementation.
- A worker whose cell failed for any reason is retired, so that no sticky CUDA error (an illegal
  address poisons its context for good) reaches a later cell; the slot gets a fresh worker.
- A worker that cannot start because memory ran out (its CUDA context, beside other processes) gives up
  its slot; the run goes on in the others, and ends (an internal error) only when no slot is left.
- Under ``sanitize``, every cell gets its own worker under ``compute-sanitizer --tool TOOL
  --error-exitcode 99``, with PyTorch allocating through ``cudaMallocAsync`` (so that every tensor is
  an allocation the sanitizer can bound); exit 99 or a report fails the cell, quoting the report.
Results come back keyed by task, so their order never depends on which worker finished first.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from oracles.judge_errors import JudgeError, gpu_fault, out_of_memory, out_of_memory_line
from tools.engine import activity
from tools.engine.worker import NO_ORACLE, CellTask
from tools.engine.process_end import exit_in_words, last_words
from tools.engine.sessions import keep_niceness

if TYPE_CHECKING:  # the battery (torch, Hypothesis) loads with the first result, not with --help
    from oracles.battery import CellResult

REPO = pathlib.Path(__file__).resolve().parents[2]
STARTUP_LIMIT_S = 300      # importing torch and Triton, and a CUDA context; far beyond what it takes
EXIT_LIMIT_S = 120         # a retired worker's exit (a sanitizer writes its report then)
SANITIZER_EXIT = 99
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck")
# What a slot holds of its GPU that no caching allocator counts (a cell's recorded peak is its worker's and its
# host's ``max_memory_reserved``): two CUDA contexts, the worker's and its host's, each with the kernels it
# loaded, held whether or not the slot runs a cell.
CONTEXT_BYTES_A_SLOT = 1 << 30


class WorkerStartError(JudgeError):
    """A worker did not start: the judge's (or its machine's) failure, never a finding about any cell."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one worker runs: ``label`` for progress lines, ``env`` added to its environment, ``memory_bytes``
    its GPU's total memory (None on the CPU)."""

    label: str
    env: dict
    memory_bytes: int | None = None


def thread_share(workers: int) -> dict:
    """The environment that gives each of ``workers`` processes sharing this machine's cores its share of
    them (``OMP_NUM_THREADS``: torch's CPU threads, and OpenBLAS's under numpy): each process otherwise starts
    a thread per core, and OpenMP's threads spin while they wait for one another, so two workers (and their
    hosts) on two cores took 3 to 5 times as long per cell as one (measured: docs/ci.md).  Empty where the
    caller set the variable itself, or where one worker has every core."""
    if "OMP_NUM_THREADS" in os.environ or workers <= 1:
        return {}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {"OMP_NUM_THREADS": str(max(1, cores // workers))}


def cpu_slots(count: int) -> list[Slot]:
    """``count`` workers on the CPU, each taking the next cell when it is done with one, each with its share
    of the cores."""
    return [Slot("cpu" if count == 1 else f"cpu{i}", thread_share(count)) for i in range(count)]


def gpu_slots(count: int | None, per_gpu: int = 1) -> list[Slot]:
    """``per_gpu`` slots per visible GPU (the first ``count``, or all), each worker seeing only its own GPU.
    Several on one GPU overlap what a cell spends off it (drawing, references, float64 truth, Triton's
    compiles, the host's round trips), which is most of a cell's time."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [i.strip() for i in visible.split(",") if i.strip()] if visible else \
        [str(i) for i in range(torch.cuda.device_count())]
    ids = ids[:torch.cuda.device_count()]
    chosen = ids[:count] if count else ids
    share = thread_share(len(chosen) * per_gpu)
    return [Slot(f"gpu{i}" if per_gpu == 1 else f"gpu{i}.{j}", {"CUDA_VISIBLE_DEVICES": gpu, **share},
                 torch.cuda.get_device_properties(i).total_memory)
            for i, gpu in enumerate(chosen) for j in range(per_gpu)]


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin."""
    found = shutil.which("compute-sanitizer")
    for folder in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if not found and folder and os.access(os.path.join(folder, "bin", "compute-sanitizer"), os.X_OK):
            found = os.path.join(folder, "bin", "compute-sanitizer")
    return found


def sanitizer_report(path: pathlib.Path) -> list[str]:
    """The report lines of a compute-sanitizer log (its banner left out)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    report = [line.removeprefix("=========").strip() for line in lines if line.startswith("=========")]
    return [line for line in report if line and not line.startswith("COMPUTE-SANITIZER")]


class _Worker:
    """One worker process and what the parent knows of it."""

    def __init__(self, slot: Slot, device: str, folder: pathlib.Path, number: int, sanitize: tuple | None):
        self.slot, self.device = slot, device
        self.address = folder / f"worker{number}.sock"
        self.log = folder / f"worker{number}.log"
        self.sanitizer_log = folder / f"worker{number}.sanitizer.log"
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(self.address))
        self.server.listen(1)
        descriptor, self.activity = activity.shared_record()
        command = [sys.executable, "-m", "tools.engine.worker", "--connect", str(self.address), "--device", device,
                   "--activity-fd", str(descriptor)]
        env = {**os.environ, **slot.env,
               "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        if sanitize:
            tool, executable = sanitize
            command = [executable, "--tool", tool, "--error-exitcode", str(SANITIZER_EXIT),
                       "--log-file", str(self.sanitizer_log), *command]
            # stream-ordered allocations, which the sanitizer bounds one by one, where the caching allocator's
            # segments would hide an overrun inside them; PYTORCH_NO_CUDA_MEMORY_CACHING would too, but it
            # breaks CUDA graph capture (the graph parity oracle)
            env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True,  # its own group: a kill takes its children
                                            pass_fds=(descriptor,))
        keep_niceness(self.process.pid)
        os.close(descriptor)
        self.connection: Connection | None = None
        self.ready = False
        self.task: CellTask | None = None
        self.deadline = time.monotonic() + STARTUP_LIMIT_S
        self.oracle, self.recipe = NO_ORACLE, {}

    def waitable(self):
        return self.connection if self.connection is not None else self.server

    def accept(self) -> None:
        client, _ = self.server.accept()
        self.connection = Connection(client.detach())
        self.server.close()

    def start(self, task: CellTask, cell_timeout: float) -> None:
        self.task, self.oracle, self.recipe = task, NO_ORACLE, {}
        self.started = time.monotonic()
        self.deadline = self.started + cell_timeout
        # the cell's limit is this process's alone: a worker's own call limit (certify-cells gives each task
        # --cell-timeout) starts after the cell's setup, and this process looks about once a second; where it
        # looked later than the setup took, the worker killed its host, judged the next oracle on a fresh draw
        # and was killed there: a hang reported as a returned call on another oracle's example
        self.connection.send(("cell", dataclasses.asdict(dataclasses.replace(task, call_limit_s=None))))

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        self._close()

    def stop(self) -> int:
        """Ask the worker to end, and wait for its exit status (killing it if it will not end)."""
        return self.wait_stopped(self.ask_to_stop())

    def ask_to_stop(self) -> bool:
        """Send the worker its stop; whether it went (a worker not connected yet, or gone, cannot take it)."""
        if self.connection is None:
            return False
        try:
            self.connection.send(("stop",))
        except OSError:
            return False
        return True

    def wait_stopped(self, asked: bool) -> int:
        """The exit status of a worker ``asked`` to end, waited for; one not asked, or still running after
        ``EXIT_LIMIT_S``, is killed."""
        if asked:
            try:
                self.process.wait(timeout=EXIT_LIMIT_S)
            except subprocess.TimeoutExpired:
                pass
        self.kill()   # (an ended worker is only waited for, and its ends closed)
        return self.process.returncode

    def _close(self) -> None:
        for end in (self.connection, self.server):
            if end is not None:
                end.close()


def _fault(worker: _Worker, kind: str, message: str, sanitizer: tuple | None) -> CellResult:
    from oracles.battery import CellResult
    from oracles.failures import OracleFailure

    failure = OracleFailure(worker.oracle, message)
    failure.recipe = worker.recipe or None
    result = CellResult(worker.task.op, worker.task.cell_id, "failed")
    result.failure = failure
    # nothing here names the slot: a record must not depend on which GPU happened to run the cell
    result.annotations["fault"] = {"kind": kind, "worker": exit_in_words(worker.process.returncode),
                                   "stderr_tail": last_words(worker.log)}
    return _sanitized(result, worker, sanitizer, worker.process.returncode) if sanitizer else result


def _sanitized(result: CellResult, worker: _Worker, sanitizer: tuple, exit_code: int | None) -> CellResult:
    """Fail ``result`` when the sanitizer reported anything (exit 99, or report lines), quoting the report."""
    from oracles.failures import OracleFailure

    tool = sanitizer[0]
    report = sanitizer_report(worker.sanitizer_log)
    findings = [line for line in report if not line.startswith("ERROR SUMMARY")]
    if exit_code != SANITIZER_EXIT and not findings:
        return result
    first = findings[0] if findings else f"(no report lines, but exit status {SANITIZER_EXIT})"
    result.annotations["sanitizer"] = {"tool": tool, "worker": exit_in_words(exit_code), "report": report[:40]}
    if result.failure is None:
        result.status = "failed"
        result.failure = OracleFailure(tool, f"compute-sanitizer --tool {tool} reported: {first}")
    else:
        result.failure.message += f" | compute-sanitizer --tool {tool}: {first}"
    return result


def first_that_fits(waiting: Sequence[tuple], running: Iterable[tuple], peaks: dict[tuple, int],
                    gpu_bytes: int | None, slots: int) -> int | None:
    """Which of ``waiting`` (cells' keys, in the order they are to start) may start on a GPU of ``gpu_bytes``
    shared by ``slots`` workers while the cells ``running`` run there: the index of the first whose known peak
    (``peaks``: bytes, from an earlier run's report) fits into the GPU less every slot's contexts and the known
    peaks of the running cells, or None (none fits: wait for a running cell to end).  A cell of unknown peak
    may always start, as before any figure was known; so may the first when nothing runs there (a cell larger
    than the GPU runs alone: never a deadlock), and on the CPU (``gpu_bytes`` None)."""
    if not waiting:
        return None
    running = list(running)
    if gpu_bytes is None or not running:
        return 0
    room = gpu_bytes - slots * CONTEXT_BYTES_A_SLOT - sum(peaks.get(key, 0) for key in running)
    return next((index for index, key in enumerate(waiting) if peaks.get(key) is None or peaks[key] <= room), None)


def neighbours_may_have_caused(message: str, slot: Slot, shared: bool) -> str | None:
    """What, in a cell's failure or internal error ``message`` on ``slot`` (``shared`` with other workers' slots:
    one GPU, or the CPU), the cell's neighbours may have caused, in words, or None (the result stands): running
    out of memory, on any shared device; a kernel's fault, on a shared GPU (the CPU's processes share no device
    state)."""
    if not shared:
        return None
    if out_of_memory(message):
        return "out of memory"
    if slot.memory_bytes is not None and gpu_fault(message):
        return "a GPU fault"
    return None


def run_isolated(tasks: list[CellTask], slots: list[Slot], *, cell_timeout: float, sanitize: str | None = None,
                 on_note: Callable[[Slot, str], None] | None = None,
                 on_result: Callable[[CellTask, CellResult, float, int | None], None] | None = None,
                 gpu_peaks: dict[tuple, int] | None = None) -> dict[tuple, CellResult]:
    """Run every task in worker processes (one per slot at a time); results keyed by ``task.key``.
    ``on_result(task, result, seconds, GPU peak bytes or None)`` as each cell ends.

    Where slots share a GPU, a cell starts only when its peak in an earlier run (``gpu_peaks``, bytes) fits
    beside the known peaks of the cells running there (:func:`first_that_fits`); until it does, the later cells
    that fit start in its place.  A cell that ran out of memory all the same (a peak unknown, or larger this
    time; the judge's side, the host's or the implementation's), on a shared GPU or the CPU's memory, says
    nothing of itself but of its neighbours (its draws follow from its seed: a run again gives the result an
    unshared device gives): it runs again beside other workers once the cells it ran beside have ended, and,
    out of memory again, at the end alone on the first slot.  Out of memory alone too, it ends the run as the
    judge's internal error.  A cell whose kernel faulted (a CUDA error that loses the context: ``gpu_fault``) on a
    GPU other workers share runs again the same way, since a neighbour's fault can end another process's kernel;
    a fault alone is the implementation's finding.  And since that ending can be silent (an H200, 2026-12-06h: a
    spinning kernel returned as its neighbour faulted, and parity saw the right answer), every cell running on
    that GPU when the fault was reported runs again too, whatever its result (a cell that ended before the
    report came stands)."""
    sanitizer = (sanitize, find_sanitizer()) if sanitize else None
    queue = _CellQueue(tasks)
    results: dict[tuple, CellResult] = {}
    faulted_beside: set[tuple] = set()   # cells running on a GPU when another worker's fault there was reported
    workers: dict[str, _Worker | None] = {slot.label: None for slot in slots}
    starting = list(slots)   # the slots left: one whose worker could not start for memory is given up
    spawned = 0

    def running(but: _Worker | None = None, on: dict | None = None) -> set:
        """The cells the workers run (all but ``but``'s; only on the slots of environment ``on``, one GPU, if given)."""
        return {w.task.key for w in workers.values() if w is not None and w is not but and w.task is not None
                and (on is None or w.slot.env == on)}

    def again(worker: _Worker, why: str) -> None:
        """The worker's cell back in the queue (its worker is free): it runs again, noted with ``why``; whatever a
        neighbour's fault did to this run goes with it."""
        faulted_beside.discard(worker.task.key)
        when = queue.defer(worker.task, running(but=worker))
        if on_note:
            on_note(worker.slot, f"{worker.task.op}/{worker.task.cell_id}: {why}; it runs again {when}")
        worker.task = None

    def defer(worker: _Worker, message: str) -> bool:
        shared = sum(slot.env == worker.slot.env for slot in starting) > 1   # the same GPU, or the CPU
        what = neighbours_may_have_caused(message, worker.slot, shared)
        if what is None:
            return False
        if what == "a GPU fault":   # it may have ended the kernels running beside it, without an error there
            faulted_beside.update(running(but=worker, on=worker.slot.env))
        again(worker, f"{what} beside other workers")
        return True

    def finish(worker: _Worker, result: CellResult, gpu_peak_bytes: int | None = None) -> None:
        if worker.task.key in faulted_beside:
            again(worker, "a neighbour's GPU fault was reported while it ran")
            return
        task, worker.task = worker.task, None
        results[task.key] = result
        if on_result:
            on_result(task, result, time.monotonic() - worker.started, gpu_peak_bytes)

    def fitting(slot: Slot) -> Callable[[list[tuple]], int | None]:
        """Which of the cells free to start may start on ``slot``'s GPU now (``first_that_fits``)."""
        there = [w.task.key for w in workers.values()
                 if w is not None and w.task is not None and w.slot.env == slot.env]
        sharing = sum(other.env == slot.env for other in starting)
        return lambda keys: first_that_fits(keys, there, gpu_peaks or {}, slot.memory_bytes, sharing)

    def retire(worker: _Worker) -> None:
        workers[worker.slot.label] = None

    with tempfile.TemporaryDirectory(prefix="kparity-workers-") as folder, _terminate_raises():
        try:
            while queue or running():
                for slot in starting:
                    idle = sum(w is not None and w.task is None for w in workers.values())   # or starting
                    if workers[slot.label] is None and queue.startable(running()) > idle:
                        spawned += 1
                        workers[slot.label] = _Worker(slot, tasks[0].device, pathlib.Path(folder), spawned, sanitizer)
                    worker = workers[slot.label]
                    if worker is not None and worker.ready and worker.task is None:
                        task = queue.next(running(), fitting(slot))
                        if task is not None:
                            worker.start(task, cell_timeout)
                live = [w for w in workers.values() if w is not None]
                readable = wait([w.waitable() for w in live], timeout=1.0)
                for worker in live:
                    try:
                        if worker.connection is None and worker.server in readable:
                            worker.accept()
                        elif worker.connection is not None and worker.connection in readable:
                            _drain(worker, finish, retire, on_note, sanitizer, defer)
                        if workers[worker.slot.label] is worker:
                            _check_alive(worker, finish, retire, sanitizer, cell_timeout)
                    except WorkerStartError as error:
                        if not (out_of_memory(error.message) and len(starting) > 1):
                            raise
                        starting.remove(worker.slot)   # (its worker is retired and killed already)
                        del workers[worker.slot.label]
                        if on_note:
                            on_note(worker.slot, f"its worker could not start, out of memory; the run goes on "
                                                 f"without {worker.slot.label}")
            if queue.alone:
                _end_workers([worker for worker in workers.values() if worker is not None])
                workers = dict.fromkeys(workers)
        finally:
            for worker in workers.values():
                if worker is not None:
                    worker.kill()
    if queue.alone:
        results.update(run_isolated(queue.alone, slots[:1], cell_timeout=cell_timeout, sanitize=sanitize,
                                    on_note=on_note, on_result=on_result))
    return results


class _CellQueue:
    """The cells still to start, in order; a cell that ran out of memory beside running cells waits until
    those have ended (the paged cells' float64 truths hold tens of GB of a GPU for minutes: a cell started
    beside them again would meet the same neighbours), then goes before the rest; one out of memory a
    second time, or beside no running cell, waits in ``alone`` for the end of the run."""

    def __init__(self, tasks: list[CellTask]):
        self.pending = collections.deque(tasks)
        self.waiting: list[tuple[CellTask, frozenset]] = []   # (cell, the cells it waits for)
        self.deferred: set[tuple] = set()
        self.alone: list[CellTask] = []

    def __bool__(self) -> bool:
        return bool(self.pending or self.waiting)

    def startable(self, running: set) -> int:
        """How many cells may start while ``running`` (cells' keys) run: workers are started only for them."""
        return len(self.pending) + sum(not beside & running for _, beside in self.waiting)

    def next(self, running: set, fitting: Callable[[list[tuple]], int | None] = lambda keys: 0) -> CellTask | None:
        """The next cell to start while ``running`` run, or None for now: of the cells free to start (those
        waiting whose neighbours have ended, then the rest in order), the one ``fitting`` picks by its index
        among their keys (:func:`first_that_fits`; the first where nothing is known of memory)."""
        ready = [task for task, beside in self.waiting if not beside & running] + list(self.pending)
        index = fitting([task.key for task in ready]) if ready else None
        if index is None:
            return None
        task = ready[index]
        if any(waiting is task for waiting, _ in self.waiting):
            self.waiting = [(waiting, beside) for waiting, beside in self.waiting if waiting is not task]
        else:
            self.pending.remove(task)
        return task

    def defer(self, task: CellTask, beside: set) -> str:
        """Put back ``task``, out of memory while ``beside`` ran; when it runs again, in words."""
        if beside and task.key not in self.deferred:
            self.deferred.add(task.key)
            self.waiting.append((task, frozenset(beside)))
            return "once the cells it ran beside have ended"
        self.alone.append(task)
        return "alone at the end"


def _end_workers(workers: list[_Worker]) -> None:
    """Workers whose GPU memory a cell run again alone must not meet: each asked to end at once, then waited
    for (killed where it will not end).  A worker that ends on its own ends its implementation hosts first
    (their process groups, waited for), and the memory they held on the GPU with them; a worker killed instead
    leaves its hosts to their guardians, which end them a moment later, maybe while that cell starts."""
    asked = [(worker, worker.ask_to_stop()) for worker in workers]
    for worker, sent in asked:
        worker.wait_stopped(sent)


@contextlib.contextmanager
def _terminate_raises():
    """SIGTERM ends this process as an exception does (exit 128 + 15), so that the ``finally`` that kills the
    workers' process groups runs: a worker runs in a session of its own, and would outlive its judge.
    SIGINT's KeyboardInterrupt is installed again for the same reason, so that whatever a native library
    loaded since start-up put in its place at the C level (which Python's own table would not show) cannot
    keep a SIGINT from ending the run; an ignore inherited from the shell (a background job's) is kept."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminated)
    interrupt = signal.getsignal(signal.SIGINT)
    if interrupt is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if interrupt is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler if interrupt is None else interrupt)


def _drain(worker: _Worker, finish, retire, on_note, sanitizer, defer=lambda worker, message: False) -> None:
    """Read what the worker sent; a closed connection is a dead worker.  ``defer(worker, message)``: whether
    a cell that ended with ``message`` (an internal error, a failure) is to run again instead (its worker
    then retires)."""
    while worker.connection.poll():
        try:
            message = worker.connection.recv()
        except (EOFError, OSError):
            _dead(worker, finish, retire, sanitizer)
            return
        kind = message[0]
        if kind == "ready":
            worker.ready = True
        elif kind == "oracle":
            worker.oracle, worker.recipe = message[1], message[2]
        elif kind == "note" and on_note:
            on_note(worker.slot, message[1])
        elif kind == "internal":  # the judge's own code failed in the worker: the run ends (exit 3)
            from oracles.judge_errors import JudgeError

            facts = message[1]
            if defer(worker, facts["message"]):
                retire(worker)
                _end_workers([worker])   # it ends after an internal error anyway: its hosts first
                return
            error = JudgeError(facts["message"], facts["oracle"], facts["recipe"])
            worker.task.locate(error)
            error.trace = facts["traceback"]
            raise error
        elif kind == "result":
            from oracles.battery import CellResult

            result, gpu_peak_bytes = CellResult.from_record(worker.task.op, worker.task.cell_id, message[1]), message[2]
            if result.status not in ("certified", "passed") and defer(worker, " ".join(
                    failure.message for failure in result.failures.values())):
                worker.stop()
                retire(worker)
                return
            if result.status not in ("certified", "passed") or sanitizer:
                exit_code = worker.stop()
                retire(worker)
                if sanitizer:
                    result = _sanitized(result, worker, sanitizer, exit_code)
            finish(worker, result, gpu_peak_bytes)
            return


def _where(worker: _Worker) -> str:
    return f"the {worker.oracle} oracle" if worker.oracle != NO_ORACLE else "the cell's setup"


def _dead(worker: _Worker, finish, retire, sanitizer) -> None:
    try:
        worker.process.wait(timeout=10)  # the connection closes as the process ends: let it finish ending
    except subprocess.TimeoutExpired:
        pass
    retire(worker)
    worker.kill()
    if worker.task is None and worker.ready:
        return  # died idle: nothing was lost, and the slot gets a fresh worker if cells remain
    if worker.task is None:
        raise WorkerStartError(f"a certification worker ({worker.slot.label}) ended before it was ready "
                               f"({exit_in_words(worker.process.returncode)}): {_why_not_started(worker)}")
    finish(worker, _fault(worker, "crash", f"the worker process died ({exit_in_words(worker.process.returncode)}) "
                                           f"while {_where(worker)} ran; later cells run in a fresh worker", sanitizer))


def _check_alive(worker: _Worker, finish, retire, sanitizer, cell_timeout: float) -> None:
    """A worker that has not started in time, died before connecting, or holds a cell past its limit."""
    if worker.connection is None and worker.process.poll() is not None:
        _dead(worker, finish, retire, sanitizer)
    elif (worker.task is not None or not worker.ready) and time.monotonic() > worker.deadline:
        retire(worker)
        worker.kill()
        if worker.task is None:
            raise WorkerStartError(f"a certification worker ({worker.slot.label}) did not start within "
                                   f"{STARTUP_LIMIT_S}s: {_why_not_started(worker)}")
        finish(worker, _timed_out(worker, cell_timeout, sanitizer))


def _why_not_started(worker: _Worker) -> str:
    """The line of a worker's last ones that says why it did not start: the one saying memory ran out (a
    CUDA error's last line is advice about device-side assertions), else its last."""
    lines = last_words(worker.log) or ["no output"]
    return out_of_memory_line(lines) or lines[-1]


def _timed_out(worker: _Worker, cell_timeout: float, sanitizer: tuple | None) -> CellResult:
    """The cell of a worker killed at ``--cell-timeout``: a hang, when the implementation's call was running,
    or when its calls alone took the whole limit (the last one ending past it, before this process looked, as
    the record says it ended: returned, raised, or its host failed); the judge's internal error (raised),
    when the judge's own code was and had its share of the limit."""
    doing = activity.read(worker.activity)
    if doing.state == activity.JUDGE and doing.implementation_s >= cell_timeout:
        last = "the last returning past the limit" if doing.ended == activity.RETURNED else \
            f"the last ending past the limit as {doing.last_call_ended()}"
        return _fault(worker, "hang", f"no result within --cell-timeout {cell_timeout:g}s: the implementation's "
                                      f"calls took {doing.implementation_s:.1f}s of it, {last} (a kernel slower "
                                      f"than the limit; the worker was killed as the judge's {doing.what} ran "
                                      f"next)", sanitizer)
    if doing.state == activity.JUDGE:
        error = JudgeError(f"the judge's own {doing.what} did not finish within --cell-timeout {cell_timeout:g}s "
                           f"(after {doing.examples} examples; the implementation's calls took "
                           f"{doing.implementation_s:.1f}s of the cell); nothing is concluded about the "
                           f"implementation; raise --cell-timeout",
                           worker.oracle if worker.oracle != NO_ORACLE else None, worker.recipe or None)
        worker.task.locate(error)
        lines = last_words(worker.log)
        error.trace = "the worker's last lines:" + ("\n" + "\n".join(lines) if lines else " none")
        raise error
    call = f", in the implementation's call (running for {doing.for_s():.0f}s)" \
        if doing.state == activity.IMPLEMENTATION else ""
    return _fault(worker, "hang", f"no result within --cell-timeout {cell_timeout:g}s: the worker was killed while "
                                  f"{_where(worker)} ran{call} (a kernel that never ends, or a call slower than "
                                  f"the limit)", sanitizer)
