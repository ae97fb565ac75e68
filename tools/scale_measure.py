"""tools/scale-measure: wall time of certifying every op on 1 GPU against N GPUs (``--gpus``), and proof
that the results do not depend on how many GPUs ran them.

Each run is ``tools/certify-cells --device cuda --gpus G -n N --shard 1/1 --report ...`` (``-n``: workers
on each GPU, as a certification on one GPU is run): the whole run as one shard, so that a measurement
writes no certificate.  It writes a markdown table (wall time, cells, speed-up over the first run) and
exits 1 when any cell's record differs between the runs (a merge that depends on completion order, or a
cell that passes on one GPU count only).

A warm-up run (on the most GPUs asked for, untimed) goes first: it compiles every kernel the timed runs
will meet into the Triton cache the runs share, with the same seeds and so the same draws.  Without it
the first timed run pays every compile and the later ones reuse them: the first measurement (4.8x on
2 GPUs) compared a cold cache against a warm one.
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import subprocess
import sys
import time

from tools.cli import ArgumentParser, UsageError, check_cell_timeout, check_workers, run_tool

REPO = pathlib.Path(__file__).resolve().parent.parent


def parse_args(argv):
    parser = ArgumentParser(prog="tools/scale-measure",
                            description="Time certify-cells over every op on 1 GPU against N, and compare the results.",
                            epilog="Example: tools/scale-measure --gpus 1,2 --max-examples 10 --out $OUT/scale.md")
    parser.add_argument("--gpus", default="1,2", metavar="G,G,...", help="GPU counts to time, in order (default 1,2)")
    parser.add_argument("--max-examples", type=int, default=10, metavar="N", help="draws per cell (default 10)")
    parser.add_argument("-n", "--workers", type=int, default=1, metavar="N",
                        help="worker processes on each GPU (certify-cells -n; default 1)")
    parser.add_argument("--backend", metavar="NAME", help="only the kernels of this backend (certify-cells --backend)")
    parser.add_argument("--cell-timeout", type=float, metavar="SECONDS", help="a cell's limit (certify-cells')")
    parser.add_argument("--op", action="append", default=[], metavar="NAME", help="only this op (repeatable)")
    parser.add_argument("--out", required=True, metavar="PATH", help="the markdown table to write")
    parser.add_argument("--warm-up", action=argparse.BooleanOptionalAction, default=True,
                        help="first an untimed run that fills the kernel cache the timed runs share (default on)")
    args = parser.parse_args(argv)
    try:
        args.gpus = [int(g) for g in args.gpus.split(",")]
    except ValueError:
        raise UsageError(f"--gpus {args.gpus!r}: expected counts like 1,2") from None
    check_workers(args.workers)
    check_cell_timeout(args.cell_timeout)
    return args


def certify(gpus: int, args, report: pathlib.Path) -> tuple[float, int]:
    command = [sys.executable, str(REPO / "tools" / "certify-cells"), "--device", "cuda", "--gpus", str(gpus),
               "-n", str(args.workers), "--shard", "1/1", "--max-examples", str(args.max_examples),
               "--report", str(report)]
    command += ["--backend", args.backend] if args.backend else []
    command += ["--cell-timeout", f"{args.cell_timeout:g}"] if args.cell_timeout is not None else []
    command += [word for name in args.op for word in ("--op", name)]
    print("$ " + " ".join(command[1:]), flush=True)
    started = time.monotonic()
    code = subprocess.run(command, cwd=REPO).returncode
    if code == 2 or not report.exists():
        raise UsageError(f"certify-cells --gpus {gpus} could not run (exit {code})")
    return time.monotonic() - started, code


def main(argv=None) -> int:
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    runs = []
    if args.warm_up:
        warm_up = out.with_name(f"{out.stem}_warm_up.json")
        certify(max(args.gpus), args, warm_up)
        runs.append(("warm-up", 0.0, None, json.loads(warm_up.read_text())))
    for gpus in args.gpus:
        report_path = out.with_name(f"{out.stem}_gpus{gpus}.json")
        seconds, code = certify(gpus, args, report_path)
        runs.append((gpus, seconds, code, json.loads(report_path.read_text())))
    # a cell's record without what was measured of the machine (its wall time, its peak GPU memory): what may differ
    # keyed by the kernel too: an op's kernels share their cells' ids
    def records(report):
        return {(r["op"], r.get("backend"), r["cell"]): {k: v for k, v in r.items()
                                                         if k not in ("seconds", "gpu_peak_bytes")}
                for r in report["results"]}

    def named(key):
        op, backend, cell = key
        return f"{op}[{backend}]/{cell}" if backend else f"{op}/{cell}"

    def differing(reports):
        first, *others = [records(report) for report in reports]
        return sorted((key for key in first if any(other.get(key) != first[key] for other in others)), key=named)

    timed = [run for run in runs if run[0] != "warm-up"]
    across_gpus = differing([report for _, _, _, report in timed])
    # the warm-up is the same run on a cold kernel cache: a record that differs there is a finding too, but
    # not one about GPU counts
    after_warm_up = differing([runs[0][3], timed[0][3]]) if runs[0][0] == "warm-up" else []
    first = timed[0][1]
    lines = [f"# Certification wall time against GPU count ({runs[0][3]['device']}, {runs[0][3]['arch']})", "",
             f"{', '.join(args.op) if args.op else 'Every op'}"
             + (f" ({args.backend} kernels)" if args.backend else "") + f", `--max-examples {args.max_examples}`, "
             f"{args.workers} worker{'s' if args.workers > 1 else ''} per GPU "
             f"(`tools/certify-cells --device cuda --gpus G -n {args.workers} --shard 1/1`), "
             + (f"after an untimed warm-up run on {max(args.gpus)} GPUs that filled the shared kernel cache; "
                if args.warm_up else "no warm-up run (what Triton's cache does not hold yet, a cold cache or one "
                "`tools/compile-ahead` filled, compiles in the first run); ") + "measured "
             f"{datetime.date.today().isoformat()} with `tools/scale-measure`.", "",
             "| GPUs | wall time (s) | cells | certified | speed-up |", "|---:|---:|---:|---:|---:|"]
    for gpus, seconds, code, report in timed:
        certified = sum(r["status"] == "certified" for r in report["results"])
        lines.append(f"| {gpus} | {seconds:.1f} | {len(report['results'])} | {certified} | {first / seconds:.2f}x |")
    lines += ["", "Per-cell records identical across GPU counts: " +
              ("yes" if not across_gpus else "NO: " + ", ".join(named(key) for key in across_gpus))]
    if after_warm_up:
        lines.append("Records of the warm-up run (cold kernel cache) that differ from the timed runs': "
                     + ", ".join(named(key) for key in after_warm_up))
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if across_gpus or after_warm_up else 0


if __name__ == "__main__":
    run_tool(main)
