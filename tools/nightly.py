"""tools/nightly: the oracle battery again and again with fresh seeds; flaky is failing.

Each of ``--repeat`` runs goes over every cell of the chosen ops with new Hypothesis draws (the
per-cell seed salted with ``--seed`` + the run's number; ``--seed`` is random unless given, and
printed, so a nightly run can itself be repeated) besides the cells' fixed corners. Every example
that failed is then replayed ``--replays`` more times on its own (``oracles.battery.replay``):

- FLAKY: it failed at least once and passed at least once (or Hypothesis saw it pass when re-run);
- FAILING: it failed every time.

Both are findings, each printed with its minimal recipe and the one-line reproduction of
``tools/certify-cells --replay`` (a flaky one may need a few repeats to fail). Draws per cell default
to the ``nightly`` Hypothesis profile's (suites/strategies/profiles.py).

Exit status: 0 no example failed; 1 a flaky or failing example; 2 a usage or input error (one line).
"""
from __future__ import annotations

import json
import secrets
import sys
import time

import hypothesis

from tools import junit
from tools.cli import ArgumentParser, UsageError, run_main


def parse_args(argv):
    parser = ArgumentParser(
        prog="tools/nightly",
        description="Re-run the oracle battery with fresh seeds several times; report examples that fail only "
                    "sometimes (flaky) or always (failing).",
        epilog="Example: tools/nightly --op greedy_argmax --repeat 5 --max-examples 50")
    parser.add_argument("--op", action="append", default=[], metavar="NAME",
                        help="op to run (repeatable; default: every op in the catalog)")
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
    from suites.strategies import profiles  # registers the project's profiles with Hypothesis

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
    from tools.certify import load_implementation, reproduction

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device on this machine")
    device = torch.device(args.device)
    arch = catalog.arch_of(device)
    registry = catalog.entries()
    unknown = [name for name in args.op if name not in registry]
    if unknown:
        raise UsageError(f"--op: no op named {', '.join(unknown)}; ops: {', '.join(registry)}")
    entries = [registry[name] for name in (args.op or registry) if arch in registry[name].archs]
    for name in sorted({*(args.op or registry)} - {entry.name for entry in entries}):
        print(f"{name}: does not claim {arch.value}; skipped", file=sys.stderr)
    implementations = load_implementation(args.impl, entries) if args.impl else \
        {entry.name: Implementation.of_kernels(entry) for entry in entries}
    pairs = chosen_cells(entries, args.cell)
    max_examples = nightly_max_examples() if args.max_examples is None else args.max_examples
    seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else (lambda line: print(line, flush=True))
    say(f"nightly: {args.repeat} runs x {len(pairs)} cells of {', '.join(e.name for e in entries)} "
        f"({args.impl or 'catalog kernels'}) on {args.device}, seed {seed}, {max_examples} drawn examples per cell "
        f"and run besides the corners; every failing example replayed {args.replays} times")

    # (op, cell id, recipe as JSON) -> what was seen of that example
    examples: dict[tuple, dict] = {}
    runs = []
    for run in range(args.repeat):
        results = []
        for entry, cell in pairs:
            started = time.monotonic()
            result = run_cell(entry, implementations[entry.name], cell, device, max_examples=max_examples,
                              seed=seed + run, shrink=not args.no_shrink)
            results.append({"op": entry.name, "cell": cell.id, "status": result.status, "examples": result.examples,
                            "seconds": round(time.monotonic() - started, 3)})
            say(f"run {run + 1}/{args.repeat} (seed {seed + run}): {entry.name}/{cell.id}: {result.status} after "
                f"{result.examples} examples")
            if result.failure is None:
                continue
            recipe = result.failure.recipe or {}
            seen = examples.setdefault((entry.name, cell.id, recipe_json(recipe)), {
                "op": entry.name, "cell": cell.id, "recipe": recipe, "failed": 0, "passed": 0,
                "oracle": result.failure.oracle, "message": result.failure.message, "entry": entry, "cell_obj": cell})
            seen["failed"] += 1
            # Hypothesis re-ran the example while shrinking and saw it pass
            seen["passed"] += isinstance(result.failure.__cause__, hypothesis.errors.FlakyFailure)
        runs.append({"run": run + 1, "seed": seed + run, "results": results})

    findings = []
    for seen in examples.values():
        if "seed" in seen["recipe"]:  # the refusal table has no recipe to replay; its runs count already
            for _ in range(args.replays):
                outcome = replay(seen["entry"], implementations[seen["op"]], seen["cell_obj"], device, seen["recipe"])
                seen["failed" if outcome.failure else "passed"] += 1
            command = reproduction(seen["op"], seen["cell"], args.device, seen["recipe"], args.impl)
        else:
            command = f"tools/certify-cells --op {seen['op']} --cell {seen['cell']} --device {args.device}" + \
                (f" --impl {args.impl}" if args.impl else "")
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
                          "impl": args.impl, "device": args.device, "runs": runs, "findings": findings,
                          "verdict": verdict}, indent=2))
    if args.junit:
        cases = []
        for entry, cell in pairs:
            mine = [f for f in findings if (f["op"], f["cell"]) == (entry.name, cell.id)]
            failure = None if not mine else (
                f"{mine[0]['verdict']}: {mine[0]['oracle']}: {mine[0]['message']}",
                "\n".join(f"{f['verdict']}: failed {f['failed']} of {f['failed'] + f['passed']} times\n"
                          f"reproduce: {f['reproduce']}" for f in mine))
            seconds = sum(r["seconds"] for run in runs for r in run["results"]
                          if (r["op"], r["cell"]) == (entry.name, cell.id))
            cases.append(junit.testcase(f"nightly.{entry.name}", cell.id, seconds, failure))
        junit.write(args.junit, [junit.testsuite(f"nightly {args.device} seed {seed}", cases)])
    return 1 if findings else 0


if __name__ == "__main__":
    run_main(main)
