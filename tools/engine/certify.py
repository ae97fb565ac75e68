"""The certification run: the cells of the chosen ops judged by the oracle battery (in this process or in
worker processes), their verdicts printed and reported, and certificates written for the catalog kernels.

``certify(RunOptions(...))`` is the one entry point; ``tools/certify_cells.py`` builds the options from the
command line (its docstring describes the run as a user sees it).  The options are checked here against
what the command line cannot know — the catalog, the certification policy, the device, the certificates
on disk — before any work starts: a ``UsageError`` (exit 2, one line) names what is wrong.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import platform
import sys
import time
from typing import Callable, Sequence

from oracles.failures import ORACLES, OracleFailure
from oracles.judge_errors import JudgeError
from oracles.selection import oracles_text
from tools.cli import UsageError
from tools.engine.isolation import cpu_slots, find_sanitizer, gpu_slots, run_isolated
from tools.engine.report import isolation_flags, reproduction, write_outputs
from tools.engine.shards import Shard, select
from tools.engine.worker import CellTask, execute_measured, hosted_implementation, implementation_host, retire_host

# ops and torch are imported in the functions that use them: the command line's --help and usage errors
# need neither.

DEFAULT_CELL_TIMEOUT_S = 1800  # a hang is a cell that never ends; this only bounds how long CI waits for one


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """One certification run (``tools/certify_cells.py`` says what each option does for a user)."""

    ops: tuple[str, ...] = ()              # none: every op of the catalog
    backend: str | None = None             # only the kernels of this backend
    impl: str | None = None                # MODULE[:ATTR] judged instead of the catalog kernels
    device: str = "cpu"
    max_examples: int | None = None        # None: the policy's depth on this device's arch (policy_examples)
    seed: int = 0
    cells: tuple[str, ...] = ()            # none: every cell
    replay: dict | None = None             # one recipe, on one op's one cell
    shrink: bool = True
    oracles: tuple[str, ...] = ORACLES
    json: bool = False                     # the results as JSON on stdout instead of lines
    report: str | None = None              # a JSON (or .html) report written here
    junit: str | None = None
    dump: str | None = None                # each failing oracle's inputs and outputs saved here (dump.py)
    isolate: bool = False                  # each cell in a worker process
    cell_timeout: float | None = None      # None: DEFAULT_CELL_TIMEOUT_S
    gpus: str | None = None                # "all" or a count
    workers: int | None = None             # worker processes on the CPU, or on each GPU (None: one)
    sanitize: str | None = None            # a compute-sanitizer tool
    shard: Shard | None = None
    quarantine: str | None = None          # the ledger; None: ops/quarantine.yml
    check_quarantine: bool = False
    list_only: bool = False                # print the planned (op, cell) ids, run nothing
    command: str = "tools/certify-cells"   # what a certificate records as the command that earned it

    @property
    def examples(self) -> int:
        return policy_examples(run_arch(self.device)) if self.max_examples is None else self.max_examples


def run_arch(device: str):
    """The arch a run on ``device`` certifies: the CPU's interpreter, this machine's GPU, or None (no GPU here)."""
    import torch

    from ops.catalog import arch_of

    return arch_of(device) if device == "cpu" or torch.cuda.is_available() else None


def policy_examples(arch) -> int:
    """Draws a cell when none are asked: what the policy asks of a certificate of the run's ``arch`` (the deepest
    of every arch where the GPU is not known here, None), so that the plain command certifies (docs/draws.md)."""
    from ops.certificates import POLICY

    return POLICY.examples_on(arch) if arch is not None else POLICY.examples_on_every_arch()


def writes_certificates(options: RunOptions) -> bool:
    """Whether this run judges the catalog kernels on every cell with every oracle, the only run that writes
    certificates."""
    return not (options.impl or options.cells or options.replay or options.shard or options.check_quarantine
                or options.sanitize or options.oracles != ORACLES)


def check_policy(options: RunOptions) -> None:
    """A certifying run must draw as many examples as the policy asks of a certificate of its arch."""
    if not writes_certificates(options) or options.list_only:
        return
    # here: a run that writes no certificate (a replay line) starts without torch
    arch = run_arch(options.device)
    least = policy_examples(arch)
    if options.examples < least:
        raise UsageError(f"--max-examples {options.examples}: a certifying run draws at least {least} "
                         f"examples per cell{f' on {arch.value}' if arch else ''} (ops/certificates.py POLICY); "
                         f"pass --cell to explore without certifying")


def check_replay_recipe(entry, cell, recipe: dict, device) -> None:
    """A ``--replay`` recipe must be one the cell's strategy could draw: exactly its keys (those of the
    cell's corner recipes), sizes inside the cell's bounds, and inputs that build and lie in the cell;
    else a usage error naming the key (a malformed recipe is not a finding about the kernel)."""
    strategy = entry.strategy_module
    corner_keys = [set(corner) for corner in strategy.corners(cell, device)]
    allowed, required = set().union(*corner_keys), set.intersection(*corner_keys)
    unknown, missing = sorted(set(recipe) - allowed), sorted(required - set(recipe))
    if unknown:
        raise UsageError(f"--replay: unknown key {unknown[0]!r} for {entry.name}; keys: {', '.join(sorted(allowed))}")
    if missing:
        raise UsageError(f"--replay: missing key {missing[0]!r} for {entry.name}; keys: {', '.join(sorted(allowed))}")
    if type(recipe["seed"]) is not int:
        raise UsageError(f"--replay: key 'seed' is {recipe['seed']!r}, not an integer")
    for key, bound in cell.bounds.items():  # checked before building: a huge size must not allocate first
        if key in recipe and isinstance(recipe[key], (int, float)) and recipe[key] not in bound:
            raise UsageError(f"--replay: key {key!r} = {recipe[key]!r} is outside cell {cell.id}'s bound {bound}")
    try:
        kwargs = entry.bind(**strategy.build(recipe, device))
        params = entry.params_of(**kwargs)
    except Exception as error:  # noqa: BLE001 - a recipe that does not build is malformed, in one line
        raise UsageError(f"--replay: the recipe does not build inputs: {type(error).__name__}: {error}") from None
    try:
        entry.validate(**kwargs)
    except (ValueError, TypeError) as error:
        raise UsageError(f"--replay: the contract refuses the recipe's input: {error}") from None
    outside = [name for name, bound in cell.bounds.items() if params.get(name) not in bound]
    if outside:
        name = outside[0]
        raise UsageError(f"--replay: its input has {name} = {params.get(name)!r}, outside cell {cell.id}'s "
                         f"bound {cell.bounds[name]}")


def check_implementation(spec: str, entries, device: str) -> None:
    """A bad ``--impl`` is a usage error here, not a failure of every cell.  It is imported in an
    implementation host, never in this process (which then serves the first cells, when they run here)."""
    module_name, _, attribute = spec.partition(":")
    if attribute and len(entries) != 1:
        raise UsageError("--impl MODULE:ATTR judges one op: name it with one --op")
    host = implementation_host(spec, device)
    try:
        for entry in entries:
            hosted_implementation(spec, entry.name, None, host)
    except LookupError as error:
        retire_host(spec, device)
        raise UsageError(f"--impl: {error}") from None
    except JudgeError:
        retire_host(spec, device)
        raise
    except (Exception, OracleFailure) as error:  # noqa: BLE001 - any import failure is a usage error, in one line
        retire_host(spec, device)
        raise UsageError(f"--impl: cannot import {module_name!r}: {type(error).__name__}: {error}") from None


def machine_facts(device) -> dict:
    """The device's name and the toolchain (as dispatch compares it: ``ops.certificates.toolchain``)."""
    import torch

    from ops.certificates import toolchain

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"{platform.machine()} CPU (Triton interpreter)"
    return {"device": name, "versions": {"python": platform.python_version(), **toolchain()}}


def _progress_line(line: str) -> None:
    """On a terminal, one self-overwriting status line per cell."""
    print(f"\r  {line}\033[K", end="", file=sys.stderr, flush=True)


class LoggedProgress:
    """Progress for a log (stderr not a terminal): a worker's note is printed as a line when it is a new
    kind of note (another cell, shrinking, memory) or ``every_s`` after that worker's last printed line, so a
    cell that runs for minutes shows in a log whether it draws, shrinks or waits, without a line per example."""

    def __init__(self, every_s: float = 60.0, clock=time.monotonic, stream=None):
        self.every_s, self.clock, self.stream = every_s, clock, stream
        self.last: dict[str, tuple[str, float]] = {}

    def __call__(self, worker: str, line: str) -> None:
        kind, now = "".join(c for c in line if not c.isdigit()), self.clock()
        shown = self.last.get(worker)
        if shown is None or shown[0] != kind or now - shown[1] >= self.every_s:
            self.last[worker] = (kind, now)
            print(f"  [{worker}] {line}" if worker else f"  {line}", file=self.stream or sys.stderr, flush=True)


def describe(result, device: str, impl: str | None, seconds: float | None = None, flags: Sequence[str] = (),
             backend: str | None = None) -> str:
    """What a run prints for one cell (``op[backend]/cell`` for a catalog kernel): the verdict, and for a
    failure where, why and how to reproduce it."""
    from ops.certificates import CERTIFIED
    from ops.quarantine import QUARANTINED, citation
    from oracles.battery import PASSED, recipe_json

    where = f"{result.op}[{backend}]" if backend else result.op

    if result.status == QUARANTINED:
        held = result.annotations["quarantine"]
        return (f"{where}/{result.cell_id}: QUARANTINED ({held['ledger']}: "
                f"{citation(held['issue'], held['reason'])}): not launched")
    from ops.catalog import entries

    entry = entries().get(result.op)
    if entry is not None and entry.parity.value == "band":
        numbers = (f"kernel {result.worst_kernel_error_ulp:.3g} ULP, stock {result.worst_stock_error_ulp:.3g} ULP "
                   f"vs float64 truth")
    else:  # bitwise: the only number is how often the stock op itself breaks the contract
        numbers = f"bitwise; stock op disagreed with the contract on {result.stock_disagreements} examples"
    judged = judged_region(result, device, entry) if result.status in (CERTIFIED, PASSED) else None
    status = result.status.upper() + (f" on {judged[0]} only: {judged[1]}; not judged above" if judged else "")
    line = f"{where}/{result.cell_id}: {status} after {result.examples} examples ({numbers})"
    if result.refused_examples:
        line += f", {result.refused_examples} more refused clearly (beyond the implementation's own limits)"
    if seconds is not None:
        line += f" in {seconds:.1f}s"
    line += f"\n  {result.summary()}"
    narrowed = result.annotations.get("narrowed_by")
    if narrowed:
        line += (f"\n  exercised only {_region(result.exercised, result.annotations['declared'])} "
                 f"(narrowed by {narrowed})")
    if not result.failures:
        return line
    lines = [line]
    for oracle in result.failing():
        failure = result.failures[oracle]
        lines += [f"  oracle:  {failure.oracle}",
                  "  finding: " + failure.message.replace("\n", "\n           "),
                  f"  minimal: {recipe_json(failure.recipe or {})}",
                  f"  reproduce: {reproduction(result.op, result.cell_id, device, failure.recipe, impl, flags)}"]
    fault = result.annotations.get("fault")
    if fault:
        lines.append(f"  worker:  {fault['kind']} ({fault['worker']}); its last lines:")
        lines += [f"    | {text}" for text in fault["stderr_tail"]]
    sanitizer = result.annotations.get("sanitizer")
    if sanitizer:
        lines.append(f"  {sanitizer['tool']}:")
        lines += [f"    | {text}" for text in sanitizer["report"][:8]]
    return "\n".join(lines)


def below_policy(entry, arch, section: dict) -> str:
    """What a written section leaves dispatch unable to route, in words after the line that names it ("" when
    nothing): a depth under the policy, or cells recorded as certified on fewer judged examples than it asks
    (the rest of their draws refused clearly, which a strategy drawing inputs beyond the kernel's limits makes)."""
    from ops import certificates

    depth = certificates.POLICY.depth_problem(section, arch=arch)
    if depth:
        return f"; below the policy ({depth}): dispatch routes none of it"
    cells = certificates.POLICY.certified_cells_below(entry, section, arch=arch)
    if cells:
        return ("; below the policy, dispatch does not route " +
                "; ".join(f"{cell_id} ({why})" for cell_id, why in cells) + ": draw more (--max-examples)")
    return ""


def judged_region(result, device: str, entry) -> tuple[str, str] | None:
    """The part of its cell a passing run judged and why, in words, when it is not the whole cell: the
    strategy's CPU budget (``cpu_cap``: "R·V <= 2^18", the CPU interpreter cap) and any dimension the
    examples did not span; None when they judged all of it."""
    from oracles.battery import CPU_SIZE_CAP

    regions, whys = [], []
    cap = getattr(entry.strategy_module, "cpu_cap", None) if entry is not None and device == "cpu" else None
    words = cap(entry.cell(result.cell_id)) if cap is not None else None
    if words:
        regions.append(words)
        whys.append("CPU interpreter cap")
    narrowed = result.annotations.get("narrowed_by")
    if narrowed:
        regions.append(_region(result.exercised, result.annotations["declared"]))
        if not (words and narrowed == CPU_SIZE_CAP):   # the same cap, said once
            whys.append(narrowed)
    return (" and ".join(regions), "; ".join(dict.fromkeys(whys))) if regions else None


def _region(exercised: dict, declared: dict) -> str:
    return ", ".join(f"{name} {exercised[name][0]}..{exercised[name][1]} of {lo}..{hi}"
                     for name, (lo, hi) in declared.items())


def plan(options: RunOptions, entries, arch, ledger) -> list[tuple]:
    """``(entry, cell, quarantined or None)`` for every cell this run covers, in catalog order."""
    from ops import quarantine

    planned = []
    for entry in entries:
        if arch not in entry.archs and not options.impl:
            print(f"{entry.name}[{entry.backend}]: does not claim {arch.value}; skipped", file=sys.stderr)
            continue
        cells = entry.cells
        if options.cells:
            missing = [c for c in options.cells if c not in {cell.id for cell in entry.cells}]
            if missing:
                raise UsageError(f"--cell: {entry.name} has no cell {', '.join(missing)}; "
                                 f"cells: {', '.join(c.id for c in entry.cells)}")
            cells = [entry.cell(c) for c in options.cells]
        for cell in select(cells, options.shard, key=lambda cell: (entry.name, cell.id)):
            # the ledger speaks of the catalog kernels: an --impl is judged on every cell
            held = quarantine.lookup(ledger, entry.name, cell.id, arch) if not options.impl or options.check_quarantine \
                else None
            if not options.check_quarantine or held:
                planned.append((entry, cell, held))
    return planned


def certificate_section(entry, results: dict, facts: dict, *, command: str, max_examples: int, seed: int,
                        date: str) -> dict:
    """An arch section of ``entry``'s certificate: cells in the catalog's order, whichever finished first."""
    from ops import certificates

    return {
        "source_sha256": certificates.source_digest(entry),
        **facts,
        "date": date,
        "command": command,
        "max_examples": max_examples,
        "seed": seed,
        "cells": {cell.id: results[entry.name, cell.id].record() for cell in entry.cells
                  if (entry.name, cell.id) in results},
    }


def earned_rows(entries, arch):
    """``((op, cell), row)`` for each row of the report that earned each entry's ``arch`` section, of that
    entry's backend (the rows of no readable report left out: a malformed report costs nothing but order)."""
    from ops import certificates
    from ops.files import read_regular_bytes

    for entry in entries:
        try:   # never a FIFO's reader (the certificates' own rule)
            rows = json.loads(read_regular_bytes(certificates.report_path(entry, arch)))["results"]
            earned = [((entry.name, row["cell"]), row) for row in rows
                      if row.get("backend", entry.backend) == entry.backend and isinstance(row["cell"], str)]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        yield from earned


def seconds_a_draw(entries, arch) -> dict[tuple[str, str], float]:
    """``(op, cell)``: the seconds an example each cell took in the report that earned its op's ``arch``
    section (a cell of no such figure left out: its cost is unknown, and it goes first)."""
    found = {}
    for key, row in earned_rows(entries, arch):
        try:
            found[key] = row["seconds"] / max(1, row["examples"])
        except (KeyError, TypeError):
            continue
    return found


def gpu_peaks(entries, arch) -> dict[tuple[str, str], int]:
    """``(op, cell)``: the cell's peak GPU memory in bytes in the report that earned its op's ``arch`` section
    (``gpu_peak_bytes``; a cell without one, or with anything but a non-negative int there, left out: its peak
    is unknown, and it is scheduled as though nothing were known of memory)."""
    return {key: row["gpu_peak_bytes"] for key, row in earned_rows(entries, arch)
            if type(row.get("gpu_peak_bytes")) is int and row["gpu_peak_bytes"] >= 0}


def longest_first(tasks: list, costs: dict[tuple, float]) -> list:
    """Tasks in the order that ends a run of several workers soonest: the slowest a draw first (``costs``, by
    ``task.key``), a cell of unknown cost before all (longest-processing-time-first: a slow cell started last
    keeps the other workers idle until it ends); the catalog's order among equals."""
    return sorted(tasks, key=lambda task: -costs.get(task.key, math.inf))


def run_tasks(options: RunOptions, tasks, on_result, costs: dict | None = None, peaks: dict | None = None) -> dict:
    """Every task's result, keyed by ``task.key``: in worker processes, or in this one; on several workers, the
    slowest cells (``costs``: :func:`seconds_a_draw`, by ``task.key``) first, each as its GPU has room for its
    peak (``peaks``: :func:`gpu_peaks`, by ``task.key``).  ``on_result(task, result, seconds, GPU peak bytes or
    None)`` as each ends."""

    if not options.isolate:
        results = {}
        logged = LoggedProgress()
        for task in tasks:
            started = time.monotonic()
            results[task.key], gpu_peak_bytes = execute_measured(
                task, progress=_progress_line if sys.stderr.isatty() else lambda line: logged("", line))
            on_result(task, results[task.key], time.monotonic() - started, gpu_peak_bytes)
        return results
    slots = gpu_slots(None if options.gpus == "all" else int(options.gpus or 1), options.workers or 1) \
        if options.device == "cuda" else cpu_slots(options.workers or 1)

    if len(slots) > 1:
        tasks = longest_first(tasks, costs or {})
    logged = LoggedProgress()

    def note(slot, line):
        label = slot.label if len(slots) > 1 else ""
        if sys.stderr.isatty():
            _progress_line(f"[{label}] {line}" if label else line)
        else:
            logged(label, line)

    # a worker that cannot start raises WorkerStartError, an internal error (exit 3): the judge's machine failed
    return run_isolated(tasks, slots, cell_timeout=options.cell_timeout or DEFAULT_CELL_TIMEOUT_S,
                        sanitize=options.sanitize, on_note=note, on_result=on_result, gpu_peaks=peaks)


def certify(options: RunOptions) -> int:
    check_policy(options)
    import torch

    from ops import catalog

    if options.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device on this machine")
    if options.sanitize and not find_sanitizer():
        raise UsageError(f"--sanitize {options.sanitize}: compute-sanitizer not found on PATH, in $CUDA_HOME/bin "
                         f"or in /usr/local/cuda/bin")
    device = torch.device(options.device)
    arch = catalog.arch_of(device)
    if arch is None:
        raise UsageError(f"--device {options.device}: unknown architecture {torch.cuda.get_device_capability(device)}")
    if options.gpus is not None:
        check_gpus(options.gpus)
    registry = catalog.entries()
    for module, why in catalog.UNAVAILABLE.items():
        print(f"{module}: not in the catalog on this machine: {why}", file=sys.stderr)
    unknown = [name for name in options.ops if name not in registry]
    if unknown:
        raise UsageError(f"--op: no op named {', '.join(unknown)}; ops: {', '.join(registry)}")
    if options.impl:  # an outside implementation: once per op, on its first kernel's cells
        runs = {None: [registry[name] for name in (options.ops or registry)]}
        check_implementation(options.impl, runs[None], options.device)
        if options.isolate:  # the workers start hosts of their own
            retire_host(options.impl, options.device)
    else:  # each backend's kernels planned and concluded apart, their cells run together (a task names its backend)
        runs = {}
        for name in options.ops or registry:
            for entry in catalog.kernels(name):
                if options.backend in (None, entry.backend):
                    runs.setdefault(entry.backend, []).append(entry)
        if not runs:
            raise UsageError(f"--backend: no {options.backend} kernel of {', '.join(options.ops or registry)}")
    check_certificates_readable(options, runs)
    if options.replay is not None:
        replayed = next(iter(runs.values()))[0]
        if options.cells[0] in {cell.id for cell in replayed.cells}:  # an unknown cell is plan()'s usage error
            check_replay_recipe(replayed, replayed.cell(options.cells[0]), options.replay, device)
    facts = machine_facts(device)
    isolation = {"isolated": options.isolate, "gpus": options.gpus, "workers": options.workers,
                 "cell_timeout": options.cell_timeout,
                 "sanitize": options.sanitize, "shard": str(options.shard) if options.shard else None,
                 "quarantine": options.quarantine, "check_quarantine": options.check_quarantine}
    report = {"arch": arch.value, **facts, "impl": options.impl, "max_examples": options.examples, "seed": options.seed,
              "oracles": list(options.oracles), "partial": partial_label(options.oracles), "isolation": isolation,
              "results": []}
    started = time.monotonic()
    kernel_runs = [prepare_kernels(options, entries, backend, arch, report) for backend, entries in runs.items()]
    if options.list_only:
        return 0
    failed, planned = run_kernels(options, kernel_runs, arch)
    report["seconds"] = round(time.monotonic() - started, 3)
    if options.check_quarantine and not failed and not options.json:
        print(f"quarantine: {planned} quarantined cells on {arch.value}; each still fails", flush=True)
    if not options.json:
        print(closing_summary(report), flush=True)
    if options.json:
        print(json.dumps(report, indent=2))

    write_outputs(report, options.report, options.junit)
    return 1 if failed else 0


def partial_label(oracles: Sequence[str]) -> str | None:
    """What a run judging fewer than every oracle says of itself, everywhere it reports."""
    if tuple(oracles) == ORACLES:
        return None
    return f"partial: not a certificate (judged only {oracles_text(oracles)})"


def closing_summary(report: dict) -> str:
    """``summary: 12 cells: 10 certified, 1 failed, 1 quarantined; oracles failed: parity 1; 43.2s; 310
    examples, 7.2 a second`` (the rate over the cells' own times: what issue #26 sizes a device call by)."""
    from collections import Counter

    statuses = Counter(result["status"] for result in report["results"])
    failing = Counter(oracle for result in report["results"]
                      for oracle, verdict in result.get("verdicts", {}).items() if verdict["verdict"] == "fail")
    counts = ", ".join(f"{statuses[status]} {status}" for status in ("certified", "passed", "failed", "quarantined")
                       if statuses[status])
    oracles = ", ".join(f"{oracle} {count}" for oracle, count in failing.items()) or "none"
    examples = sum(result.get("examples", 0) for result in report["results"])
    busy = sum(result.get("seconds", 0.0) for result in report["results"])
    rate = f", {examples / busy:.1f} a second" if busy > 0 else ""
    line = (f"summary: {len(report['results'])} cells: {counts or 'none run'}; oracles failed: {oracles}; "
            f"{report['seconds']:.1f}s; {examples} examples{rate}")
    return line + (f"\n{report['partial']}" if report["partial"] else "")


@dataclasses.dataclass
class KernelRun:
    """One backend's part of a run (:func:`prepare_kernels`): its planned cells and the tasks among them to
    run, the results so far (by ``(op, cell)``), the flags its reproductions name, and what announces a cell as
    it ends (``announce(result, seconds, GPU peak bytes or None)``), adds planned cells' rows to the report and
    writes their sections (``conclude(rows)``: whether a cell failed), and keeps the ops whose cells all ended
    when the run stops early (``keep_finished_ops()``)."""

    backend: str | None
    entries: list
    planned: list
    tasks: list
    results: dict
    flags: list
    announce: Callable
    conclude: Callable
    keep_finished_ops: Callable


def prepare_kernels(options: RunOptions, entries, backend: str | None, arch, report: dict) -> KernelRun | None:
    """The cells of ``entries`` — one backend's kernels, or (``backend`` None) the ops an --impl is judged
    on — planned, as a :class:`KernelRun` whose results go into ``report`` and its ops' certificates; with
    ``--list``, their list printed instead (None)."""
    from ops import catalog, certificates, quarantine
    from ops.quarantine import QUARANTINED
    from oracles.battery import FAILED, PASSED, CellResult

    try:
        ledger = quarantine.load(options.quarantine or quarantine.LEDGER)
    except quarantine.QuarantineError as error:
        raise UsageError(f"quarantine ledger: {error}") from None
    planned = plan(options, entries, arch, ledger)

    def shown(op_name: str) -> str | None:
        """The backend to name beside an op in what is printed: only an op of several kernels needs it."""
        return backend if backend and len(catalog.kernels(op_name)) > 1 else None

    if options.list_only:
        for entry, cell, held in planned:
            print(f"{entry.name}" + (f"[{shown(entry.name)}]" if shown(entry.name) else "") + f"/{cell.id}"
                  + (f"  (quarantined: {held.where})" if held and not options.check_quarantine else ""))
        return None
    facts = {"device": report["device"], "versions": report["versions"]}
    flags = isolation_flags(report["isolation"], options.device) + (["--backend", backend] if backend else []) + \
        (["--oracles", oracles_text(options.oracles)] if report["partial"] else [])


    durations, peaks, finished = {}, {}, {}

    def announce(result, seconds, gpu_peak_bytes=None):
        durations[result.op, result.cell_id] = seconds or 0.0
        peaks[result.op, result.cell_id] = gpu_peak_bytes
        finished[result.op, result.cell_id] = result
        if options.impl and result.status == certificates.CERTIFIED:
            result.status = PASSED  # judged, not certified: an --impl run writes no certificate
        if not options.json:
            if sys.stderr.isatty():
                print("\r\033[K", end="", file=sys.stderr)
            print(describe(result, options.device, options.impl, seconds, flags, shown(result.op)), flush=True)

    def conclude(rows) -> bool:
        """Add the results of ``rows`` (planned cells) to the report and write their ops' certificates;
        whether a cell failed."""
        failed = False
        for entry, cell, held in rows:
            result = results[entry.name, cell.id]
            if options.check_quarantine:
                result.annotations.update(held.record())
                if result.status in (certificates.CERTIFIED, PASSED):
                    failed = True
                    print(f"{held.where}: {entry.name}/{cell.id} now passes on {arch.value}: delete its entry "
                          f"(the ledger shrinks when a bug is fixed)", file=sys.stderr)
            else:
                failed |= result.status not in (certificates.CERTIFIED, PASSED, QUARANTINED)
            # measured, not judged (what a later run schedules by): beside the seconds, never in the certificate
            peak = peaks.get((entry.name, cell.id))
            report["results"].append({"op": entry.name, "backend": backend, "cell": cell.id,
                                      "seconds": round(durations[entry.name, cell.id], 3),
                                      **({"gpu_peak_bytes": peak} if peak is not None else {}), **result.record()})
            if options.dump and result.status == FAILED:
                dump_cell(options, entry, backend, result, flags)
        if writes_certificates(options):
            date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            for entry in entries:
                if any(row_entry is entry for row_entry, _, _ in rows):
                    section = certificate_section(entry, results, facts, command=options.command,
                                                  max_examples=options.examples, seed=options.seed, date=date)
                    earned = {**{key: value for key, value in report.items() if key != "results"},
                              "results": [row for row in report["results"]
                                          if row["op"] == entry.name and row["backend"] == backend]}
                    path = certificates.write_section(entry, arch, section, report=earned)
                    if not options.json:
                        where = f"{entry.name}[{entry.backend}]" if shown(entry.name) else entry.name
                        print(f"{where}: wrote the {arch.value} section of {os.path.relpath(path)}"
                              f"{below_policy(entry, arch, section)}", flush=True)
        return failed

    results = {}
    for entry, cell, held in planned:
        if held and not options.check_quarantine:
            results[entry.name, cell.id] = CellResult(entry.name, cell.id, QUARANTINED, annotations=held.record())
            announce(results[entry.name, cell.id], None)
    tasks = [CellTask(entry.name, cell.id, options.device, options.impl, options.examples, options.seed, options.shrink,
                      options.replay, backend, options.sanitize, options.cell_timeout or DEFAULT_CELL_TIMEOUT_S,
                      options.oracles)
             for entry, cell, held in planned if options.check_quarantine or not held]
    def keep_finished_ops() -> None:
        """The sections of the ops whose cells all ended before the run did (each op's verdict is its own
        cells'; an op the run's end cut short, or whose cell met the judge's error, gets none)."""
        results.update(finished)
        conclude([row for row in planned if all((row[0].name, cell.id) in results
                                                for entry, cell, _ in planned if entry is row[0])])

    return KernelRun(backend, entries, planned, tasks, results, flags, announce, conclude, keep_finished_ops)


def run_kernels(options: RunOptions, kernel_runs: list[KernelRun], arch) -> tuple[bool, int]:
    """Every backend's cells in one run of the workers, slowest first over all of them (a backend's run of
    its own would leave workers idle at its end while the next backend waits), each result announced by its
    backend; then every backend's rows and sections.  Returns whether a cell failed, and how many cells were
    planned."""
    by_backend = {run.backend: run for run in kernel_runs}
    costs, peaks = {}, {}
    for run in kernel_runs:   # the estimates of each backend's own reports, keyed as its tasks are
        costs.update({(*key, run.backend): value for key, value in seconds_a_draw(run.entries, arch).items()})
        peaks.update({(*key, run.backend): value for key, value in gpu_peaks(run.entries, arch).items()})

    def announce(task, result, seconds, gpu_peak_bytes=None):
        by_backend[task.backend].announce(result, seconds, gpu_peak_bytes)

    try:
        found = run_tasks(options, [task for run in kernel_runs for task in run.tasks], announce, costs, peaks)
    except JudgeError as error:  # the run ends here, no report; how to see it again
        cell, raised_in = getattr(error, "cell_id", None), by_backend.get(getattr(error, "backend", None))
        if cell is not None and raised_in is not None:
            error.reproduce = reproduction(error.op, cell, options.device, error.recipe, options.impl, raised_in.flags)
        # out of memory beside other processes, or a judge slower than --cell-timeout, must not cost the
        # ops judged whole before it (a GPU lease's minutes)
        for run in kernel_runs:
            run.keep_finished_ops()
        raise
    except (KeyboardInterrupt, SystemExit):   # stopped (a time limit's SIGTERM): the ops it finished are kept
        for run in kernel_runs:
            run.keep_finished_ops()
        raise
    for (op, cell, backend), result in found.items():
        by_backend[backend].results[op, cell] = result
    failed = [run.conclude(run.planned) for run in kernel_runs]
    return any(failed), sum(len(run.planned) for run in kernel_runs)


def dump_cell(options: RunOptions, entry, backend: str | None, result, flags: Sequence[str]) -> None:
    """``--dump``: each failing oracle's recipe, inputs and outputs (``tools/engine/dump.py``)."""
    import pathlib

    from tools.engine.dump import dump_failure

    for oracle in result.failing():
        failure = result.failures[oracle]
        command = reproduction(result.op, result.cell_id, options.device, failure.recipe, options.impl, flags)
        path = dump_failure(pathlib.Path(options.dump), entry, backend, result.cell_id, oracle, failure,
                            options.impl, options.device, command)
        if path is not None and not options.json:
            print(f"  dump: {oracle}: {path}", flush=True)


def check_certificates_readable(options: RunOptions, runs: dict) -> None:
    """The certificates this run will update, and those an HTML report shows, must be readable before any
    work starts (a corrupt one is named, never silently replaced)."""
    from ops import catalog, certificates

    read = [entry for entries in runs.values() for entry in entries] if writes_certificates(options) else []
    if options.report and options.report.endswith(".html"):
        read = catalog.every_kernel()
    for entry in read:
        try:
            certificates.load(entry)
        except certificates.CertificateError as error:
            raise UsageError(str(error)) from None


def check_gpus(gpus: str) -> None:
    """--gpus N within what is visible, all of one kind (a certificate section names one device)."""
    import torch


    visible = len(gpu_slots(None))
    if gpus != "all" and int(gpus) > visible:
        raise UsageError(f"--gpus {gpus}: only {visible} GPUs are visible")
    count = visible if gpus == "all" else int(gpus)
    names = {torch.cuda.get_device_name(i) for i in range(count)}
    if len(names) > 1:
        raise UsageError(f"--gpus {gpus}: the GPUs differ ({', '.join(sorted(names))}); certify on one kind at a time")

