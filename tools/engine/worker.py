"""One (op, cell) through the battery: in this process, or in a worker process that tools/engine/isolation.py runs.

Either way the implementation under judgement runs in an implementation host (``tools/engine/impl_executor.py``),
one per implementation, reused from cell to cell and replaced after a cell that failed: the battery,
Hypothesis and the verdict stay here, where the implementation cannot reach them.

``execute(task)`` is the whole of running a cell; ``tools/certify-cells`` calls it directly when it
does not isolate, and a worker (``python -m tools.engine.worker --connect SOCKET --device DEVICE``)
calls it for each task its parent sends.  The worker tells its parent which oracle runs on which
recipe before each oracle starts, so that when the process dies (an illegal address, a device
assert, a segfault under the interpreter) or hangs, the parent can still say where.

Messages, worker -> parent: ``("ready",)``, ``("oracle", name, recipe)``, ``("note", text)``,
``("result", record, GPU peak bytes or None)``, ``("internal", facts)`` (the judge's own code failed: the run
ends, exit 3); parent -> worker: ``("cell", task)``, ``("stop",)``.
"""
from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import importlib
import os
import pathlib
import socket
import sys
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from tools.cli import UsageError, end_process
from tools.engine.activity import Activity

if TYPE_CHECKING:
    from tools.engine.impl_executor import ImplementationHost

# ops, oracles and torch are imported in the functions that use them: the runner imports this module (for
# CellTask) before it has parsed its flags, and a worker chooses the Triton interpreter before Triton loads.

NO_ORACLE = "isolation"    # where a cell is before its first oracle begins (loading it, or a crash then)
REPO = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class CellTask:
    """What to run: JSON-able, so that it crosses to a worker as it is."""

    op: str
    cell_id: str
    device: str                        # "cpu" | "cuda" (a worker sees one GPU)
    impl: str | None = None            # MODULE[:ATTR], or None for the catalog kernels
    max_examples: int = 0
    seed: int = 0
    shrink: bool = True
    replay: dict | None = None         # one recipe instead of the cell's corners and draws
    backend: str | None = None         # which of the op's kernels (None: its first, as for an --impl)
    sanitizer: str | None = None       # the compute-sanitizer tool the worker runs under, if any
    call_limit_s: float | None = None  # a call of the implementation with no answer by then is a hang
    oracles: tuple | None = None       # the oracles judged (None: every one)

    @property
    def key(self) -> tuple[str, str, str | None]:
        """The cell of one kernel (an op's kernels share their cells' ids): what a run's results are keyed by."""
        return self.op, self.cell_id, self.backend

    def locate(self, error) -> None:
        """Name this cell as where the judge's ``error`` (a JudgeError) happened: its report's reproduction line."""
        error.op, error.cell_id, error.backend = self.key


def load_implementation(spec: str, entries):
    """``MODULE[:ATTR]`` -> an Implementation for each entry (missing siblings: the reference)."""
    from ops.catalog import op  # here, not at the top: the runner imports this module before torch
    from oracles.battery import Implementation

    module_name, _, attribute = spec.partition(":")
    sys.path[:0] = [p for p in (os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p]
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is a usage error, in one line
        raise UsageError(f"--impl: cannot import {module_name!r}: {type(error).__name__}: {error}") from None
    if attribute and len(entries) != 1:
        raise UsageError("--impl MODULE:ATTR judges one op: name it with one --op")
    implementations = {}
    for entry in entries:
        main = attribute or entry.name
        if not callable(getattr(module, main, None)):
            raise UsageError(f"--impl: {module_name} has no callable {main!r}")
        functions = {entry.name: getattr(module, main)}
        for sibling in entry.siblings:
            functions[sibling] = getattr(module, sibling, None) or op(sibling).reference
        implementations[entry.name] = Implementation(spec, functions)
    return implementations


def _entry(op_name: str, backend: str | None):
    from ops.catalog import kernels

    found = kernels(op_name)
    return found[0] if backend is None else next(entry for entry in found if entry.backend == backend)


_HOSTS: dict = {}   # (implementation, device, sanitized) -> its live ImplementationHost
_SPARE: dict = {}   # device -> a host started ahead, serving nothing yet


def implementation_host(impl: str | None, device: str, call_limit_s: float | None = None,
                        sanitized: bool = False, activity: Activity | None = None) -> "ImplementationHost":
    """The live host of ``impl`` (None: the catalog's kernels) on ``device``, started when there is none.
    Under compute-sanitizer, device tensors cross through host memory (its allocator serves no CUDA IPC).
    Third-party code (``impl``) is judged only by a host that sees the judge's code read-only."""
    from tools.engine.impl_executor import ImplementationHost

    host = _HOSTS.get((impl, device, sanitized))
    if host is None or host.fault is not None:
        retire_host(impl, device, sanitized)
        host = _SPARE.pop(device, None) or ImplementationHost(device)
        if impl is not None and host.fault is None and host.unprotected:
            host.close()
            raise UsageError(f"--impl: refused: nothing here keeps its process from writing the judge's code "
                             f"({host.unprotected}); run as root or where user namespaces are allowed")
        _HOSTS[impl, device, sanitized] = host
    host.call_limit_s, host.via_host_memory = call_limit_s, sanitized
    host.activity = activity or Activity()
    return host


def start_spare_host(device: str) -> None:
    """Start a host before any cell asks for one, and wait until it answers (torch imported there), so
    that a cell's time limit never counts a host's start."""
    from tools.engine.impl_executor import START_LIMIT_S, ImplementationHost

    if device not in _SPARE:
        _SPARE[device] = ImplementationHost(device, START_LIMIT_S)
        _SPARE[device].load([], {})


def retire_host(impl: str | None, device: str, sanitized: bool = False) -> None:
    host = _HOSTS.pop((impl, device, sanitized), None)
    if host is not None:
        host.close()


def impl_paths() -> list[str]:
    """Where an --impl module is looked for: the working directory and PYTHONPATH, as for ``python -m``."""
    return [p for p in (os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p]


def hosted_implementation(impl: str | None, op_name: str, backend: str | None, host: "ImplementationHost"):
    """The Implementation the battery judges: ``impl``'s functions (missing siblings: the reference, run
    here — it is the judge's own code) or the catalog's kernels, each run by ``host``."""
    from ops.catalog import kernels as catalog_kernels
    from ops.catalog import op
    from oracles.battery import Implementation

    entry = _entry(op_name, backend)
    if impl is None:
        kernels = Implementation.of_kernels(entry, catalog_kernels)
        where = {name: (fn.__module__, fn.__qualname__) for name, fn in kernels.functions.items()}
        host.load([str(REPO)], {":".join(at): at for at in where.values()})
        return Implementation(kernels.label, {name: host.function(":".join(at)) for name, at in where.items()})
    module_name, _, attribute = impl.partition(":")
    where = {name: (module_name, name) for name in entry.siblings}
    where[op_name] = (module_name, attribute or op_name)
    missing = host.load(impl_paths(), {":".join(at): at for at in where.values()})
    main = ":".join(where[op_name])
    if main in missing:
        raise LookupError(f"{module_name} has no callable {where[op_name][1]!r}")
    return Implementation(impl, {name: op(name).reference if ":".join(at) in missing else host.function(":".join(at))
                                 for name, at in where.items()})


def execute(task: CellTask, *, progress=None, watch=None, activity: Activity | None = None):
    """Run the battery on ``task``'s cell (or replay its one recipe); returns a ``CellResult``.  ``activity``:
    where a worker keeps what it is doing, for its parent to read when it kills it."""
    import torch

    from oracles.battery import ORACLES, replay, run_cell

    activity = activity or Activity()
    activity.cell()
    entry, strategy = _labelled(_entry(task.op, task.backend), activity)
    host = implementation_host(task.impl, task.device, task.call_limit_s, sanitized=task.sanitizer is not None,
                               activity=activity)
    from oracles.judge_errors import JudgeError

    host.watch(NO_ORACLE, {})
    try:
        impl = hosted_implementation(task.impl, task.op, task.backend, host)
    except JudgeError as error:
        raise internal_error(task, error) from error
    except Exception as error:  # noqa: BLE001 - certify-cells checked the --impl: what fails now is a finding
        return _host_failure(task, host, error)
    cell, device = entry.cell(task.cell_id), torch.device(task.device)

    def watch_both(oracle: str, recipe: dict) -> None:
        host.watch(oracle, recipe)
        activity.judge(f"code of the {oracle} oracle")
        if watch:
            watch(oracle, recipe)

    def example_finished(line: str) -> None:
        activity.example_finished()
        if progress:
            progress(line)

    # Under compute-sanitizer torch allocates stream-ordered (cudaMallocAsync): memory allocated inside a
    # capture does not exist until the graph is instantiated, so Triton's launcher cannot validate its
    # pointers and no capture succeeds.  Sanitized runs write no certificate; the plain run judges graphs.
    skipped = (f"not run under compute-sanitizer --tool {task.sanitizer}: its stream-ordered allocations "
               "cannot be captured" if task.sanitizer else None)
    oracles = task.oracles or ORACLES
    try:
        if task.replay is not None:
            result = replay(entry, impl, cell, device, task.replay, strategy, watch=watch_both,
                            graph_parity_skipped=skipped, oracles=oracles)
        else:
            result = run_cell(entry, impl, cell, device, max_examples=task.max_examples, seed=task.seed,
                              strategy=strategy,
                              shrink=task.shrink, progress=example_finished, note=progress, watch=watch_both,
                              graph_parity_skipped=skipped,
                              oracles=oracles)
    except JudgeError as error:
        raise internal_error(task, error) from error
    return _settled(task, host, result)


def execute_measured(task: CellTask, **kwargs):
    """:func:`execute`, and the cell's peak GPU memory: the most this process's caching allocator reserved
    during the cell plus the most its implementation host's did, as the host says (None on the CPU, or where
    the host's figure is unknown: a host retired after a failed cell, or one that answered garbage).  The
    figure goes to the run's report for later runs to schedule by, never into a verdict."""
    import torch

    # a sanitized run allocates stream-ordered (cudaMallocAsync), not through the caching allocator whose figures
    # these are, and writes no certificate whose report a later run would schedule by
    if task.device != "cuda" or task.sanitizer:
        return execute(task, **kwargs), None
    torch.cuda.reset_peak_memory_stats()
    result = execute(task, **kwargs)
    host = _HOSTS.get((task.impl, task.device, False))
    hosted = host.end_cell() if host is not None else None   # both sides' buffers of the cell let go
    return result, None if hosted is None else torch.cuda.max_memory_reserved() + hosted


class _Strategy:
    """An op's strategy module, its ``build`` recorded as the judge's drawing of the inputs."""

    def __init__(self, module, activity: Activity):
        self._module, self.build = module, activity.labelled("drawing of the inputs", module.build)

    def __getattr__(self, name: str):
        return getattr(self._module, name)


def _labelled(entry, activity: Activity):
    """``entry`` and its strategy, their parts of the judge (the reference, the truth, the legitimate orders,
    the stock op, drawing) recorded in ``activity`` while they run: a cell killed at its time limit in one of
    them is the judge's delay, never the implementation's."""
    from oracles.legitimate_orders import LegitimateOrders

    truth = entry.truth and activity.labelled("float64 truth", entry.truth)
    orders = LegitimateOrders.of(entry.legitimate_orders).relabelled(
        lambda name, order: activity.labelled(f"reference in its {name} order" if name else
                                              "reference in all its orders", order))
    labelled = dataclasses.replace(entry, reference=activity.labelled("reference", entry.reference), truth=truth,
                                   stock=activity.labelled("stock op", entry.stock), legitimate_orders=orders)
    return labelled, _Strategy(entry.strategy_module, activity)


def internal_error(task: CellTask, error: BaseException):
    """``error``, the judge's own, as the JudgeError that ends the run: with the cell it happened on (and,
    from the battery, the oracle and the recipe), so that the run can print how to reproduce it.  Out of
    memory, it says so, with the device's memory as it is now (``oracles/judge_errors.py``)."""
    from oracles.judge_errors import judge_error, out_of_memory

    found = judge_error("the judge", error)
    if getattr(found, "cell_id", None) is None:   # (once: a worker passes on what execute raised)
        task.locate(found)
        if out_of_memory(found.message):
            found.message += (f"; now {memory_state(task.device)}; running out of memory is a fact about the "
                              f"machine (what other processes hold), not about the implementation: nothing is "
                              f"concluded about the implementation")
    return found


def memory_state(device: str) -> str:
    """The device's free and total memory now, and what each process holds of it where torch can tell."""
    import torch

    def gib(size: int) -> str:
        return f"{size / 2**30:.2f} GiB"

    try:
        if device == "cuda":
            free, total = torch.cuda.mem_get_info()
            held = torch.cuda.memory_reserved()
            words = f"the GPU has {gib(free)} free of {gib(total)}, the judge's worker holds {gib(held)}"
            processes = torch.cuda.list_gpu_processes()   # (pynvml's; without it, a line saying so)
            return words + ("; " + "; ".join(processes.splitlines()[1:]) if processes.startswith("GPU:") else "")
        meminfo = dict(line.split(":", 1) for line in pathlib.Path("/proc/meminfo").read_text().splitlines())
        available, total = (int(meminfo[key].split()[0]) * 1024 for key in ("MemAvailable", "MemTotal"))
        return f"the machine has {gib(available)} available of {gib(total)}"
    except Exception as error:  # noqa: BLE001 - the error being reported matters more than these facts
        return f"its free memory could not be read ({type(error).__name__}: {error})"


def internal_facts(error) -> dict:
    """What crosses to the parent of an internal error (``tools/engine/isolation.py`` raises it again, located at
    the worker's cell)."""
    return {"message": error.message, "oracle": error.oracle, "recipe": error.recipe,
            "traceback": getattr(error, "trace", None)}


def _settled(task: CellTask, host: "ImplementationHost", result):
    """The cell's result once its host is accounted for: a host that ended or hung fails the cell whatever
    the oracles made of it (with how it ended and its last lines), and any failure retires the host, so
    that nothing the implementation did there reaches the next cell."""
    from oracles.battery import CERTIFIED, FAILED, PASSED
    from oracles.failures import OracleFailure
    from tools.engine.process_end import exit_in_words

    fault = host.fault
    if fault is not None:
        if result.status in (CERTIFIED, PASSED):
            failure = OracleFailure(host.oracle, str(fault))
            failure.recipe = host.recipe
            result.status, result.failure = FAILED, failure
        result.annotations["fault"] = {"kind": fault.kind, "worker": exit_in_words(fault.exit_status),
                                       "stderr_tail": fault.log_tail}
    if result.status not in (CERTIFIED, PASSED):
        retire_host(task.impl, task.device, sanitized=task.sanitizer is not None)
    return result


def _host_failure(task: CellTask, host: "ImplementationHost", error: Exception):
    from oracles.battery import CellResult
    from oracles.failures import OracleFailure

    failure = error if isinstance(error, OracleFailure) else \
        OracleFailure(host.oracle, f"loading the implementation raised {type(error).__name__}: {error}")
    result = CellResult(task.op, task.cell_id, "failed")
    result.failure = failure
    return _settled(task, host, result)


def _surface_device_errors(result, device: str, last_oracle: str, last_recipe: dict) -> None:
    """An asynchronous CUDA error of this cell surfaces here, not in the next cell: it fails this one."""
    import torch

    from oracles.failures import OracleFailure

    if device != "cuda":
        return
    try:
        torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - whatever the device raises, it belongs to this cell
        if result.failure is None:
            result.status = "failed"
            result.failure = OracleFailure(last_oracle, f"a CUDA error surfaced after the cell: {error}")
            result.failure.recipe = last_recipe


def serve(connection: Connection, device: str, activity: Activity | None = None) -> None:
    import ops  # noqa: F401 - chooses the Triton interpreter on a machine without CUDA, before Triton loads
    import torch

    where = {}

    def watch(oracle: str, recipe: dict) -> None:
        where.update(oracle=oracle, recipe=recipe)
        connection.send(("oracle", oracle, recipe))

    start_spare_host(device)
    connection.send(("ready",))
    while True:
        message = connection.recv()
        if message[0] == "stop":
            return
        task = CellTask(**message[1])
        where.update(oracle=NO_ORACLE, recipe={})
        try:
            result, gpu_peak_bytes = execute_measured(task, progress=lambda line: connection.send(("note", line)),
                                                      watch=watch, activity=activity)
        except Exception as error:  # noqa: BLE001 - the battery contains the implementation's: this is ours
            found = internal_error(task, error)
            found.trace = "".join(traceback.format_exception(error))
            connection.send(("internal", internal_facts(found)))
            return
        _surface_device_errors(result, device, where["oracle"], where["recipe"])
        connection.send(("result", result.record(), gpu_peak_bytes))
        if device == "cuda":
            # what the cell kept cached (its staging buffers' pool among it, let go by end_cell), given back to
            # the workers sharing the GPU
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.engine.worker",
                                     description="A certification worker; tools/certify-cells starts it.")
    parser.add_argument("--connect", required=True, metavar="SOCKET", help="the parent's unix socket")
    parser.add_argument("--device", required=True, choices=("cpu", "cuda"))
    parser.add_argument("--activity-fd", type=int, metavar="FD",
                        help="the memory where it keeps what it is doing (tools/engine/activity.py)")
    args = parser.parse_args(argv)
    if sys.pycache_prefix:   # the tools' own bytecode cache, written as tools/certify-cells writes it
        sys.dont_write_bytecode = False
    faulthandler.enable()  # a segfault prints the Python stack to stderr, which the parent quotes
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(args.connect)
    serve(Connection(client.detach()), args.device, Activity(args.activity_fd))
    return 0


if __name__ == "__main__":
    end_process(main())
