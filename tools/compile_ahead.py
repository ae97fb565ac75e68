"""tools/compile-ahead: the Triton compiles a certification will make, recorded on a CPU and compiled on every core of
the GPU machine into Triton's cache before the cells start (issue 26, ``docs/compiles.md``'s first lever).

On a fresh GPU machine most of a certification is Triton compiling one kernel per specialisation key, one
at a time in each worker (six ops at 100 draws: 4.1 examples a second cold, 10.4 warm).  The keys follow
from the draws, and the draws from the seed, so they can be known before the run:

- ``record`` (here, no GPU): for each cell, its corners and ``max_examples`` Hypothesis draws as
  certification draws them on a GPU (``oracles/draws.py``, the GPU's size caps), inputs built on the CPU,
  and the calls the battery makes on each (parity and determinism, batch invariance, write guards,
  stateful properties — the oracles' own code).  Each launch goes through Triton's own ``JITFunction.run``
  with ``warmup`` under a stand-in driver for the target, and its ``jit_cache_hook`` keeps the
  specialisation data Triton would compile (the same data ``JITFunction.preload`` takes) and stops it there:
  nothing compiles, nothing launches.  Outputs stay unwritten, so the oracles' findings mean nothing and are
  dropped; the launches made before them are what is kept.  Host code plans for 132 SMs (H100 and H200).
- ``compile`` (on the GPU machine): ``JITFunction.preload`` of each record, in ``jobs`` processes, into
  Triton's cache (``TRITON_CACHE_DIR``, as the run that follows uses it).  With no GPU it compiles for a
  named target through the same stand-in driver (how the tests check it).

It cannot change a verdict: a record that is wrong or missing only leaves a compile to the run, as before.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import json
import os
import shlex
import sys
import time

from tools.cli import ArgumentParser, UsageError
from tools.compile_receipts import TARGETS, TargetDriver, error_in_one_line, planning_for_h200, triton_entries

FORMAT = 1


def _kernel_of(reference: str):
    """The JITFunction ``module:name`` names."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


@contextlib.contextmanager
def _recording(target: str, into: dict):
    """While open, a Triton launch records its specialisation data in ``into`` (keyed by kernel and data) and
    neither compiles nor runs."""
    import triton.runtime.jit as jit
    from triton import knobs
    from triton.runtime import driver

    real_run, real_hook, real_driver = jit.JITFunction.run, knobs.runtime.jit_cache_hook, driver._active

    def hook(*, fn, compile, **_):
        function = fn.jit_function
        into.setdefault((f"{function.fn.__module__}:{function.fn.__name__}", compile["specialization_data"]), None)
        return True   # Triton's hook protocol: handled, do not compile

    def run(self, *args, grid, warmup, **kwargs):
        return real_run(self, *args, grid=grid, warmup=True, **kwargs)

    driver.set_active(TargetDriver(TARGETS[target]))
    knobs.runtime.jit_cache_hook, jit.JITFunction.run = hook, run
    try:
        yield
    finally:
        knobs.runtime.jit_cache_hook, jit.JITFunction.run = real_hook, real_run
        driver._active = real_driver   # not reset_active(): with no GPU there is no driver to go back to


def battery_calls(entry, impl, kwargs: dict, oracle=lambda name: None) -> None:
    """The calls the battery makes on one example, with the oracles' own code, ``oracle(name)`` told before
    each oracle's calls; their comparisons of unwritten outputs are ignored (an implementation's raise ends
    that oracle's calls, as it would)."""
    from oracles.batch_invariance import check_batch_invariance
    from oracles.determinism import run_on_copies
    from oracles.stateful import check_properties
    from oracles.write_guards import check_write_guards

    fn = impl[entry.name]
    in_place = tuple(name for name in entry.in_place if kwargs[name] is not None)
    oracle("parity")   # and determinism's second call: the same inputs, copied
    ran = run_on_copies(fn, kwargs, in_place, 2)
    if isinstance(ran[0], Exception):   # refused (its own limits) or failed: nothing else is judged
        return
    calls = []
    if entry.batch_invariant:
        calls.append(("batch_invariance", lambda: check_batch_invariance(
            fn, kwargs, entry.batch_args, full=ran[0][:len(ran[0]) - len(in_place)])))
    calls.append(("write_guards", lambda: check_write_guards(fn, kwargs, in_place)))
    if entry.properties:
        calls.append(("stateful", lambda: check_properties(entry.properties, impl, kwargs)))
    for name, call in calls:
        oracle(name)
        with contextlib.suppress(Exception):   # a finding on unwritten outputs means nothing here
            call()


def record(entries, examples: dict[str, int], seed: int, target: str = "sm_90a", progress=None) -> list[tuple]:
    """``(kernel, specialisation data)`` of every distinct launch the cells of ``entries`` make at
    ``examples[op]`` draws a cell (after the corners), in the order first met."""
    import torch

    from ops import catalog
    from oracles.battery import Implementation
    from oracles.draws import cell_draws

    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    found: dict = {}
    with planning_for_h200():
        for entry in entries:
            impl = Implementation.of_kernels(entry, catalog.kernels)
            strategy = entry.strategy_module
            for cell in entry.cells:
                started, before = time.monotonic(), len(found)
                recipes = strategy.corners(cell, gpu) + cell_draws(strategy, cell, gpu, examples[entry.name], seed)
                with _recording(target, found):
                    for recipe in recipes:
                        battery_calls(entry, impl, strategy.build(recipe, cpu))
                if progress:
                    progress(f"{entry.name}/{cell.id}: {len(recipes)} examples, {len(found) - before} new keys "
                             f"in {time.monotonic() - started:.0f} s")
    return list(found)


def write_records(path, records: list[tuple], target: str, command: str) -> None:
    import triton

    with open(path, "w") as file:
        file.write(json.dumps({"format": FORMAT, "target": target, "triton": triton.__version__,
                               "command": command, "keys": len(records)}) + "\n")
        for kernel, data in records:
            file.write(json.dumps({"kernel": kernel, "data": data}) + "\n")


class RecordsError(ValueError):
    """A records file that cannot be used: its line and why."""


def read_records(path) -> tuple[dict, list[tuple]]:
    """(header, records) of a file ``write_records`` wrote; RecordsError names the first line that is not."""
    try:
        lines = open(path).read().splitlines()
    except OSError as error:
        raise RecordsError(f"{path}: cannot read it ({error.strerror})") from error
    try:
        header = json.loads(lines[0]) if lines else None
        records = [(row["kernel"], row["data"]) for row in map(json.loads, lines[1:])]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise RecordsError(f"{path}: not a records file of tools/compile-ahead ({error})") from error
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("target") not in TARGETS:
        raise RecordsError(f"{path}: its first line is not a compile-ahead header of format {FORMAT}")
    if header.get("keys") != len(records):
        raise RecordsError(f"{path}: the header counts {header.get('keys')} keys, the file holds {len(records)}")
    return header, records


def libraries_here(data: str) -> str:
    """``data`` with the libraries its options name at paths this machine lacks (the recording machine's
    libdevice: Triton records where its own lies) left to this Triton's defaults.  The cache key hashes a
    library's contents, not its path, so the key stays the one the run computes here."""
    specialization = json.loads(data)
    options = specialization.get("options") or {}
    libraries = options.get("extern_libs") or []
    kept = [[name, path] for name, path in libraries if os.path.exists(path)]
    if len(kept) == len(libraries):
        return data
    if kept:
        options["extern_libs"] = kept
    else:
        del options["extern_libs"]
    return json.dumps(specialization)


def _compile_share(records: list[tuple], target: str | None) -> list[str]:
    """In a pool process: each record preloaded (compiled into Triton's cache); the failures, in words."""
    from triton.runtime import driver

    if target is not None:
        driver.set_active(TargetDriver(TARGETS[target]))
    failures = []
    for kernel, data in records:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                _kernel_of(kernel).preload(libraries_here(data))
        except Exception as error:  # noqa: BLE001 - reported; the run would compile (or fail) it itself
            failures.append(f"{kernel}: {error_in_one_line(error)}")
    return failures


def compile_records(records: list[tuple], jobs: int, target: str | None) -> list[str]:
    """Every record compiled into Triton's cache over ``jobs`` processes (``target``: with no GPU, the stand-in
    driver's; None: this machine's GPU); the failures."""
    if jobs == 1:
        return _compile_share(records, target)
    shares = [records[index::jobs] for index in range(jobs)]
    # spawn: a forked child of a process that initialised CUDA cannot use it
    import multiprocessing
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return [failure for share in pool.map(_compile_share, shares, [target] * jobs) for failure in share]


def prepare_environment() -> None:
    """Triton's JIT path, not the interpreter: set before ``ops`` or ``triton`` is imported.  Nothing else:
    an environment variable Triton's cache key reads would make keys the run never asks for."""
    os.environ["TRITON_INTERPRET"] = "0"


def main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/compile-ahead", description=__doc__.split("\n\n")[0],
                            epilog="Example (here, then on the GPU machine, carrying the file): "
                                   "tools/compile-ahead record --out .compile-ahead/sm90.jsonl; "
                                   "tools/compile-ahead compile .compile-ahead/sm90.jsonl -j 16")
    steps = parser.add_subparsers(dest="step", required=True, metavar="record|compile")
    recording = steps.add_parser("record", help="the keys of a certification's cells, written to --out (no GPU needed)")
    recording.add_argument("--op", action="append", metavar="NAME", help="only this op (repeatable; default every "
                           "op with a Triton kernel)")
    recording.add_argument("--max-examples", type=int, default=100, metavar="N",
                           help="Hypothesis draws a cell after its corners, as certify-cells --max-examples "
                                "(default 100)")
    recording.add_argument("--examples", action="append", default=[], metavar="OP=N",
                           help="another number of draws for one op (repeatable)")
    recording.add_argument("--seed", type=int, default=0, help="the run's salt, as certify-cells --seed (default 0)")
    recording.add_argument("--target", choices=sorted(TARGETS, key=TARGETS.get), default="sm_90a",
                           help="the GPU the run will be on (default sm_90a)")
    recording.add_argument("--out", required=True, metavar="FILE", help="where the records go (JSON lines)")
    compiling = steps.add_parser("compile", help="compile a records file into Triton's cache")
    compiling.add_argument("records", metavar="FILE", help="what `record` wrote")
    compiling.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                           help="processes compiling at once (default: every core)")
    compiling.add_argument("--no-gpu-target", choices=sorted(TARGETS, key=TARGETS.get), metavar="TARGET",
                           help="with no GPU here, compile for this target (the file's own by default)")
    args = parser.parse_args(argv)
    if args.step == "record":
        return _record_main(args, argv)
    return _compile_main(args)


def _record_main(args, argv) -> int:
    if args.max_examples < 0:
        raise UsageError(f"--max-examples: {args.max_examples} is negative")
    from ops import catalog
    triton_ops = [name for name in catalog.entries() if any(e.backend == "triton" for e in catalog.kernels(name))]
    unknown = sorted(set(args.op or ()) - set(triton_ops))
    if unknown:
        raise UsageError(f"--op: no Triton kernel for {', '.join(unknown)} (Triton ops: {', '.join(triton_ops)})")
    chosen = args.op or triton_ops
    examples = {op: args.max_examples for op in chosen}
    for pair in args.examples:
        op, _, number = pair.partition("=")
        if op not in examples or not number.isdigit():
            raise UsageError(f"--examples {pair}: expected OP=N for an op of this run")
        examples[op] = int(number)
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        raise UsageError(f"--out: folder {folder} does not exist")
    started = time.monotonic()
    records = record(triton_entries(chosen), examples, args.seed, args.target,
                     progress=lambda line: print(f"compile-ahead: {line}", file=sys.stderr, flush=True))
    command = "tools/compile-ahead " + " ".join(map(shlex.quote, argv if argv is not None else sys.argv[1:]))
    write_records(args.out, records, args.target, command)
    print(f"compile-ahead: {len(records)} keys of {len({kernel for kernel, _ in records})} kernels in "
          f"{time.monotonic() - started:.0f} s -> {args.out}")
    return 0


def _compile_main(args) -> int:
    if args.jobs < 1:
        raise UsageError(f"--jobs: {args.jobs} is not a positive number")
    try:
        header, records = read_records(args.records)
    except RecordsError as error:
        raise UsageError(str(error)) from None
    import torch
    import triton
    if header["triton"] != triton.__version__:
        raise UsageError(f"{args.records}: recorded under Triton {header['triton']}, this machine has "
                         f"{triton.__version__}: its keys are not this Triton's (record again)")
    target = None
    if torch.cuda.is_available():
        capability = "sm_{}{}a".format(*torch.cuda.get_device_capability())
        if capability != header["target"] or args.no_gpu_target:
            raise UsageError(f"{args.records}: recorded for {header['target']}; this GPU is {capability}"
                             + (" (--no-gpu-target is for machines with no GPU)" if args.no_gpu_target else ""))
    else:
        target = args.no_gpu_target or header["target"]
    started = time.monotonic()
    failures = compile_records(records, min(args.jobs, max(len(records), 1)), target)
    for failure in failures:
        print(f"compile-ahead: did not compile: {failure}", file=sys.stderr)
    print(f"compile-ahead: {len(records) - len(failures)} of {len(records)} keys compiled or found in Triton's "
          f"cache ({os.environ.get('TRITON_CACHE_DIR') or 'its default folder'}) in {time.monotonic() - started:.0f} s"
          f" with {args.jobs} processes, for {target or header['target']}")
    return 1 if failures else 0
