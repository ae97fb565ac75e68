"""tools/compile-receipts: every launch plan of every Triton kernel compiled for every GPU target the
catalog serves, on a machine with no GPU, and checked against the committed compile receipts.

The plans a kernel launches are the ones its host code chooses: each catalog entry's bench cases (the
production shapes; with ``--variants`` also its ``bench_variants`` sweep around the default plan), called
with the launch replaced by a recorder, on an H200's SM count, their inputs made on the meta device (shapes,
no values).  Each distinct launch (kernel, argument types and alignments, constexprs, warps, stages) is one
plan; it is compiled by Triton's own launch path with a stand-in driver whose target is
``GPUTarget("cuda", cc, 32)``, and ptxas's report gives the receipt:
registers, spill bytes, shared memory and the cubin's sha256.  Receipts live in
``docs/receipts/<arch>.json``; an arch with no device here is "compiled, not run", never certified.

The gate (default) fails, naming kernel, plan and arch, when a plan does not compile, spills more than
its receipt (or spills at all, if new), or needs more shared memory than the arch has; and when the
receipts are stale (a plan added, removed, or compiled to another cubin by the receipts' toolchain):
``--write`` records them anew.  Another Triton or ptxas than the receipts' is checked for spills and
shared memory only (its cubins differ by construction).

Exit status: 0 pass; 1 a finding; 2 a usage error (one line).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import os
import pathlib
import re
import sys
import time
from typing import Iterable, Iterator

from tools.cli import ArgumentParser, UsageError

REPO = pathlib.Path(__file__).resolve().parent.parent
RECEIPTS = REPO / "docs" / "receipts"
# target name -> compute capability; the catalog's sm90..sm107 archs
TARGETS = {"sm_90a": 90, "sm_100a": 100, "sm_103a": 103, "sm_107a": 107}
# the most shared memory one block may take (the opt-in maximum, bytes): Hopper and Blackwell, 227 KiB
SHARED_LIMIT = {"sm_90a": 232448, "sm_100a": 232448, "sm_103a": 232448, "sm_107a": 232448}
H200_SMS = 132


@dataclasses.dataclass
class Launch:
    kernel: object   # the JITFunction
    args: tuple
    kwargs: dict
    origin: str      # which op and bench case reached it


def kernel_name(kernel) -> str:
    return f"{kernel.fn.__module__}.{kernel.fn.__name__}"


@contextlib.contextmanager
def planning_for_h200():
    """While open, every kernel module's host code plans its launches for an H200's SM count, not this
    machine's (the interpreter's few): the modules of the catalog that took ``sm_count`` from
    ``ops.triton_backend``."""
    import ops.catalog  # noqa: F401 - imports every kernel module
    import ops.triton_backend as backend

    planned = [module for name, module in list(sys.modules.items())
               if name.startswith("ops.") and getattr(module, "sm_count", None) is backend.sm_count]
    for module in planned:
        module.sm_count = lambda device: H200_SMS
    try:
        yield
    finally:
        for module in planned:
            module.sm_count = backend.sm_count


def error_in_one_line(error: Exception) -> str:
    """``Type: the first line of its message`` (at most 200 characters of it)."""
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"


def triton_entries(ops: Iterable[str] | None = None) -> list:
    """The catalog's Triton kernels of ``ops`` (default: every op that has one)."""
    from ops.catalog import entries, kernels

    return [entry for name in (ops or entries()) for entry in kernels(name) if entry.backend == "triton"]


def recorded_launches(ops: list[str] | None = None, variants: bool = False,
                      failures: list[str] | None = None) -> Iterator[list[Launch]]:
    """The kernel launches each bench case of ``ops`` (default: every op) makes (with ``variants``, its
    ``bench_variants`` plan sweep too), recorded, not run: one list per case, whose inputs are freed
    before the next is made.  A case whose inputs or host code fail on shapes alone raises, or, given
    ``failures``, is a line there naming op and case, and the next case goes on."""
    import torch
    import triton.runtime.jit as jit

    with planning_for_h200():
        for entry in triton_entries(ops):
            module = importlib.import_module(entry.kernel.__module__)
            for case in entry.bench:
                print(f"compile-receipts: {entry.name}: {case.label}", file=sys.stderr, flush=True)
                recorded: list[Launch] = []
                real_run = jit.JITFunction.run
                try:
                    with _generators_on_the_cpu(torch):
                        inputs = case.make(torch.device("meta"))
                    calls = {"default": entry.kernel}
                    if variants and hasattr(module, "bench_variants"):
                        calls.update(module.bench_variants(**inputs))
                    for label, call in calls.items():
                        def record(self, *args, grid, warmup, origin=f"{entry.name}: {case.label}: {label}", **kwargs):
                            recorded.append(Launch(self, args, dict(kwargs), origin))
                        jit.JITFunction.run = record
                        try:
                            call(**inputs)
                        finally:
                            jit.JITFunction.run = real_run
                except Exception as error:  # noqa: BLE001 - the case's own code, whatever it raised
                    if failures is None:
                        raise
                    failures.append(f"{entry.name} [{case.label}]: its bench case failed on the meta device (shapes, "
                                    f"no values): {error_in_one_line(error)}")
                    continue
                del inputs
                yield recorded


@contextlib.contextmanager
def _generators_on_the_cpu(torch):
    """While a bench case makes its inputs on the ``meta`` device: shapes, strides, dtypes and a data pointer of 0
    (every launch then specialises as on an aligned allocation), no values.  What Triton specialises a launch on
    and the plan its host code picks never read values, and making them was most of this tool's CPU (12 GB of
    paged KV caches, NVFP4 weights quantized by the reference; docs/ci.md, 2026-12-06i).  Host code that reads
    a value raises here (a meta tensor has none): a finding, never another plan.  The cases' seeded
    ``torch.Generator(device=...)`` has no meta kind: it is made on the CPU."""
    made = torch.Generator

    class CpuGenerator(made):
        def __new__(cls, device=None):
            return made("cpu")

    torch.Generator = CpuGenerator
    try:
        yield
    finally:
        torch.Generator = made


class TargetDriver:
    """Triton's active driver, standing in for a GPU of ``capability``: Triton's own launch path then
    specialises and compiles a recorded launch for it (``warmup``), and runs nothing."""

    def __init__(self, capability: int):
        from triton.backends.compiler import GPUTarget
        self.target = GPUTarget("cuda", capability, 32)
        self.capability = capability

    def get_current_device(self):
        return self.capability    # one compile cache per target

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target


PTXAS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads.*?Used (\d+) registers", re.S)


def plan_label(launch: Launch, compiled) -> str:
    """The plan: its constexprs, warps, stages and register cap (where it has one) in words, and a digest of
    the specialised signature.  Plans that differ in their cap alone are receipts apart: a capped plan's
    spills are its own."""
    names = launch.kernel.arg_names
    constexprs = {".".join([names[key[0]], *map(str, key[1:])]): value for key, value in compiled.src.constants.items()}
    metadata = compiled.metadata
    words = ",".join(f"{key}={value}" for key, value in sorted(constexprs.items()))
    digest = hashlib.sha256(repr((sorted(map(str, compiled.src.signature.items())),
                                  sorted(map(str, compiled.src.attrs.items())))).encode()).hexdigest()[:10]
    cap = f" maxnreg={metadata.maxnreg}" if getattr(metadata, "maxnreg", None) else ""
    return f"{words} warps={metadata.num_warps} stages={metadata.num_stages}{cap} sig={digest}"


def compile_launch(launch: Launch, target: str, memo: dict | None = None) -> tuple[str, dict]:
    """(plan label, receipt) of ``launch`` compiled for ``target``; raises what the compiler raised.
    A launch Triton has compiled already in this process (its own cache, per target) takes the receipt
    ``memo`` kept for it: ptxas did not run again."""
    from triton.runtime import driver

    memo = {} if memo is None else memo
    # left active: this process runs no kernel (and with no GPU Triton has no driver to go back to)
    driver.set_active(TargetDriver(TARGETS[target]))
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        compiled = launch.kernel.run(*launch.args, grid=(1,), warmup=True, **launch.kwargs)
    if (target, compiled.hash) in memo:
        return memo[target, compiled.hash]
    report = PTXAS.search(log.getvalue())
    if report is None:
        raise RuntimeError(f"no ptxas report for {kernel_name(launch.kernel)} on {target}")
    spill_stores, spill_loads, registers = map(int, report.groups())
    memo[target, compiled.hash] = plan_label(launch, compiled), {
        "registers": registers, "spill_bytes": spill_stores + spill_loads, "shared_bytes": compiled.metadata.shared,
        "cubin_sha256": hashlib.sha256(compiled.asm["cubin"]).hexdigest(), "reached_by": launch.origin}
    return memo[target, compiled.hash]


def toolchain() -> dict:
    import triton
    from triton.backends.nvidia.compiler import get_ptxas
    return {"triton": triton.__version__,
            "ptxas": {target: get_ptxas(capability).version for target, capability in TARGETS.items()}}


def compile_all(targets: list[str], ops: list[str] | None = None, variants: bool = False) -> tuple[dict, list[str]]:
    """{target: {kernel: {plan: receipt}}} and the failures, each naming kernel, plan and target (or the op and
    bench case whose launches could not be recorded)."""
    receipts: dict = {target: {} for target in targets}
    failures: list[str] = []
    seen: set = set()
    memo: dict = {}
    for launch in (launch for case in recorded_launches(ops, variants, failures) for launch in case):
        for target in targets:
            name = kernel_name(launch.kernel)
            try:
                plan, receipt = compile_launch(launch, target, memo)
            except Exception as error:  # noqa: BLE001 - any failure to compile is the finding
                failures.append(f"{name} [{launch.origin}] does not compile for {target}: {error_in_one_line(error)}")
                continue
            if (target, name, plan) not in seen:
                seen.add((target, name, plan))
                receipts[target].setdefault(name, {})[plan] = receipt
    return receipts, failures


def judge(receipts: dict, committed: dict, same_toolchain: bool) -> list[str]:
    """The findings of ``receipts`` against the committed ones (per target)."""
    findings = []
    for target, kernels in receipts.items():
        old_kernels = committed.get(target, {}).get("kernels", {})
        for name, plans in kernels.items():
            for plan, receipt in plans.items():
                where = f"{name} [{plan}] on {target}"
                old = old_kernels.get(name, {}).get(plan)
                if receipt["shared_bytes"] > SHARED_LIMIT[target]:
                    findings.append(f"{where}: {receipt['shared_bytes']} bytes of shared memory, above the "
                                    f"{SHARED_LIMIT[target]} a block may take")
                allowed = old["spill_bytes"] if old else 0
                if receipt["spill_bytes"] > allowed:
                    findings.append(f"{where}: spills {receipt['spill_bytes']} bytes, its receipt {allowed} "
                                    f"({receipt['registers']} registers)")
                if same_toolchain and old is None:
                    findings.append(f"{where}: a plan with no receipt (tools/compile-receipts --write)")
                elif same_toolchain and old["cubin_sha256"] != receipt["cubin_sha256"]:
                    findings.append(f"{where}: compiles to another cubin than its receipt "
                                    f"({old['registers']} -> {receipt['registers']} registers; tools/compile-receipts --write)")
        if same_toolchain:
            for name, plans in old_kernels.items():
                for plan in plans:
                    if plan not in kernels.get(name, {}):
                        findings.append(f"{name} [{plan}] on {target}: a receipt no launch reaches any more "
                                        f"(tools/compile-receipts --write)")
    return findings


def receipt_file(target: str) -> pathlib.Path:
    return RECEIPTS / f"{target}.json"


def main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/compile-receipts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS, key=TARGETS.get),
                        help="only this target (repeatable; default: all four)")
    parser.add_argument("--op", action="append", metavar="NAME", help="only this op's kernels (repeatable; checks "
                        "only their receipts)")
    parser.add_argument("--variants", action="store_true",
                        help="also the plans tools/bench --variants sweeps (several times the compiles; not in "
                             "the receipts, which hold the plans the kernels choose)")
    parser.add_argument("--write", action="store_true", help="record the receipts in docs/receipts/ instead of checking")
    parser.add_argument("--json", action="store_true", help="print the receipts as JSON")
    args = parser.parse_args(argv)
    targets = args.target or sorted(TARGETS, key=TARGETS.get)
    committed = {}
    for target in targets:
        path = receipt_file(target)
        if path.exists():
            try:
                committed[target] = json.loads(path.read_text())
                committed[target]["kernels"]
            except (ValueError, KeyError, TypeError):
                raise UsageError(f"{path} is not a receipts file (tools/compile-receipts --write rewrites it)") from None
    started = time.monotonic()
    tools = toolchain()
    if (args.op or args.variants) and args.write:
        raise UsageError("--write records the plans every op chooses: leave out --op and --variants")
    receipts, failures = compile_all(targets, args.op, args.variants)
    plans = sum(len(p) for kernels in receipts.values() for p in kernels.values())
    print(f"compile-receipts: {plans} (kernel, plan, target) compiled in {time.monotonic() - started:.0f} s "
          f"(Triton {tools['triton']})", file=sys.stderr)
    if args.json:
        print(json.dumps(receipts, indent=1, sort_keys=True))
    if args.write:
        RECEIPTS.mkdir(parents=True, exist_ok=True)
        for target in targets:
            body = {"target": target, "status": "compiled, not run" if target != "sm_90a" else "compiled",
                    "toolchain": {"triton": tools["triton"], "ptxas": tools["ptxas"][target]},
                    "kernels": receipts[target]}
            receipt_file(target).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        for failure in failures:
            print(f"FAIL {failure}")
        return 1 if failures else 0
    findings = list(failures)
    for target in targets:
        old = committed.get(target)
        same = bool(old) and old["toolchain"] == {"triton": tools["triton"], "ptxas": tools["ptxas"][target]}
        if not old:
            findings.append(f"{receipt_file(target).relative_to(REPO)} is missing (tools/compile-receipts --write)")
        if args.op and old:   # only the chosen ops' kernels are compiled: judge only theirs
            old = {**old, "kernels": {name: plans for name, plans in old["kernels"].items() if name in receipts[target]}}
        findings += judge({target: receipts[target]}, {target: old or {}}, same)
    for finding in findings:
        print(f"FAIL {finding}")
    for target in targets:
        kernels = receipts[target]
        status = "compiled, not run" if target != "sm_90a" else "compiled (certified by its sm90 certificates)"
        print(f"{target}: {sum(map(len, kernels.values()))} plans of {len(kernels)} kernels {status}")
    return 1 if findings else 0


def prepare_environment() -> None:
    """The GPU versions of the kernels, compiled afresh each time (ptxas's report is the receipt): set
    before ``ops`` or ``triton`` is imported."""
    os.environ["TRITON_INTERPRET"] = "0"
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    # no line info: it names the source files by their absolute path, so every checkout compiled to
    # another cubin digest (ptxas makes the same code without it)
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
