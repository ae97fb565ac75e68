"""tools/nightly: the oracle battery again and again with fresh seeds; flaky is failing.

Each of ``--repeat`` runs goes over every cell of the chosen ops with new Hypothesis draws (the
per-cell seed salted with ``--seed`` + the run's number; ``--seed`` is random unless given, and
printed, so a nightly run can itself be repeated) besides the cells' fixed corners. Every example
that failed is then replayed ``--replays`` more times on its own (``oracles.battery.replay``):

- FLAKY: it failed at least once and passed at least once (or Hypothesis saw it pass when re-run);
- FAILING: it failed every time.

Every kernel of an op runs on its own (an op may have a Triton and a CuTe DSL kernel), named
``op [backend]`` where the op has several kernels, and each kernel that does not claim the device's
architecture is skipped, saying so; ``--impl`` judges its implementation once per op, on the cells of the
op's first kernel that claims it. A kernel module left out of the catalog here (its backend's package is
missing) is named on stderr and under ``unavailable_kernels`` in the JSON: it did not run.

Both are findings, each printed with its minimal recipe and the one-line reproduction of
``tools/certify-cells --replay`` (a flaky one may need a few repeats to fail). Draws per cell default
to the ``nightly`` Hypothesis profile's (references/strategies/profiles.py).

Exit status: 0 no example failed; 1 a flaky or failing example; 2 a usage or input error (one line).
"""
from __future__ import annotations

import json
import secrets
import sys
import time

import hypothesis

from tools.engine import junit
from tools.engine.worker import load_implementation
from tools.cli import ArgumentParser, UsageError, run_tool
from tools.engine.report import reproduction

# ops, oracles and torch are imported in the functions that use them: --help and usage errors need neither.


def parse_args(argv):
    parser = ArgumentParser(
        prog="tools/nightly",
        description="Re-run the oracle battery with fresh seeds several times; report examples that fail only "
                    "sometimes (flaky) or always (failing).",
        epilog="Example: tools/nightly --op greedy_argmax --repeat 5 --max-examples 50")
    parser.add_argument("--op", action="append", default=[], metavar="NAME",
                        help="op to run, every kernel of it (repeatable; default: every op in the catalog)")
    parser.add_argument("--impl", metavar="MODULE[:ATTR]", help="judge this implementation instead of the catalog kernel")
    parser.add_argument("--cell", action="append", default=[], metavar="ID", help="only this cell (repeatable)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default: cpu (Triton interpreter)")
    parser.add_argument("--repeat", type=int, default=3, metavar="N", help="runs, each with fresh seeds (default 3)")
    parser.add_argument("--replays", type=int, default=5, metavar="K",
                        help="replays of every failing example on its own (default 5)")
    parser.add_argument("--max-examples", type=int, metavar="N",
                        help="Hypothesis draws per cell and run, besides the corners (default: the nightly profile's)")
    parser.add_argument("--seed", type=int, help="salt of the first run's seeds (default: random, printed)")
    parser.add_argument("--no-shrink", action="store_true", help="replay failures as found, without shrinking them")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout")
    parser.add_argument("--junit", metavar="PATH", help="write JUnit XML: a testcase per (op, cell)")
    args = parser.parse_args(argv)
    for flag, value, least in (("--repeat", args.repeat, 1), ("--replays", args.replays, 1),
                               ("--max-examples", args.max_examples, 0)):
        if value is not None and value < least:
            raise UsageError(f"{flag}: {value} is below {least}")
    return args


def nightly_max_examples() -> int:
    from references.strategies import profiles  # registers the project's profiles with Hypothesis

    return profiles.settings.get_profile("nightly").max_examples


def chosen_cells(entries, requested: list[str]) -> list[tuple]:
    pairs = []
    for entry in entries:
        known = {cell.id for cell in entry.cells}
        missing = [cell_id for cell_id in requested if cell_id not in known]
        if missing:
            raise UsageError(f"--cell: {entry.name} has no cell {', '.join(missing)}; cells: {', '.join(sorted(known))}")
        pairs += [(entry, cell) for cell in entry.cells if not requested or cell.id in requested]
    return pairs


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from ops import catalog
    from oracles.battery import Implementation, recipe_json, replay, run_cell

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device on this machine")
    device = torch.device(args.device)
    arch = catalog.arch_of(device)
    registry = catalog.entries()
    unknown = [name for name in args.op if name not in registry]
    if unknown:
        raise UsageError(f"--op: no op named {', '.join(unknown)}; ops: {', '.join(registry)}")
    unjudged = catalog.unjudged_kernels()
    for left_out in unjudged:
        print(f"{left_out['module']}: not in the catalog on this machine, not run: {left_out['why']}", file=sys.stderr)
    claiming = {name: [entry for entry in catalog.kernels(name) if arch in entry.archs] for name in args.op or registry}
    for name, found in sorted(claiming.items()):
        if args.impl and not found:
            print(f"{name}: does not claim {arch.value}; skipped", file=sys.stderr)
        elif not args.impl:
            for entry in catalog.kernels(name):
                if entry not in found:
                    print(f"{catalog.kernel_label(entry)}: does not claim {arch.value}; skipped", file=sys.stderr)
    # Entry -> (its name in what is printed, its implementation, the certify-cells flags that pick it)
    if args.impl:  # an outside implementation of the op: once per op
        entries = [found[0] for found in claiming.values() if found]
        implementations = load_implementation(args.impl, entries)  # by op name
        judged = {entry: (entry.name, implementations[entry.name], []) for entry in entries}
    else:
        entries = [entry for found in claiming.values() for entry in found]
        judged = {entry: (catalog.kernel_label(entry), Implementation.of_kernels(entry, catalog.kernels),
                          ["--backend", entry.backend] if len(catalog.kernels(entry.name)) > 1 else [])
                  for entry in entries}
    pairs = chosen_cells(entries, args.cell)
    max_examples = nightly_max_examples() if args.max_examples is None else args.max_examples
    seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else (lambda line: print(line, flush=True))
    say(f"nightly: {args.repeat} runs x {len(pairs)} cells of {', '.join(judged[e][0] for e in entries)} "
        f"({args.impl or 'catalog kernels'}) on {args.device}, seed {seed}, {max_examples} drawn examples per cell "
        f"and run besides the corners; every failing example replayed {args.replays} times")

    # (kernel, cell id, recipe as JSON) -> what was seen of that example
    examples: dict[tuple, dict] = {}
    runs = []
    for run in range(args.repeat):
        results = []
        for entry, cell in pairs:
            name, implementation, _ = judged[entry]
            started = time.monotonic()
            result = run_cell(entry, implementation, cell, device, max_examples=max_examples,
                              seed=seed + run, shrink=not args.no_shrink, strategy=entry.strategy_module)
            results.append({"op": name, "cell": cell.id, "status": result.status, "examples": result.examples,
                            "seconds": round(time.monotonic() - started, 3)})
            say(f"run {run + 1}/{args.repeat} (seed {seed + run}): {name}/{cell.id}: {result.status} after "
                f"{result.examples} examples")
            if result.failure is None:
                continue
            recipe = result.failure.recipe or {}
            seen = examples.setdefault((name, cell.id, recipe_json(recipe)), {
                "op": name, "cell": cell.id, "recipe": recipe, "failed": 0, "passed": 0,
                "oracle": result.failure.oracle, "message": result.failure.message, "entry": entry, "cell_obj": cell})
            seen["failed"] += 1
            # Hypothesis re-ran the example while shrinking and saw it pass
            seen["passed"] += isinstance(result.failure.__cause__, hypothesis.errors.FlakyFailure)
        runs.append({"run": run + 1, "seed": seed + run, "results": results})

    findings = []
    for seen in examples.values():
        _, implementation, flags = judged[seen["entry"]]
        if "seed" in seen["recipe"]:  # the refusal table has no recipe to replay; its runs count already
            for _ in range(args.replays):
                outcome = replay(seen["entry"], implementation, seen["cell_obj"], device, seen["recipe"],
                                 seen["entry"].strategy_module)
                seen["failed" if outcome.failure else "passed"] += 1
        command = reproduction(seen["entry"].name, seen["cell"], args.device, seen["recipe"], args.impl, flags)
        verdict = "flaky" if seen["passed"] else "failing"
        findings.append({key: seen[key] for key in ("op", "cell", "recipe", "failed", "passed", "oracle", "message")}
                        | {"verdict": verdict, "reproduce": command})

    for finding in findings:
        runs_seen = finding["failed"] + finding["passed"]
        say(f"{finding['verdict'].upper()} {finding['op']}/{finding['cell']}: failed {finding['failed']} of "
            f"{runs_seen} times on the same example\n"
            f"  oracle:  {finding['oracle']}\n  finding: {finding['message']}\n"
            f"  minimal: {recipe_json(finding['recipe'])}\n"
            f"  reproduce{' (fails only sometimes: repeat it)' if finding['verdict'] == 'flaky' else ''}: "
            f"{finding['reproduce']}")
    flaky = sum(f["verdict"] == "flaky" for f in findings)
    verdict = "fail" if findings else "pass"
    say(f"nightly: {verdict.upper()} ({flaky} flaky, {len(findings) - flaky} failing examples; "
        f"{args.repeat * len(pairs)} cell runs)")
    if args.json:
        print(json.dumps({"seed": seed, "repeat": args.repeat, "replays": args.replays, "max_examples": max_examples,
                          "impl": args.impl, "device": args.device, "unavailable_kernels": unjudged, "runs": runs, "findings": findings,
                          "verdict": verdict}, indent=2))
    if args.junit:
        cases = []
        for entry, cell in pairs:
            name = judged[entry][0]
            mine = [f for f in findings if (f["op"], f["cell"]) == (name, cell.id)]
            failure = None if not mine else (
                f"{mine[0]['verdict']}: {mine[0]['oracle']}: {mine[0]['message']}",
                "\n".join(f"{f['verdict']}: failed {f['failed']} of {f['failed'] + f['passed']} times\n"
                          f"reproduce: {f['reproduce']}" for f in mine))
            seconds = sum(r["seconds"] for run in runs for r in run["results"]
                          if (r["op"], r["cell"]) == (name, cell.id))
            cases.append(junit.testcase(f"nightly.{name}", cell.id, seconds, failure))
        junit.write(args.junit, [junit.testsuite(f"nightly {args.device} seed {seed}", cases)])
    return 1 if findings else 0


if __name__ == "__main__":
    run_tool(main)
