"""The runtime canary: certified dispatch re-checks a sampled fraction of the calls it routes to a kernel,
in the serving process itself, against the op's reference (bitwise ops) or its band around the float64
truth and the stock op (band ops) — ``oracles.parity.check_parity``, the parity oracle of certification.
A judge can be recognised (its process, its command line, its shared-memory inputs, its few hundred
calls); a real call cannot be told apart from a checked one, so a kernel right only when judged is caught
where it misbehaves.

``KPARITY_CANARY`` sets the fraction: ``1/1000`` (the default), ``0`` (off), or per op before a default,
``greedy_argmax=1/10,1/1000``.  Each routed call is sampled from ``os.urandom``'s bits (read 4 KiB at a
time): not every Nth call, nor a seeded generator.  (A kernel in the serving process could read those bits,
or patch this module, as it could anything of its process: the canary catches a kernel that behaves only
when it recognises a judge, whose calls look like any other; not one written against the canary itself.)

``KPARITY_CANARY_BUDGET`` bounds what the checks may cost: a fraction of the wall time since the canary
first sampled a call (default ``1/200``; ``1`` for no bound), shared equally by the ops sampled so far, each
op's share spent by the time its checks took (the worker's, its side stream synchronised: device work
included), and at most one check of an op at a time: the H200 admitted a burst of queued checks before
the first one's time was known.  A sampled call of an op past its share, or with a check of its own still
running, is not checked (counted ``skipped: over budget``), so
an op whose check costs a hundred of its calls (paged decode's float64 truth and fp32 stock op) is checked
less often than its rate says, and the others keep theirs.  An op's first sampled call is always checked.
The H200 measured +17.8% of a decode step at 1/1000 without the bound (docs/results/2026-12-02b/); with it,
at 1/1000, the canary's own time in the serving thread is 0.31% of a 193-call decode step and its checks are
held to the budget's 0.5% once each op's first check is paid: at most 0.81% (docs/results/2026-12-03/
canary_cost_h200_parts.log; the step times' own noise, +-4%, hides either figure).

What a sampled call costs, and where:

- before the kernel, the inputs are cloned (strides, offsets and padding kept): the pre-call state an
  in-place kernel would otherwise destroy; after it, its outputs and in-place arguments are cloned (the
  caller may overwrite them at once).  On CUDA these are stream-ordered device copies, queued, not waited on.
- CPU: the check runs right after the call, in the calling thread (there is no device to overlap with).
- CUDA: an event is recorded after the copies and the check goes to a worker thread, which runs the
  reference and the comparison on a side stream of its own after that event, so the serving stream is
  never synchronised by the canary; at most :data:`MAX_PENDING` checks wait (more are counted as skipped,
  never queued without bound).  The worker's Python work still shares the GIL with the serving thread, and
  its kernels the device: the budget bounds both; ``docs/lab/canary_cost.py`` measures what is left.

A mismatch is counted (:data:`COUNTS`), recorded (:data:`MISMATCHES`), logged on the ``kparity.canary``
logger with the op, kernel, cell, shapes and a reproduction — the inputs saved with ``torch.save`` under
``KPARITY_CANARY_DIR`` (default: the temporary folder's ``kparity-canary``) and the command
``python -m ops.canary FILE`` that re-runs the kernel and the check on them.  Under
``KPARITY_REQUIRE_CERTIFIED=1`` a mismatch raises :class:`CanaryMismatch`: from the call itself on the CPU,
from the next routed call (or :func:`drain`) on CUDA.
"""
from __future__ import annotations

import collections
import dataclasses
import fractions
import functools
import importlib
import logging
import os
import pathlib
import queue
import struct
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

import torch

from oracles.failures import OracleFailure
from oracles.parity import check_parity
from oracles.determinism import run_on_copy
from oracles.tensors import as_outputs, clone_inputs

CANARY_ENV = "KPARITY_CANARY"
REQUIRE_CERTIFIED_ENV = "KPARITY_REQUIRE_CERTIFIED"  # the catalog's too: fallbacks and mismatches alike
CANARY_DIR_ENV = "KPARITY_CANARY_DIR"
BUDGET_ENV = "KPARITY_CANARY_BUDGET"
DEFAULT_RATE = "1/1000"
DEFAULT_BUDGET = "1/200"
MAX_PENDING = 4  # deferred checks waiting on CUDA: each holds clones of one call's tensors

LOG = logging.getLogger("kparity.canary")
COUNTS: collections.Counter = collections.Counter()
"""(op name, ``checked`` | ``mismatch`` | ``skipped: checks pending`` | ``skipped: over budget`` |
``check failed``) -> calls."""
MISMATCHES: list[dict] = []
"""Every mismatch of this process: op, backend, cell, shapes, finding, reproduction file and command."""


class CanaryMismatch(RuntimeError):
    """A sampled call's kernel output broke its op's parity class (``KPARITY_REQUIRE_CERTIFIED=1``)."""


_PENDING: list[CanaryMismatch] = []  # found by the worker, raised by the serving thread's next routed call
_LOCK = threading.Lock()
_SPENT: dict[str, float] = {}   # op name -> seconds its checks took; an op is in it once sampled
_STARTED: list[float] = []      # _clock() when the canary first sampled a call
_IN_FLIGHT: set[str] = set()    # ops with a check queued or running on a worker
_clock = time.perf_counter


def reset() -> None:
    """Forget the counts, mismatches and spending of this process: a fresh start of the budget's clock."""
    with _LOCK:
        COUNTS.clear()
        MISMATCHES.clear()
        _SPENT.clear()
        _STARTED.clear()
        _IN_FLIGHT.clear()


def _fraction(text: str, where: str, variable: str = CANARY_ENV,
              example: str = "1/1000, 0, or op=1/10,1/1000") -> fractions.Fraction:
    numerator, slash, denominator = text.strip().partition("/")
    try:
        value = fractions.Fraction(int(numerator), int(denominator) if slash else 1)
    except (ValueError, ZeroDivisionError):
        value = None
    if value is None or not 0 <= value <= 1:
        raise ValueError(f"{variable}={where!r}: {text.strip()!r} is not a fraction in 0..1 (write {example})")
    return value


@functools.lru_cache(maxsize=8)
def parse_budget(text: str) -> fractions.Fraction:
    """``KPARITY_CANARY_BUDGET``'s text as the fraction of wall time checks may take; ValueError naming it."""
    return _fraction(text, text, BUDGET_ENV, "1/200, or 1 for no bound")


def within_budget(op_name: str) -> bool:
    """Whether ``op_name``'s checks have taken no more than its share of the budget so far (module docstring)."""
    budget = parse_budget(os.environ.get(BUDGET_ENV, DEFAULT_BUDGET))
    now = _clock()
    with _LOCK:
        if not _STARTED:
            _STARTED.append(now)
        _SPENT.setdefault(op_name, 0.0)
        if budget == 1:
            return True
        return op_name not in _IN_FLIGHT and _SPENT[op_name] <= float(budget) * (now - _STARTED[0]) / len(_SPENT)


@functools.lru_cache(maxsize=8)
def parse_rates(text: str) -> tuple[fractions.Fraction, dict[str, fractions.Fraction]]:
    """``KPARITY_CANARY``'s text as (the default fraction, {op: fraction}); ValueError naming it when malformed."""
    default, per_op = fractions.Fraction(1, 1000), {}
    for part in filter(str.strip, text.split(",")):
        name, equals, value = part.partition("=")
        if equals:
            if not name.strip():
                raise ValueError(f"{CANARY_ENV}={text!r}: {part!r} names no op")
            per_op[name.strip()] = _fraction(value, text)
        else:
            default = _fraction(part, text)
    return default, per_op


def rate(op_name: str) -> fractions.Fraction:
    default, per_op = parse_rates(os.environ.get(CANARY_ENV, DEFAULT_RATE))
    return per_op.get(op_name, default)


def threshold(fraction: fractions.Fraction) -> int:
    """``fraction * 2^64`` rounded up: a draw of 64 random bits falls below it with probability ``fraction``
    (1 is every draw, 0 none)."""
    return -(-(fraction.numerator << 64) // fraction.denominator)


@functools.lru_cache(maxsize=64)
def _op_threshold(text: str, op_name: str) -> int:
    # every routed call asks: the rate's Fractions cost about 1.3 us a call on the CPU, an int compare nothing
    default, per_op = parse_rates(text)
    return threshold(per_op.get(op_name, default))


_DRAWS = iter(())  # 64-bit draws from os.urandom, read 4 KiB at a time: one syscall a draw cost 0.6 us


def _below(limit: int) -> bool:
    global _DRAWS
    if limit <= 0:
        return False
    try:
        (draw,) = next(_DRAWS)   # next() on one iterator is atomic under the GIL: serving threads may share it
    except StopIteration:
        _DRAWS = struct.iter_unpack("<Q", os.urandom(4096))
        (draw,) = next(_DRAWS)
    return draw < limit


def sampled(fraction: fractions.Fraction) -> bool:
    """One unpredictable draw: True with probability ``fraction``."""
    return _below(threshold(fraction))


@dataclasses.dataclass
class Check:
    """One sampled call: the kernel's entry, the input's cell, the inputs as they were before the call, and
    (once it returned) its outputs followed by its in-place arguments, all cloned."""

    entry: Any
    cell_id: str
    inputs: dict
    in_place: tuple[str, ...]
    actual: tuple = ()
    event: Any = None


def before(entry, bound: dict, cell_id: str) -> Check | None:
    """A Check of this call when it is sampled (its inputs cloned now, before the kernel runs), else None."""
    if not _below(_op_threshold(os.environ.get(CANARY_ENV, DEFAULT_RATE), entry.name)):
        return None
    if not within_budget(entry.name):
        _count(entry.name, "skipped: over budget")
        return None
    in_place = tuple(name for name in entry.in_place if bound.get(name) is not None)
    return Check(entry, cell_id, clone_inputs(bound), in_place)


def after(check: Check, result, bound: dict) -> None:
    """The call returned ``result``: judge it now (CPU) or queue it for the worker (CUDA)."""
    actual = as_outputs(result) + tuple(bound[name] for name in check.in_place)
    check.actual = tuple(value.clone() if isinstance(value, torch.Tensor) else value for value in actual)
    device = _device(check.inputs)
    if device.type != "cuda":
        timed_judge(check)
        raise_pending()
        return
    worker = _worker(device)
    check.event = torch.cuda.Event()
    # on the stream the clones were queued on: the inputs' device's, which need not be the current device
    check.event.record(torch.cuda.current_stream(device))
    for value in (*check.inputs.values(), *check.actual):
        if isinstance(value, torch.Tensor):
            value.record_stream(worker.stream)  # the clones are freed by the worker, after its stream used them
    with _LOCK:
        _IN_FLIGHT.add(check.entry.name)
    try:
        worker.checks.put_nowait(check)
    except queue.Full:
        with _LOCK:
            _IN_FLIGHT.discard(check.entry.name)
        _count(check.entry.name, "skipped: checks pending")


def _count(op_name: str, what: str) -> None:
    with _LOCK:  # the worker thread counts too
        COUNTS[op_name, what] += 1


def timed_judge(check: Check, stream=None) -> None:
    """:func:`judge`, its time (``stream`` synchronised: the device work it queued) spent from its op's budget."""
    start = _clock()
    try:
        judge(check)
        if stream is not None:
            stream.synchronize()
    finally:
        with _LOCK:
            _SPENT[check.entry.name] = _SPENT.get(check.entry.name, 0.0) + _clock() - start
            _IN_FLIGHT.discard(check.entry.name)


def judge(check: Check) -> None:
    """Run the parity oracle on one sampled call; count it, and record a mismatch."""
    entry = check.entry
    _count(entry.name, "checked")
    try:
        stock = None
        if entry.parity.value == "band":
            try:
                stock = run_on_copy(entry.stock, check.inputs, check.in_place)
            except Exception:  # noqa: BLE001 - the stock op's own limits: the band falls back to the reference
                stock = None
        check_parity(entry, check.inputs, check.actual, check.in_place, stock)
    except OracleFailure as failure:
        _mismatch(check, failure.message)
    except Exception as error:  # noqa: BLE001 - the check itself broke: say so, never take the call down
        _count(entry.name, "check failed")
        LOG.error("canary: %s [%s] cell %s: the check raised %s: %s", entry.name, entry.backend, check.cell_id,
                  type(error).__name__, error)


def _mismatch(check: Check, finding: str) -> None:
    entry = check.entry
    _count(entry.name, "mismatch")
    shapes = {name: f"{list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
              for name, value in check.inputs.items() if isinstance(value, torch.Tensor)}
    saved, command = _save(check, finding)
    record = {"op": entry.name, "backend": entry.backend, "cell": check.cell_id, "shapes": shapes,
              "finding": finding, "reproduction": saved, "command": command}
    MISMATCHES.append(record)
    LOG.error("canary: %s [%s] cell %s, %s: %s; reproduce: %s", entry.name, entry.backend, check.cell_id,
              ", ".join(f"{name} {shape}" for name, shape in shapes.items()), finding, command)
    if os.environ.get(REQUIRE_CERTIFIED_ENV) == "1":
        with _LOCK:
            _PENDING.append(CanaryMismatch(
                f"{entry.name} [{entry.backend}] cell {check.cell_id}: a sampled call broke its parity class "
                f"({finding}); reproduce: {command}; {REQUIRE_CERTIFIED_ENV}=1 forbids serving it"))


def _save(check: Check, finding: str) -> tuple[str | None, str]:
    folder = pathlib.Path(os.environ.get(CANARY_DIR_ENV) or pathlib.Path(tempfile.gettempdir()) / "kparity-canary")
    path = folder / f"{check.entry.name}-{check.cell_id}-{uuid.uuid4().hex[:12]}.pt"
    inputs = {name: value.cpu() if isinstance(value, torch.Tensor) else value for name, value in check.inputs.items()}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({"op": check.entry.name, "backend": check.entry.backend, "module": check.entry.kernel.__module__,
                    "cell": check.cell_id,
                    "device": str(_device(check.inputs)), "finding": finding, "inputs": inputs}, path)
    except (OSError, RuntimeError) as error:
        LOG.error("canary: could not save the reproduction to %s: %s", path, error)
        return None, f"(inputs not saved: {error})"
    return str(path), f"PYTHONPATH={pathlib.Path(__file__).resolve().parent.parent} {sys.executable} -m ops.canary {path}"


def raise_pending() -> None:
    """Raise the first mismatch found since the last call (``KPARITY_REQUIRE_CERTIFIED=1`` only fills it)."""
    if _PENDING:
        with _LOCK:
            found = _PENDING[:]
            _PENDING.clear()
        if found:
            raise found[0]


def drain() -> None:
    """Wait for every queued check (CUDA), then raise a pending mismatch."""
    for worker in list(_WORKERS.values()):
        worker.checks.join()
    raise_pending()


def _device(inputs: dict) -> torch.device:
    return next((value.device for value in inputs.values() if isinstance(value, torch.Tensor)), torch.device("cpu"))


class _Worker(threading.Thread):
    """Runs one device's deferred checks on a side stream, after the event of the call they check."""

    def __init__(self, device: torch.device):
        super().__init__(name=f"kparity-canary-{device}", daemon=True)
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.checks: queue.Queue = queue.Queue(maxsize=MAX_PENDING)

    def run(self) -> None:
        while True:
            check = self.checks.get()
            try:
                with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                    self.stream.wait_event(check.event)
                    timed_judge(check, self.stream)
            finally:
                self.checks.task_done()


_WORKERS: dict[torch.device, _Worker] = {}


def _worker(device: torch.device) -> _Worker:
    with _LOCK:
        if device not in _WORKERS:
            _WORKERS[device] = _Worker(device)
            _WORKERS[device].start()
        return _WORKERS[device]


def replay(path: str | os.PathLike) -> str | None:
    """Re-run a saved mismatch: the kernel of its op and backend on its inputs, judged as the canary did.
    Returns the finding, or None when the kernel agrees this time."""
    saved = torch.load(path, weights_only=False)
    entry = importlib.import_module(saved["module"]).ENTRY
    device = torch.device(saved["device"])
    inputs = {name: value.to(device) if isinstance(value, torch.Tensor) else value
              for name, value in saved["inputs"].items()}
    check = Check(entry, saved["cell"], clone_inputs(inputs),
                  tuple(name for name in entry.in_place if inputs.get(name) is not None))
    result = entry.kernel(**inputs)
    check.actual = as_outputs(result) + tuple(inputs[name] for name in check.in_place)
    before_count = len(MISMATCHES)
    judge(check)
    return MISMATCHES[-1]["finding"] if len(MISMATCHES) > before_count else None


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m ops.canary FILE (a reproduction the canary saved)", file=sys.stderr)
        sys.exit(2)
    found = replay(sys.argv[1])
    print(f"reproduced: {found}" if found else "the kernel agrees with its parity class on these inputs this time")
    sys.exit(1 if found else 0)
