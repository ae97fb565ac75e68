"""The table users pick kernels by: op x implementation, the verdict of every oracle, the worst error next
to the stock op's, how deep and where it was judged, and time and share of copy bandwidth next to ours.

Read from files the tools wrote: ``tools/certify-cells --report`` run reports (one per implementation; the
catalog's own run reads as "ours") and ``tools/bench --out`` tables (an ``--impl`` row is labelled by its
``MODULE:ATTR``).  An oracle's entry aggregates the cells judged: ``pass``, ``FAIL n/m`` (failed in n of
the m cells that judged it), ``n/a`` (not applicable anywhere) or ``-`` (not asked).
"""
from __future__ import annotations

import dataclasses
import html
import json
import pathlib
import re

from oracles.failures import ORACLES

OURS = "ours"


@dataclasses.dataclass
class Row:
    op: str
    implementation: str
    verdicts: dict          # oracle -> its aggregate text
    kernel_error_ulp: float | None
    stock_error_ulp: float | None
    cells: int
    bench: str = ""         # "time us (share of copy)" of the op's first bench case, an adapter's glue apart
    judged: str = ""        # "220 draws a cell; NVIDIA H200": the run's depth and device, as its report says


def _aggregate(results: list[dict], oracle: str) -> str:
    verdicts = [r.get("verdicts", {}).get(oracle, {}).get("verdict") for r in results]
    judged = [v for v in verdicts if v in ("pass", "fail")]
    if not judged:
        return "n/a" if "not applicable" in verdicts else "-"
    failed = judged.count("fail")
    return "pass" if not failed else f"FAIL {failed}/{len(judged)}"


def _worst(results: list[dict], key: str) -> float | None:
    numbers = [float(r[key]) for r in results if key in r and r.get("examples")]
    return max(numbers) if numbers else None


def _judged(run: dict) -> str:
    """How deep and where a run judged: verdicts of 14 draws and of 220 read alike otherwise."""
    depth = f"{run['max_examples']} draws a cell" if isinstance(run.get("max_examples"), int) else ""
    return "; ".join(part for part in (depth, run.get("device") or "") if part)


def rows_of(report_paths) -> list[Row]:
    """One row per (op, implementation) of the run reports."""
    rows = []
    for path in report_paths:
        run = json.loads(pathlib.Path(path).read_text())
        by_kernel: dict[tuple[str, str], list[dict]] = {}
        for result in run["results"]:
            implementation = run.get("impl") or (f"{OURS}, {result['backend']}" if result.get("backend") else OURS)
            by_kernel.setdefault((result["op"], implementation), []).append(result)
        for (op, implementation), results in by_kernel.items():
            rows.append(Row(op, implementation, {o: _aggregate(results, o) for o in ORACLES},
                            _worst(results, "worst_kernel_error_ulp"), _worst(results, "worst_stock_error_ulp"),
                            len(results), judged=_judged(run)))
    return sorted(rows, key=lambda row: (row.op, not row.implementation.startswith(OURS), row.implementation))


def attach_bench(rows: list[Row], tables: list[tuple[str | None, list[dict]]]) -> None:
    """Fill each row's ``bench`` from the bench tables (each its device, or None, and ``tools.bench.read_table``'s
    rows): the op's first case, ours labelled ``kernel`` (of the row's backend where the table names one); a
    third party's own call, with its adapter's glue named apart where the table timed it apart.  The device
    is named, so that times taken on two machines are never read as one comparison."""
    for row in rows:
        op = row.op
        ours = row.implementation.startswith(OURS)
        label = "kernel" if ours else row.implementation
        backend = row.implementation.partition(", ")[2] if ours else ""
        for device, table in tables:
            # a run that judged MODULE (an op and its siblings) names the module; its bench rows name MODULE:ATTR
            found = [r for r in table if r["op"].split(" [")[0] == op and label in (r["impl"], r["impl"].split(":")[0])
                     and (not backend or _backend(r["op"]) in ("", backend))]
            if found:
                first = found[0]
                row.bench = f"{first['time (us)']:.1f} us ({first['% of copy']:.0f}% of copy; {first['case']}"
                row.bench += f"; {device})" if device else ")"
                if first.get("adapter glue (us)") is not None:
                    row.bench += f"; adapter glue {first['adapter glue (us)']:.1f} us"
                break


def _backend(bench_op: str) -> str:
    """``triton`` of a bench table's ``rms_norm_gated [triton]``; empty where it names none."""
    return bench_op.partition(" [")[2].rstrip("]")


def bench_device(text: str) -> str | None:
    """The device a ``tools/bench --out`` table names in its first line (``... on NVIDIA H100 80GB HBM3,
    2026-12-06 02:33 UTC, ...``), None where it names none."""
    match = re.search(r"` on (.+?), \d{4}-\d\d-\d\d ", text.partition("\n")[0])
    return match.group(1) if match else None


def table(report_paths, bench_paths) -> list[Row]:
    """The rows of the run reports, each with its bench figure from the ``tools/bench --out`` tables;
    ValueError naming the file that is not a bench table."""
    from tools.bench import read_table

    rows = rows_of(report_paths)
    tables = []
    for path in bench_paths:
        text = pathlib.Path(path).read_text()
        try:
            tables.append((bench_device(text), read_table(text)[1]))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
    attach_bench(rows, tables)
    return rows


def _error(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


HEAD = ["op", "implementation", *ORACLES, "worst error on passing examples (ULP)", "stock op's (ULP)", "judged",
        "time"]


def _cells(row: Row, implementation: str) -> list[str]:
    """A row's cells in ``HEAD``'s order, the implementation as the format shows it."""
    return [row.op, implementation, *(row.verdicts[o] for o in ORACLES), _error(row.kernel_error_ulp),
            _error(row.stock_error_ulp), row.judged, row.bench]


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for row in rows:
        lines.append("| " + " | ".join(_cells(row, f"`{row.implementation}`")) + " |")
    return "\n".join(lines)


def html_table(rows: list[Row]) -> str:
    body = []
    for row in rows:
        cells = _cells(row, row.implementation)
        body.append("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells) + "</tr>")
    return ('<table class="list"><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in HEAD) + "</tr>"
            + "".join(body) + "</table>")
