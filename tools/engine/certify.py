"""tools/certify-cells: run the oracle battery per (op, cell) on this machine and write certificates.

Without ``--impl`` it judges the catalog kernels — every backend of each op (Triton, CuTe DSL), or the
one ``--backend`` names — and writes each certificate beside its kernel (for the arch of ``--device``).
With ``--impl MODULE[:ATTR]`` it judges any implementation of the contract — yours or someone else's —
once per op, on the cells of the op's first kernel, whatever our kernels claim; it writes no
certificate.

Isolation (``tools/engine/isolation.py``; on by default with ``--device cuda``): each cell runs in a worker
process, so an illegal address, a device assert or a hang (``--cell-timeout``) fails that cell with
the oracle and example that were running, and the run goes on in a fresh worker.  ``--gpus all|N``
runs one worker per GPU; ``--sanitize TOOL`` runs each cell under compute-sanitizer; ``--shard I/N``
runs one deterministic share of the cells (``tools/engine/shards.py``).  Cells in the quarantine ledger
(``ops/quarantine.py``) are never launched for the catalog kernel and are recorded as quarantined;
``--check-quarantine`` runs exactly those and fails when one now passes.

Every oracle that applies gets its own verdict; a cell's line reads
``numerics: pass; interface: refusals FAIL (2 rows)`` and each failing oracle has its finding, minimal
recipe and reproduction.  ``--oracles numerics`` (or a comma list) judges only those oracles: the run is
labelled "partial: not a certificate" and writes no certificate.  A run ends with a summary line (cells
certified / passed / failed / quarantined, oracles failed, elapsed time).

Exit status: 0 every cell passed; 1 a cell failed (op, cell, oracle, minimal recipe and a one-line
reproduction are printed), or a quarantined cell now passes; 2 a usage, import or input error (one line).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import shlex
import sys
import time
from typing import Sequence

from tools.cli import ArgumentParser, UsageError, run_main
from tools.engine.isolation import SANITIZER_TOOLS, WorkerStartError, cpu_slot, find_sanitizer, gpu_slots, run_isolated
from tools.engine.report import isolation_flags, reproduction, write_outputs
from tools.engine.shards import parse_shard, select
from tools.engine.worker import CellTask, execute, hosted_implementation, implementation_host, retire_host

# ops, oracles and torch are imported in the functions that use them: --help and usage errors need neither.

# cpu: twice the draws the last of the suites' wrong implementations needed (10: docs/draws.md)
DEFAULT_MAX_EXAMPLES = {"cpu": 20, "cuda": 100}
DEFAULT_CELL_TIMEOUT_S = 1800  # a hang is a cell that never ends; this only bounds how long CI waits for one


def parse_args(argv):
    parser = ArgumentParser(
        prog="tools/certify-cells",
        description="Run the oracle battery over every cell of the chosen ops on this machine.",
        epilog="Example: tools/certify-cells --op greedy_argmax --impl mypkg.kernels:argmax --device cpu")
    parser.add_argument("--op", action="append", default=[], metavar="NAME",
                        help="op to certify (repeatable; default: every op in the catalog)")
    parser.add_argument("--backend", metavar="NAME",
                        help="only the chosen ops' kernels of this backend (triton, cute; default: every backend)")
    parser.add_argument("--impl", metavar="MODULE[:ATTR]",
                        help="judge this implementation instead of the catalog kernel (writes no certificate)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu runs Triton kernels under the interpreter (default: cpu)")
    parser.add_argument("--max-examples", type=int, metavar="N",
                        help="Hypothesis draws per cell, besides its fixed corners (default: 20 on cpu, 100 on cuda; docs/draws.md)")
    parser.add_argument("--seed", type=int, default=0, help="salt for the per-cell seeds (default 0)")
    parser.add_argument("--cell", action="append", default=[], metavar="ID",
                        help="only this cell (repeatable; writes no certificate)")
    parser.add_argument("--replay", metavar="JSON", help="run the battery on this one recipe (needs one --cell)")
    parser.add_argument("--no-shrink", action="store_true", help="report a failure without shrinking it")
    parser.add_argument("--oracles", metavar="LIST",
                        help="judge only these oracles: numerics (parity, determinism, batch_invariance, graph_parity, "
                             "write_guards, stateful), interface (refusals), or a comma list of names; a partial run "
                             "is not a certificate and writes none (default: every oracle)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("--report", metavar="PATH", help="also write the results as JSON to PATH; a PATH ending in "
                        ".html gets a self-contained page of every certificate instead (tools/engine/report.py)")
    parser.add_argument("--junit", metavar="PATH", help="also write JUnit XML to PATH: a testcase per (op, cell)")
    isolation = parser.add_argument_group("isolation, sanitizers and scale")
    isolation.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                           help="run each cell in a worker process (default: on with --device cuda, off on cpu)")
    isolation.add_argument("--cell-timeout", type=float, metavar="SECONDS",
                           help=f"a cell with no result by then is a hang (default {DEFAULT_CELL_TIMEOUT_S}; isolates)")
    isolation.add_argument("--gpus", metavar="all|N", help="one worker per GPU over the first N visible GPUs, or all")
    isolation.add_argument("--sanitize", choices=SANITIZER_TOOLS,
                           help="run each cell under compute-sanitizer with this tool; any report fails the cell "
                                "(writes no certificate)")
    isolation.add_argument("--shard", metavar="I/N",
                           help="only the cells of shard I of N (1-based; writes no certificate)")
    isolation.add_argument("--quarantine", metavar="YAML",
                           help="the quarantine ledger (default ops/quarantine.yml)")
    isolation.add_argument("--check-quarantine", action="store_true",
                           help="run only the ledger's cells for this arch, isolated; exit 1 if one now passes")
    isolation.add_argument("--list", action="store_true", help="print the (op, cell) ids this run would run, and exit")
    args = parser.parse_args(argv)
    if args.impl is not None and not args.impl.strip():
        raise UsageError("--impl: empty; name an implementation as MODULE[:ATTR]")
    if args.max_examples is not None and args.max_examples < 0:
        raise UsageError(f"--max-examples: {args.max_examples} is negative")
    if args.cell_timeout is not None and not (math.isfinite(args.cell_timeout) and args.cell_timeout > 0):
        raise UsageError(f"--cell-timeout: {args.cell_timeout:g} is not positive and finite (seconds)")
    for flag, path in (("--report", args.report), ("--junit", args.junit)):
        if path is not None:
            check_writable(flag, path)
    if args.gpus is not None:
        if args.device != "cuda":
            raise UsageError("--gpus needs --device cuda")
        if args.gpus != "all" and not (args.gpus.isdigit() and int(args.gpus) > 0):
            raise UsageError(f"--gpus {args.gpus!r}: expected 'all' or a positive number")
    if args.sanitize and args.device != "cuda":
        raise UsageError(f"--sanitize {args.sanitize}: compute-sanitizer checks CUDA kernels; it needs --device cuda")
    try:
        args.shard = parse_shard(args.shard) if args.shard is not None else None
    except ValueError as error:
        raise UsageError(str(error)) from None
    needs_workers = [flag for flag, given in (("--cell-timeout", args.cell_timeout is not None),
                                              ("--gpus", args.gpus is not None), ("--sanitize", args.sanitize),
                                              ("--check-quarantine", args.check_quarantine)) if given]
    if args.isolate is False and needs_workers:
        raise UsageError(f"--no-isolate: {needs_workers[0]} runs cells in worker processes")
    args.isolate = args.isolate if args.isolate is not None else bool(needs_workers) or args.device == "cuda"
    from oracles.battery import ORACLES, parse_oracles

    try:
        args.oracles = parse_oracles(args.oracles) if args.oracles is not None else ORACLES
    except ValueError as error:
        raise UsageError(f"--oracles: {error}") from None
    if args.replay is not None:
        if len(args.cell) != 1 or len(args.op) != 1:
            raise UsageError("--replay needs exactly one --op and one --cell")
        try:
            args.replay = json.loads(args.replay)
        except json.JSONDecodeError as error:
            raise UsageError(f"--replay: not JSON ({error.msg})") from None
        if not isinstance(args.replay, dict) or "seed" not in args.replay:
            raise UsageError("--replay: expected a JSON object with a 'seed', as printed by a failure")
    if writes_certificates(args) and not args.list:
        from ops.certificates import POLICY

        max_examples = DEFAULT_MAX_EXAMPLES[args.device] if args.max_examples is None else args.max_examples
        if max_examples < POLICY.min_examples:
            raise UsageError(f"--max-examples {max_examples}: a certifying run draws at least {POLICY.min_examples} "
                             f"examples per cell (ops/certificates.py POLICY); pass --cell to explore without "
                             f"certifying")
    return args


def writes_certificates(args) -> bool:
    """Whether this run judges the catalog kernels on every cell with every oracle, the only run that writes
    certificates (``args.oracles`` parsed)."""
    from oracles.failures import ORACLES

    return not (args.impl or args.cell or args.replay or args.shard or args.check_quarantine or args.sanitize
                or tuple(args.oracles) != ORACLES)


def check_writable(flag: str, path: str) -> None:
    """A file this run will write must be writable before any work starts (a failure to write it at the
    end would hide the run's verdict)."""
    target = pathlib.Path(path)
    folder = target.parent
    if target.is_dir():
        raise UsageError(f"{flag}: {path} is a folder")
    if not folder.is_dir():
        raise UsageError(f"{flag}: cannot write {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"{flag}: cannot write {path}: permission denied")


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
        params = entry.params_of(**entry.bind(**strategy.build(recipe, device)))
    except Exception as error:  # noqa: BLE001 - a recipe that does not build is malformed, in one line
        raise UsageError(f"--replay: the recipe does not build inputs: {type(error).__name__}: {error}") from None
    outside = [name for name, bound in cell.bounds.items() if params.get(name) not in bound]
    if outside:
        name = outside[0]
        raise UsageError(f"--replay: its input has {name} = {params.get(name)!r}, outside cell {cell.id}'s "
                         f"bound {cell.bounds[name]}")



def check_implementation(spec: str, entries, device: str) -> None:
    """A bad ``--impl`` is a usage error here, not a failure of every cell.  It is imported in an
    implementation host, never in this process (which then serves the first cells, when they run here)."""
    from oracles.failures import OracleFailure

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
    """On a terminal, one self-overwriting status line per cell (logs get only the cell results)."""
    print(f"\r  {line}\033[K", end="", file=sys.stderr, flush=True)


def describe(result, device: str, impl: str | None, seconds: float | None = None, flags: Sequence[str] = (),
             backend: str | None = None) -> str:
    """What a run prints for one cell (``op[backend]/cell`` for a catalog kernel): the verdict, and for a
    failure where, why and how to reproduce it."""
    from ops.quarantine import QUARANTINED, citation
    from oracles.battery import recipe_json

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
    line = f"{where}/{result.cell_id}: {result.status.upper()} after {result.examples} examples ({numbers})"
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


def _region(exercised: dict, declared: dict) -> str:
    return ", ".join(f"{name} {exercised[name][0]}..{exercised[name][1]} of {lo}..{hi}"
                     for name, (lo, hi) in declared.items())


def plan(args, entries, arch, ledger) -> list[tuple]:
    """``(entry, cell, quarantined or None)`` for every cell this run covers, in catalog order."""
    from ops import quarantine

    planned = []
    for entry in entries:
        if arch not in entry.archs and not args.impl:
            print(f"{entry.name}[{entry.backend}]: does not claim {arch.value}; skipped", file=sys.stderr)
            continue
        cells = entry.cells
        if args.cell:
            missing = [c for c in args.cell if c not in {cell.id for cell in entry.cells}]
            if missing:
                raise UsageError(f"--cell: {entry.name} has no cell {', '.join(missing)}; "
                                 f"cells: {', '.join(c.id for c in entry.cells)}")
            cells = [entry.cell(c) for c in args.cell]
        for cell in select(cells, args.shard, key=lambda cell: (entry.name, cell.id)):
            # the ledger speaks of the catalog kernels: an --impl is judged on every cell
            held = quarantine.lookup(ledger, entry.name, cell.id, arch) if not args.impl or args.check_quarantine \
                else None
            if not args.check_quarantine or held:
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


def run_tasks(args, tasks, on_result) -> dict:
    """Every task's result, keyed by ``(op, cell)``: in worker processes, or in this one."""

    if not args.isolate:
        results = {}
        for task in tasks:
            started = time.monotonic()
            results[task.key] = execute(task, progress=_progress_line if sys.stderr.isatty() else None)
            on_result(results[task.key], time.monotonic() - started)
        return results
    slots = gpu_slots(None if args.gpus == "all" else int(args.gpus or 1)) if args.device == "cuda" else [cpu_slot()]

    def note(slot, line):
        if sys.stderr.isatty():
            _progress_line(f"[{slot.label}] {line}" if len(slots) > 1 else line)

    try:
        return run_isolated(tasks, slots, cell_timeout=args.cell_timeout or DEFAULT_CELL_TIMEOUT_S,
                            sanitize=args.sanitize, on_note=note, on_result=on_result)
    except WorkerStartError as error:
        raise UsageError(str(error)) from None


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from ops import catalog

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device on this machine")
    if args.sanitize and not find_sanitizer():
        raise UsageError(f"--sanitize {args.sanitize}: compute-sanitizer not found on PATH, in $CUDA_HOME/bin "
                         f"or in /usr/local/cuda/bin")
    device = torch.device(args.device)
    arch = catalog.arch_of(device)
    if arch is None:
        raise UsageError(f"--device {args.device}: unknown architecture {torch.cuda.get_device_capability(device)}")
    if args.gpus is not None:
        check_gpus(args.gpus)
    registry = catalog.entries()
    for module, why in catalog.UNAVAILABLE.items():
        print(f"{module}: not in the catalog on this machine: {why}", file=sys.stderr)
    unknown = [name for name in args.op if name not in registry]
    if unknown:
        raise UsageError(f"--op: no op named {', '.join(unknown)}; ops: {', '.join(registry)}")
    if args.impl:  # an outside implementation: once per op, on its first kernel's cells
        runs = {None: [registry[name] for name in (args.op or registry)]}
        check_implementation(args.impl, runs[None], args.device)
        if args.isolate:  # the workers start hosts of their own

            retire_host(args.impl, args.device)
    else:  # each backend's kernels are a run of their own (a worker task names its backend)
        runs = {}
        for name in args.op or registry:
            for entry in catalog.kernels(name):
                if args.backend in (None, entry.backend):
                    runs.setdefault(entry.backend, []).append(entry)
        if not runs:
            raise UsageError(f"--backend: no {args.backend} kernel of {', '.join(args.op or registry)}")
    check_certificates_readable(args, runs)
    if args.replay is not None:
        replayed = next(iter(runs.values()))[0]
        if args.cell[0] in {cell.id for cell in replayed.cells}:  # an unknown cell is plan()'s usage error
            check_replay_recipe(replayed, replayed.cell(args.cell[0]), args.replay, device)
    max_examples = DEFAULT_MAX_EXAMPLES[args.device] if args.max_examples is None else args.max_examples
    facts = machine_facts(device)
    isolation = {"isolated": args.isolate, "gpus": args.gpus, "cell_timeout": args.cell_timeout,
                 "sanitize": args.sanitize, "shard": str(args.shard) if args.shard else None,
                 "quarantine": args.quarantine, "check_quarantine": args.check_quarantine}
    report = {"arch": arch.value, **facts, "impl": args.impl, "max_examples": max_examples, "seed": args.seed,
              "oracles": list(args.oracles), "partial": partial_label(args.oracles), "isolation": isolation,
              "results": []}
    started = time.monotonic()
    failed, planned = False, 0
    for backend, entries in runs.items():
        run_failed, run_planned = certify_kernels(args, argv, entries, backend, arch, device, report)
        failed, planned = failed or run_failed, planned + run_planned
    if args.list:
        return 0
    report["seconds"] = round(time.monotonic() - started, 3)
    if args.check_quarantine and not failed and not args.json:
        print(f"quarantine: {planned} quarantined cells on {arch.value}; each still fails", flush=True)
    if not args.json:
        print(closing_summary(report), flush=True)
    if args.json:
        print(json.dumps(report, indent=2))

    write_outputs(report, args.report, args.junit)
    return 1 if failed else 0


def partial_label(oracles: Sequence[str]) -> str | None:
    """What a run judging fewer than every oracle says of itself, everywhere it reports."""
    from oracles.battery import ORACLES, oracles_text

    if tuple(oracles) == ORACLES:
        return None
    return f"partial: not a certificate (judged only {oracles_text(oracles)})"


def closing_summary(report: dict) -> str:
    """``summary: 12 cells: 10 certified, 1 failed, 1 quarantined; oracles failed: parity 1; 43.2s``."""
    from collections import Counter

    statuses = Counter(result["status"] for result in report["results"])
    failing = Counter(oracle for result in report["results"]
                      for oracle, verdict in result.get("verdicts", {}).items() if verdict["verdict"] == "fail")
    counts = ", ".join(f"{statuses[status]} {status}" for status in ("certified", "passed", "failed", "quarantined")
                       if statuses[status])
    oracles = ", ".join(f"{oracle} {count}" for oracle, count in failing.items()) or "none"
    line = (f"summary: {len(report['results'])} cells: {counts or 'none run'}; oracles failed: {oracles}; "
            f"{report['seconds']:.1f}s")
    return line + (f"\n{report['partial']}" if report["partial"] else "")


def certify_kernels(args, argv, entries, backend: str | None, arch, device, report: dict) -> tuple[bool, int]:
    """Run the cells of ``entries`` — one backend's kernels, or (``backend`` None) the ops an --impl is
    judged on — adding their results to ``report``, and write their certificates.  Returns whether a
    cell failed, and how many cells were planned."""
    from ops import catalog, certificates, quarantine
    from ops.quarantine import QUARANTINED
    from oracles.battery import PASSED, CellResult, oracles_text

    try:
        ledger = quarantine.load(args.quarantine or quarantine.LEDGER)
    except quarantine.QuarantineError as error:
        raise UsageError(f"quarantine ledger: {error}") from None
    planned = plan(args, entries, arch, ledger)

    def shown(op_name: str) -> str | None:
        """The backend to name beside an op in what is printed: only an op of several kernels needs it."""
        return backend if backend and len(catalog.kernels(op_name)) > 1 else None

    if args.list:
        for entry, cell, held in planned:
            print(f"{entry.name}" + (f"[{shown(entry.name)}]" if shown(entry.name) else "") + f"/{cell.id}"
                  + (f"  (quarantined: {held.where})" if held and not args.check_quarantine else ""))
        return False, len(planned)
    max_examples = report["max_examples"]
    command = "tools/certify-cells " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    facts = {"device": report["device"], "versions": report["versions"]}
    flags = isolation_flags(report["isolation"], args.device) + (["--backend", backend] if backend else []) + \
        (["--oracles", oracles_text(args.oracles)] if report["partial"] else [])


    durations = {}

    def announce(result, seconds):
        durations[result.op, result.cell_id] = seconds or 0.0
        if args.impl and result.status == certificates.CERTIFIED:
            result.status = PASSED  # judged, not certified: an --impl run writes no certificate
        if not args.json:
            if sys.stderr.isatty():
                print("\r\033[K", end="", file=sys.stderr)
            print(describe(result, args.device, args.impl, seconds, flags, shown(result.op)), flush=True)

    results = {}
    for entry, cell, held in planned:
        if held and not args.check_quarantine:
            results[entry.name, cell.id] = CellResult(entry.name, cell.id, QUARANTINED, annotations=held.record())
            announce(results[entry.name, cell.id], None)
    tasks = [CellTask(entry.name, cell.id, args.device, args.impl, max_examples, args.seed, not args.no_shrink,
                      args.replay, backend, args.sanitize, args.cell_timeout or DEFAULT_CELL_TIMEOUT_S,
                      tuple(args.oracles))
             for entry, cell, held in planned if args.check_quarantine or not held]
    results.update(run_tasks(args, tasks, announce))
    failed = False
    for entry, cell, held in planned:
        result = results[entry.name, cell.id]
        if args.check_quarantine:
            result.annotations.update(held.record())
            if result.status in (certificates.CERTIFIED, PASSED):
                failed = True
                print(f"{held.where}: {entry.name}/{cell.id} now passes on {arch.value}: delete its entry "
                      f"(the ledger shrinks when a bug is fixed)", file=sys.stderr)
        else:
            failed |= result.status not in (certificates.CERTIFIED, PASSED, QUARANTINED)
        report["results"].append({"op": entry.name, "backend": backend, "cell": cell.id,
                                  "seconds": round(durations[entry.name, cell.id], 3), **result.record()})
    if writes_certificates(args):
        date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        for entry in entries:
            if any(planned_entry is entry for planned_entry, _, _ in planned):
                section = certificate_section(entry, results, facts, command=command, max_examples=max_examples,
                                              seed=args.seed, date=date)
                earned = {**{key: value for key, value in report.items() if key != "results"},
                          "results": [row for row in report["results"]
                                      if row["op"] == entry.name and row["backend"] == backend]}
                path = certificates.write_section(entry, arch, section, report=earned)
                if not args.json:
                    where = f"{entry.name}[{entry.backend}]" if shown(entry.name) else entry.name
                    print(f"{where}: wrote the {arch.value} section of {os.path.relpath(path)}", flush=True)
    return failed, len(planned)


def check_certificates_readable(args, runs: dict) -> None:
    """The certificates this run will update, and those an HTML report shows, must be readable before any
    work starts (a corrupt one is named, never silently replaced)."""
    from ops import catalog, certificates

    read = [entry for entries in runs.values() for entry in entries] if writes_certificates(args) else []
    if args.report and args.report.endswith(".html"):
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


if __name__ == "__main__":
    run_main(main)
