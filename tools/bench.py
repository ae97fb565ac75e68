"""tools/bench: kernel vs stock op (and competitors) on the GPU, as ratios measured in one run.

For every ``BenchCase`` of the chosen ops (declared in each catalog entry, for each of an op's kernels:
``greedy_argmax [triton]``, ``rms_norm_gated [cute]``) it prints the kernel's
median time, the stock op's, their ratio, the bytes the op must move, the achieved bandwidth, and that
bandwidth as a share of a device-to-device copy measured in the same run (bytes read + written).
Times are medians of CUDA-graph replays (``triton.testing.do_bench_cudagraph``): serving engines run
decode steps as graphs, and graph replay keeps the host's launch overhead out of microsecond kernels.
A call that cannot be captured is timed eagerly (``do_bench``, L2 flushed) and marked so. ``--eager`` also
times every implementation called eagerly, as a server without graphs calls it: the device time of calls one
after another, and in the ``timed as`` column the host's own time a call (what a graph replay hides).
``--variants`` also times the launch-plan variants a kernel module offers (``bench_variants``).
A third-party implementation's time is its own call: an ``--impl`` adapter that is split in stages
(``fn.stages(**inputs) -> (call, glue)``, ``suites/thirdparty/staging.py``) is timed as its call alone on
buffers prepared beforehand, and its glue (casts, padding, index and scale layouts) apart, in the
``adapter glue (us)`` column; the ratios and bandwidths are the call's.
Never a pass/fail on time: targets are printed beside the numbers, for a person to read.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import re
import shlex
import sys
import time

from tools.cli import ArgumentParser, UsageError, run_tool

COPY_ELEMENTS = 2**30  # fp32: 4 GiB each way, far past the 60 MB L2
HOST_CALLS = 100       # calls issued back to back, unsynchronised, for the host's time a call (far below the
                       # launch queue's depth, so the host never waits for the device)


@dataclasses.dataclass
class Row:
    op: str
    case: str
    impl: str
    time_us: float
    timing: str              # "graph" or "eager"
    bytes_moved: int
    copy_gbps: float
    stock_time_us: float
    target: str
    glue_us: float | None = None   # an adapter's own code around the third party's call, timed apart

    @property
    def gbps(self) -> float:
        return self.bytes_moved / (self.time_us * 1e-6) / 1e9

    @property
    def copy_share(self) -> float:
        return self.gbps / self.copy_gbps

    @property
    def speedup_vs_stock(self) -> float:
        return self.stock_time_us / self.time_us


def median_us(fn) -> tuple[float, str]:
    """Median time of ``fn`` in microseconds, and how it was taken."""
    import torch
    import triton.testing

    fn()  # compile and autotune outside any capture
    torch.cuda.synchronize()
    try:
        with torch.cuda.stream(torch.cuda.Stream()):
            return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3, "graph"
    except Exception:  # noqa: BLE001 - not capturable: time it eagerly instead, and say so
        torch.cuda.synchronize()
        return _eager_device_us(fn), "eager"


def _eager_device_us(fn) -> float:
    """Median device time of ``fn`` called eagerly, one call after another (``do_bench``, L2 flushed)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def eager_us(fn, clock=time.perf_counter) -> tuple[float, str]:
    """Median device time of ``fn`` called eagerly, in microseconds, and how it was taken, with the host's
    own time a call: :data:`HOST_CALLS` calls issued without a sync, over their number (``clock``: seconds)."""
    import torch

    fn()  # compile and autotune first
    torch.cuda.synchronize()
    device_us = _eager_device_us(fn)
    torch.cuda.synchronize()
    started = clock()
    for _ in range(HOST_CALLS):
        fn()
    host_us = (clock() - started) / HOST_CALLS * 1e6
    torch.cuda.synchronize()
    return device_us, f"eager, host {host_us:.1f} us a call"


def copy_bandwidth_gbps(device) -> float:
    import torch
    import triton.testing

    source = torch.randn(COPY_ELEMENTS, device=device)
    target = torch.empty_like(source)
    # eagerly: captured in a graph the copy becomes a copy-engine memcpy node, which moved 2.7 TB/s on
    # the H200 where the copy kernel moves 4.2 (2026-11-29)
    seconds = triton.testing.do_bench(lambda: target.copy_(source), return_mode="median") * 1e-3
    del source, target
    return 2 * 4 * COPY_ELEMENTS / seconds / 1e9


def time_implementation(fn, kwargs: dict, timer=None) -> tuple[float, str, float | None]:
    """(time us, how it was taken, glue us or None) of ``fn`` on ``kwargs``: an adapter split in stages
    (``fn.stages``) is timed as the third party's call alone and, apart, its own glue; any other ``fn``
    as one call.  ``timer(callable) -> (us, how)``, ``median_us`` unless given."""
    timer = timer or median_us
    stages = getattr(fn, "stages", None)
    if stages is None:
        return (*timer(lambda: fn(**kwargs)), None)
    call, glue = stages(**kwargs)
    call_us, timing = timer(call)
    return call_us, timing, timer(glue)[0]


def bench_entry(entry, device, copy_gbps: float, variants: bool, case_done=lambda rows: None,
                others: dict | None = None, timer=None) -> list[Row]:
    """Rows of ``entry``'s bench cases; ``case_done(rows so far)`` after each case.  ``others``
    (label -> function) are further implementations of the contract timed beside ours (``--impl``);
    ``timer(callable) -> (us, how)`` times each call (``median_us``, CUDA graphs, unless given)."""
    import importlib

    timer = timer or median_us
    rows = []
    module = importlib.import_module(entry.kernel.__module__)
    for case in entry.bench:
        kwargs = case.make(device)
        moved = case.bytes_moved(**kwargs)
        stock_us, stock_timing = timer(lambda: entry.stock(**kwargs))
        timed = {"kernel": entry.kernel, "stock": entry.stock, **case.competitors, **(others or {})}
        if variants and hasattr(module, "bench_variants"):
            timed.update({f"variant {name}": fn for name, fn in module.bench_variants(**kwargs).items()})
        for impl, fn in timed.items():
            try:
                time_us, timing, glue_us = (stock_us, stock_timing, None) if impl == "stock" else \
                    time_implementation(fn, kwargs, timer)
            except Exception as error:  # noqa: BLE001 - another implementation may not serve this case at all
                if impl not in (others or {}):
                    raise
                print(f"  {impl}: not timed on {case.label}: {type(error).__name__}: {error}", file=sys.stderr)
                continue
            rows.append(Row(f"{entry.name} [{entry.backend}]", case.label, impl, time_us, timing, moved, copy_gbps,
                            stock_us, case.target, glue_us))
        del kwargs
        case_done(rows)
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| op | case | impl | time (us) | adapter glue (us) | timed as | vs stock | GB/s | % of copy | target |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---|"]
    for row in rows:
        glue = "" if row.glue_us is None else f"{row.glue_us:.2f}"
        lines.append(f"| {row.op} | {row.case} | {row.impl} | {row.time_us:.2f} | {glue} | {row.timing} | "
                     f"{row.speedup_vs_stock:.2f}x | "
                     f"{row.gbps:.0f} | {100 * row.copy_share:.1f}% | {row.target if row.impl == 'kernel' else ''} |")
    return "\n".join(lines)


# The columns of ``table``, read back by ``read_table`` (tools/engine/report.py plots the committed tables);
# tables written before the glue was timed apart lack ``adapter glue (us)`` (their time is the whole adapter's).
_TABLE_FIELDS = {"op": str, "case": str, "impl": str, "time (us)": float, "adapter glue (us)": float,
                 "timed as": str, "vs stock": float, "GB/s": float, "% of copy": float, "target": str}
_UNSPLIT_FIELDS = {name: kind for name, kind in _TABLE_FIELDS.items() if name != "adapter glue (us)"}


def read_table(text: str) -> tuple[float, list[dict]]:
    """What ``--out`` wrote: the copy bandwidth (GB/s) and the rows as dicts keyed by the table's headers
    (``vs stock`` as a ratio, ``% of copy`` as a percentage, ``adapter glue (us)`` None where nothing was
    timed apart).  ValueError when ``text`` is not such a table."""
    match = re.search(r"copy bandwidth (\d+(?:\.\d+)?) GB/s", text.partition("\n")[0])
    lines = [line.strip().strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    header = [h.strip() for h in lines[0]] if lines else []
    fields = next((f for f in (_TABLE_FIELDS, _UNSPLIT_FIELDS) if header == list(f)), None)
    if match is None or fields is None:
        raise ValueError("not a tools/bench table: no copy bandwidth in its first line, or other columns")
    rows = []
    for cells in lines[1:]:
        cells = [cell.strip() for cell in cells]
        if len(cells) != len(fields):
            raise ValueError(f"a row of {len(cells)} columns, not {len(fields)}: {' | '.join(cells)}")
        rows.append({name: None if name == "adapter glue (us)" and not cell else
                     kind(cell.rstrip("x%")) if kind is float else cell
                     for (name, kind), cell in zip(fields.items(), cells)})
        rows[-1].setdefault("adapter glue (us)", None)
    return float(match.group(1)), rows


def main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", action="append", default=[], metavar="NAME", help="op to bench (default: all)")
    parser.add_argument("--variants", action="store_true", help="also time the kernels' launch-plan variants")
    parser.add_argument("--eager", action="store_true",
                        help="also time every implementation called eagerly: device time and the host's time a call")
    parser.add_argument("--impl", action="append", default=[], metavar="MODULE:ATTR",
                        help="also time this implementation of the chosen op (repeatable; one --op), e.g. "
                             "suites.thirdparty.liger_rmsnorm:rms_norm_gated")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--out", metavar="PATH", help="also write the table (markdown, with its command) to PATH")
    args = parser.parse_args(argv)
    import torch

    from ops import catalog

    if not torch.cuda.is_available():
        raise UsageError("tools/bench measures GPU kernels: no CUDA device on this machine")
    registry = catalog.entries()
    unknown = [name for name in args.op if name not in registry]
    if unknown:
        raise UsageError(f"--op: no op named {', '.join(unknown)}; ops: {', '.join(registry)}")
    if args.impl and len(args.op) != 1:
        raise UsageError("--impl times implementations of one op: name it with one --op")
    others = {spec: _load(spec) for spec in args.impl}
    device = torch.device("cuda")
    copy_gbps = copy_bandwidth_gbps(device)
    print(f"device {torch.cuda.get_device_name(device)}: copy bandwidth {copy_gbps:.0f} GB/s (read + write)",
          file=sys.stderr, flush=True)
    command = "tools/bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    header = (f"`{command}` on {torch.cuda.get_device_name(device)}, "
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}; "
              f"copy bandwidth {copy_gbps:.0f} GB/s (device-to-device, read + write, same run)")
    rows = []
    for name in args.op or registry:
        for entry in catalog.kernels(name):  # every backend's kernel of the op, each on its bench cases
            def case_done(entry_rows, label=f"{name} [{entry.backend}]"):
                if args.out:  # the table so far: a run cut short by its time limit still leaves its rows
                    _write(args.out, f"{header} (incomplete: stopped in {label}, after its case "
                                     f"{entry_rows[-1].case})\n\n{table(rows + entry_rows)}\n")
            rows += bench_entry(entry, device, copy_gbps, args.variants, case_done, others)
            if args.eager:
                rows += bench_entry(entry, device, copy_gbps, args.variants, case_done, others, timer=eager_us)
            print(f"  {name} [{entry.backend}]: done", file=sys.stderr, flush=True)
    text = f"{header}\n\n{table(rows)}\n"
    if args.json:
        print(json.dumps({"header": header, "copy_gbps": copy_gbps,
                          "rows": [{**dataclasses.asdict(r), "gbps": r.gbps, "copy_share": r.copy_share,
                                    "speedup_vs_stock": r.speedup_vs_stock} for r in rows]}, indent=2))
    else:
        print(text)
    if args.out:
        _write(args.out, text)
    return 0


def _load(spec: str):
    """``MODULE:ATTR`` -> the function (usage error, one line, when it cannot be had)."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"--impl {spec!r}: expected MODULE:ATTR")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except Exception as error:  # noqa: BLE001 - any failure to load is a usage error, in one line
        raise UsageError(f"--impl {spec}: cannot load it: {type(error).__name__}: {error}") from None
    if not callable(function):
        raise UsageError(f"--impl {spec}: not callable")
    return function


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError as error:
        raise UsageError(f"--out: cannot write {path}: {error.strerror}") from None


if __name__ == "__main__":
    run_tool(main)
