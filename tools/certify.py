"""tools/certify-cells: run the oracle battery per (op, cell) on this machine and write certificates.

Without ``--impl`` it judges the catalog kernels — every backend of each op, or the one ``--backend``
names — and writes each certificate beside its kernel (for the arch of ``--device``).  With
``--impl MODULE[:ATTR]`` it judges any implementation of the contract — yours or someone else's — once
per op, on the cells of the op's first kernel, wherever our kernels claim to run; it writes no
certificate.

Exit status: 0 every cell passed; 1 a cell failed (op, cell, oracle, minimal recipe and a one-line
reproduction are printed); 2 a usage, import or input error (one line).
"""
from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import shlex
import sys
import time

from tools.cli import ArgumentParser, UsageError, run_main

DEFAULT_MAX_EXAMPLES = {"cpu": 6, "cuda": 100}


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
                        help="Hypothesis draws per cell, besides its fixed corners (default: 6 on cpu, 100 on cuda)")
    parser.add_argument("--seed", type=int, default=0, help="salt for the per-cell seeds (default 0)")
    parser.add_argument("--cell", action="append", default=[], metavar="ID",
                        help="only this cell (repeatable; writes no certificate)")
    parser.add_argument("--replay", metavar="JSON", help="run the battery on this one recipe (needs one --cell)")
    parser.add_argument("--no-shrink", action="store_true", help="report a failure without shrinking it")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("--report", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    if args.max_examples is not None and args.max_examples < 0:
        raise UsageError(f"--max-examples: {args.max_examples} is negative")
    if args.replay is not None:
        if len(args.cell) != 1 or len(args.op) != 1:
            raise UsageError("--replay needs exactly one --op and one --cell")
        try:
            args.replay = json.loads(args.replay)
        except json.JSONDecodeError as error:
            raise UsageError(f"--replay: not JSON ({error.msg})") from None
        if not isinstance(args.replay, dict) or "seed" not in args.replay:
            raise UsageError("--replay: expected a JSON object with a 'seed', as printed by a failure")
    return args


def load_implementation(spec: str, entries):
    """``MODULE[:ATTR]`` -> an Implementation for each entry (missing siblings: the reference)."""
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
            from ops.catalog import op

            functions[sibling] = getattr(module, sibling, None) or op(sibling).reference
        implementations[entry.name] = Implementation(spec, functions)
    return implementations


def reproduction(op_name: str, cell_id: str, device: str, recipe: dict, impl: str | None,
                 backend: str | None = None) -> str:
    from oracles.battery import recipe_json

    words = ["tools/certify-cells", "--op", op_name, "--cell", cell_id, "--device", device]
    if impl:
        words += ["--impl", impl]
    if backend:
        words += ["--backend", backend]
    return " ".join(shlex.quote(w) for w in words + ["--replay", recipe_json(recipe)])


def machine_facts(device) -> dict:
    import torch
    import triton

    try:
        cutlass_version = importlib.import_module("cutlass").__version__
    except Exception:  # noqa: BLE001 - not installed is a fact, not an error
        cutlass_version = None
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"{platform.machine()} CPU (Triton interpreter)"
    return {"device": name,
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "triton": triton.__version__, "nvidia-cutlass-dsl": cutlass_version}}


def describe(result, device: str, impl: str | None, seconds: float | None = None, backend: str | None = None) -> str:
    """One line per cell (``op/cell``, or ``op[backend]/cell`` for a catalog kernel), and for a failure
    the oracle, the finding, the minimal recipe and a one-line reproduction."""
    where = f"{result.op}[{backend}]" if backend else result.op
    line = (f"{where}/{result.cell_id}: {result.status.upper()} after {result.examples} examples "
            f"(kernel {result.worst_kernel_error_ulp:.3g} ULP, stock {result.worst_stock_error_ulp:.3g} ULP, "
            f"stock disagreements {result.stock_disagreements})")
    if seconds is not None:
        line += f" in {seconds:.1f}s"
    if result.failure is None:
        return line
    failure = result.failure
    from oracles.battery import recipe_json

    return "\n".join([
        line,
        f"  oracle:  {failure.oracle}",
        f"  finding: {failure.message}",
        f"  minimal: {recipe_json(failure.recipe or {})}",
        f"  reproduce: {reproduction(result.op, result.cell_id, device, failure.recipe or {}, impl, backend)}"
        if failure.recipe and 'seed' in failure.recipe else
        f"  reproduce: tools/certify-cells --op {result.op} --cell {result.cell_id} --device {device}"
        + (f" --impl {impl}" if impl else "") + (f" --backend {backend}" if backend else ""),
    ])


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from ops import catalog, certificates
    from oracles.battery import Implementation, replay, run_cell

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device on this machine")
    device = torch.device(args.device)
    arch = catalog.arch_of(device)
    if arch is None:
        raise UsageError(f"--device {args.device}: unknown architecture {torch.cuda.get_device_capability(device)}")
    registry = catalog.entries()
    for module, why in catalog.UNAVAILABLE.items():
        print(f"{module}: not in the catalog on this machine: {why}", file=sys.stderr)
    unknown = [name for name in args.op if name not in registry]
    if unknown:
        raise UsageError(f"--op: no op named {', '.join(unknown)}; ops: {', '.join(registry)}")
    entries = [entry for name in (args.op or registry) for entry in catalog.kernels(name)
               if args.backend in (None, entry.backend)]
    if not entries:
        raise UsageError(f"--backend: no {args.backend} kernel of {', '.join(args.op or registry)}")
    if args.impl:
        first_of_op = {}
        for entry in entries:
            first_of_op.setdefault(entry.name, entry)
        entries = list(first_of_op.values())
    implementations = load_implementation(args.impl, entries) if args.impl else {}
    max_examples = DEFAULT_MAX_EXAMPLES[args.device] if args.max_examples is None else args.max_examples
    writes_certificates = not (args.impl or args.cell or args.replay)
    command = "tools/certify-cells " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    facts = machine_facts(device)
    report = {"arch": arch.value, **facts, "impl": args.impl, "max_examples": max_examples, "seed": args.seed,
              "results": []}
    failed = False
    for entry in entries:
        backend = None if args.impl else entry.backend
        label = entry.name if args.impl else f"{entry.name}[{entry.backend}]"
        impl = implementations[entry.name] if args.impl else Implementation.of_kernels(entry)
        if arch not in entry.archs and not args.impl:
            print(f"{label}: does not claim {arch.value}; skipped", file=sys.stderr)
            continue
        cells = entry.cells
        if args.cell:
            missing = [c for c in args.cell if c not in {cell.id for cell in entry.cells}]
            if missing:
                raise UsageError(f"--cell: {entry.name} has no cell {', '.join(missing)}; "
                                 f"cells: {', '.join(c.id for c in entry.cells)}")
            cells = [entry.cell(c) for c in args.cell]
        results = []
        for cell in cells:
            started = time.monotonic()
            if args.replay is not None:
                result = replay(entry, impl, cell, device, args.replay)
            else:
                result = run_cell(entry, impl, cell, device, max_examples=max_examples,
                                  seed=args.seed, shrink=not args.no_shrink,
                                  progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
            results.append(result)
            failed |= result.status != certificates.CERTIFIED
            if not args.json:
                print(describe(result, args.device, args.impl, time.monotonic() - started, backend), flush=True)
            report["results"].append({"op": entry.name, "backend": backend, "cell": cell.id, **result.record()})
        if writes_certificates:
            section = {
                "source_sha256": certificates.source_digest(entry),
                **facts,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": command,
                "max_examples": max_examples,
                "seed": args.seed,
                "cells": {result.cell_id: result.record() for result in results},
            }
            path = certificates.write_section(entry, arch, section)
            if not args.json:
                print(f"{label}: wrote the {arch.value} section of {os.path.relpath(path)}", flush=True)
    if args.json:
        print(json.dumps(report, indent=2))
    if args.report:
        try:
            with open(args.report, "w") as handle:
                json.dump(report, handle, indent=2)
        except OSError as error:
            raise UsageError(f"--report: cannot write {args.report}: {error.strerror}") from None
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
