"""tools/certify-cells: run the oracle battery per (op, cell) on this machine and write certificates.

Without ``--impl`` it judges the catalog kernels — every backend of each op (Triton, CuTe DSL), or the
one ``--backend`` names — and writes each certificate beside its kernel (for the arch of ``--device``).
With ``--impl MODULE[:ATTR]`` it judges any implementation of the contract — yours or someone else's —
once per op, on the cells of the op's first kernel, whatever our kernels claim; it writes no
certificate.

Isolation (``tools/engine/isolation.py``; on by default with ``--device cuda``): each cell runs in a worker
process, so an illegal address, a device assert or a hang in the implementation's call (``--cell-timeout``)
fails that cell with the oracle and example that were running, and the run goes on in a fresh worker.  ``--gpus all|N``
runs one worker per GPU; ``--sanitize TOOL`` runs each cell under compute-sanitizer; ``--shard I/N``
runs one deterministic share of the cells (``tools/engine/shards.py``).  Cells in the quarantine ledger
(``ops/quarantine.py``) are never launched for the catalog kernel and are recorded as quarantined;
``--check-quarantine`` runs exactly those and fails when one now passes.

Every oracle that applies gets its own verdict; a cell's line reads
``numerics: pass; interface: refusals FAIL (2 rows)`` and each failing oracle has its finding, minimal
recipe and reproduction (``--dump DIR`` saves its inputs and outputs for a debugger).  ``--oracles numerics`` (or a comma list) judges only those oracles: the run is
labelled "partial: not a certificate" and writes no certificate.  A run ends with a summary line (cells
certified / passed / failed / quarantined, oracles failed, elapsed time).

This module is the command line alone: it turns flags into ``RunOptions`` and hands them to the engine
(``tools/engine/certify.py``), which checks them against the catalog, the policy and the machine.

Exit status: 0 every cell passed; 1 a cell failed (op, cell, oracle, minimal recipe and a one-line
reproduction are printed), or a quarantined cell now passes; 2 a usage, import or input error, or a tree holding
bytecode that is not its source's (``tools/engine/bytecode.py``), in one line; 3 an internal error: the judge's
own code failed (staging, the reference, the truth, a comparison, a report) or outlasted ``--cell-timeout``,
memory ran out (a fact about the machine) or no worker could start, which is never a finding against the
implementation — ``internal error: ...`` and a reproduction are printed, no report is written, and no
certificate but the sections of ops whose cells had all ended before it (as a stopped run keeps them).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import sys
import traceback

from oracles.failures import ORACLES
from oracles.judge_errors import JudgeError
from oracles.selection import parse_oracles
from tools.cli import INTERNAL_ERROR, ArgumentParser, UsageError, check_cell_timeout, check_workers, run_tool
from tools.engine import commands
from tools.engine.bytecode import refuse_planted
from tools.engine.certify import DEFAULT_CELL_TIMEOUT_S, RunOptions, certify
from tools.engine.dump import check_directory
from tools.engine.isolation import SANITIZER_TOOLS
from tools.engine.shards import parse_shard

REPO = pathlib.Path(__file__).resolve().parent.parent


# The nightly run draws 400 per cell; at 10**5 a cell of millisecond examples is over a day of work, so a
# larger count is a typo (10**30 ran on for ever), not a plan.
MAX_EXAMPLES_LIMIT = 100_000


def parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="tools/certify-cells",
        description="Run the oracle battery over every cell of the chosen ops on this machine.",
        epilog="Exit status: 0 every cell passed; 1 a finding (a cell failed); 2 a usage or input error; 3 an "
               "internal error (the judge's own defect, never the implementation's: no report, and no certificate but those of ops judged whole before it).  "
               "Example: tools/certify-cells --op greedy_argmax --impl mypkg.kernels:argmax --device cpu")
    parser.add_argument("--op", action="append", default=[], metavar="NAME",
                        help="op to certify (repeatable; default: every op in the catalog)")
    parser.add_argument("--backend", metavar="NAME",
                        help="only the chosen ops' kernels of this backend (triton, cute; default: every backend)")
    parser.add_argument("--impl", metavar="MODULE[:ATTR]",
                        help="judge this implementation instead of the catalog kernel (writes no certificate)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu runs Triton kernels under the interpreter (default: cpu)")
    parser.add_argument("--max-examples", type=int, metavar="N",
                        help="Hypothesis draws per cell, besides its fixed corners (default: what the policy asks of "
                             "a certificate on the device's arch, ops/certificates.py POLICY: 24 on cpu, 220 on sm90; "
                             "docs/draws.md)")
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
    parser.add_argument("--dump", metavar="DIR",
                        help="for each failing oracle, save its minimal recipe's inputs and the implementation's, "
                             "reference's, stock op's (and truth's) outputs to DIR (torch.save; tools/engine/dump.py)")
    parser.add_argument("--junit", metavar="PATH", help="also write JUnit XML to PATH: a testcase per (op, cell, oracle)")
    isolation = parser.add_argument_group("isolation, sanitizers and scale")
    isolation.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                           help="run each cell in a worker process (default: on with --device cuda, off on cpu)")
    isolation.add_argument("--cell-timeout", type=float, metavar="SECONDS",
                           help=f"a cell with no result by then is a hang of the implementation's call, or an internal "
                                f"error in the judge's own code (default {DEFAULT_CELL_TIMEOUT_S}; isolates)")
    isolation.add_argument("--gpus", metavar="all|N", help="one worker per GPU over the first N visible GPUs, or all")
    isolation.add_argument("-n", "--workers", type=int, metavar="N",
                           help="N worker processes sharing the cells, on the CPU or on each GPU (isolates; the "
                                "results are those of one process: each cell's draws follow from its own seed)")
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
    return parser


def parse_args(argv) -> RunOptions:
    """The run the flags ask for; a UsageError (exit 2, one line) for flags that contradict each other or
    name what cannot be (the engine checks the rest against the catalog and the machine)."""
    args = parser().parse_args(argv)
    if args.impl is not None and not args.impl.strip():
        raise UsageError("--impl: empty; name an implementation as MODULE[:ATTR]")
    if args.max_examples is not None and args.max_examples < 0:
        raise UsageError(f"--max-examples: {args.max_examples} is negative")
    if args.max_examples is not None and args.max_examples > MAX_EXAMPLES_LIMIT:
        raise UsageError(f"--max-examples: {args.max_examples:.3g} is above {MAX_EXAMPLES_LIMIT} draws per cell")
    check_cell_timeout(args.cell_timeout)
    for flag, path in (("--report", args.report), ("--junit", args.junit)):
        if path is not None:
            check_writable(flag, path)
    if args.gpus is not None:
        if args.device != "cuda":
            raise UsageError("--gpus needs --device cuda")
        if args.gpus != "all" and not (args.gpus.isdigit() and int(args.gpus) > 0):
            raise UsageError(f"--gpus {args.gpus!r}: expected 'all' or a positive number")
    check_workers(args.workers)
    if args.sanitize and args.device != "cuda":
        raise UsageError(f"--sanitize {args.sanitize}: compute-sanitizer checks CUDA kernels; it needs --device cuda")
    if args.dump is not None:
        check_directory(args.dump)
    try:
        shard = parse_shard(args.shard) if args.shard is not None else None
    except ValueError as error:
        raise UsageError(str(error)) from None
    needs_workers = [flag for flag, given in (("--cell-timeout", args.cell_timeout is not None),
                                              ("--gpus", args.gpus is not None), ("--sanitize", args.sanitize),
                                              ("--workers", args.workers is not None),
                                              ("--check-quarantine", args.check_quarantine)) if given]
    if args.isolate is False and needs_workers:
        raise UsageError(f"--no-isolate: {needs_workers[0]} runs cells in worker processes")
    try:
        oracles = parse_oracles(args.oracles) if args.oracles is not None else ORACLES
    except ValueError as error:
        raise UsageError(f"--oracles: {error}") from None
    replay = None
    if args.replay is not None:
        if len(args.cell) != 1 or len(args.op) != 1:
            raise UsageError("--replay needs exactly one --op and one --cell")
        try:
            replay = json.loads(args.replay)
        except json.JSONDecodeError as error:
            raise UsageError(f"--replay: not JSON ({error.msg})") from None
        if not isinstance(replay, dict) or "seed" not in replay:
            raise UsageError("--replay: expected a JSON object with a 'seed', as printed by a failure")
    words = sys.argv[1:] if argv is None else argv
    return RunOptions(
        ops=tuple(args.op), backend=args.backend, impl=args.impl, device=args.device,
        max_examples=args.max_examples, seed=args.seed, cells=tuple(args.cell), replay=replay,
        shrink=not args.no_shrink, oracles=oracles, json=args.json, report=args.report, junit=args.junit,
        dump=args.dump,
        isolate=args.isolate if args.isolate is not None else bool(needs_workers) or args.device == "cuda",
        cell_timeout=args.cell_timeout, gpus=args.gpus, workers=args.workers, sanitize=args.sanitize, shard=shard,
        quarantine=args.quarantine, check_quarantine=args.check_quarantine, list_only=args.list,
        command="tools/certify-cells " + " ".join(shlex.quote(word) for word in words))


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


def main(argv=None) -> int:
    options = parse_args(argv)
    refuse_planted(REPO)
    try:
        return certify(options)
    except UsageError:
        raise
    except Exception as error:  # noqa: BLE001 - the implementation's exceptions are findings by now: this is ours
        return internal_error(error)


def internal_error(error: Exception) -> int:
    """Say that the judge failed — not the implementation — with where and how to see it again: exit 3."""
    where = [f"{error.op}/{error.cell_id}"] if getattr(error, "cell_id", None) else []
    if getattr(error, "oracle", None):
        where.append(f"the {error.oracle} oracle")
    if getattr(error, "recipe", None):
        where.append(f"on {json.dumps(error.recipe, sort_keys=True, separators=(',', ':'))}")
    message = error.message if isinstance(error, JudgeError) else f"{type(error).__name__}: {error}"
    print(f"internal error: {message}" + (f" ({', '.join(where)})" if where else ""), file=sys.stderr)
    print("  the judge's own code failed: this is no finding against the implementation, and nothing was written",
          file=sys.stderr)
    environment, tool = commands.tool_command("certify-cells", "tools.certify_cells")
    print(f"  reproduce: {getattr(error, 'reproduce', None) or commands.shell_line(environment, [*tool, *sys.argv[1:]])}",
          file=sys.stderr)
    trace = getattr(error, "trace", None) or "".join(traceback.format_exception(error))
    print("  " + trace.rstrip().replace("\n", "\n  "), file=sys.stderr)
    return INTERNAL_ERROR


if __name__ == "__main__":
    run_tool(main)
