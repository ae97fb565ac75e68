"""The certification report, and the JUnit XML of a certification run (``tools/certify-cells``).

``tools/certify-cells --report PATH.html`` writes one self-contained page (inline CSS and SVG; no
script, nothing fetched) with:

1. this run (first: what a person just ran): each cell's verdict, failing rows red with their oracle,
   finding, minimal recipe and reproduction line;
2. the status grid: kernel x cell x arch — certified, stale, failing, unknown (or not claimed) — read
   from every certificate file of the catalog, not only the run that writes the page, with the
   examples each cell ran; each kernel of an op has rows of its own, named ``op [backend]`` where the
   op has several kernels; a kernel the catalog leaves out on this machine (its backend's package is
   missing) is listed under the grid with its certificate's sections as *not judged here*;
3. per (op, cell, arch) record: the worst kernel error against the stock op's and the band the
   kernel is allowed (``max(2 x stock, 1 ULP)``, oracles/band.py), plotted, a band over 8 ULP flagged
   (vacuous unless declared) and a failing cell's finding in place of bars; the region its examples
   exercised drawn against the cell's bounds; kernel and stock error against each example's size;
4. the certificate sections; the roofline of every committed ``tools/bench`` table under ``docs/results/``: achieved
   bandwidth of kernel, stock op and competitors per case against the device copy measured in the
   same run (launch-plan variants are left out: they are a tuning table, not the shipped kernel).

``--report PATH`` with any other suffix writes the run's results as JSON; ``--junit PATH`` writes one
testcase per (op, cell, oracle).

The page reads without sideways scrolling at 1400 px (``suites/tools/test_report.py`` checks it in Chromium).
"""
from __future__ import annotations

import dataclasses
import datetime
import html
import json
import math
import pathlib
import sys
from typing import Sequence

from tools.engine import commands, junit, verdict_table
from tools.engine.worker import impl_paths
from tools.cli import UsageError

# ops and oracles (torch) are imported in the functions that use them: tools/certify-cells imports this
# module before it has parsed its flags.

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "results"
THIRD_PARTY = pathlib.Path(__file__).resolve().parents[2] / "docs" / "thirdparty" / "runs"
STATUS_COLOURS = {  # solid fills: the rendering test finds the grid by these pixels
    "certified": "#2e7d32",
    "stale": "#f0a000",
    "failing": "#c62828",
    "quarantined": "#6a1b9a",   # a known-bad cell the ledger keeps from running (ops/quarantine.yml)
    "below policy": "#e6a8a8",  # certified by a run that falls short of ops/certificates.py POLICY: not routed
    "unknown": "#8c8c8c",
    "not claimed": "#f4f4f4",
}
KERNEL_COLOUR, STOCK_COLOUR, BAND_COLOUR, COMPETITOR_COLOUR = "#1565c0", "#757575", "#c8e6c9", "#8e24aa"


@dataclasses.dataclass
class GridCell:
    """One (kernel, cell, arch) square of the grid."""

    op: str                  # the kernel's name: "op", or "op [backend]" for an op of several kernels
    cell: str
    why: str
    arch: str
    parity: str
    status: str              # a key of STATUS_COLOURS
    record: dict | None      # the certificate's record of the cell (a stale one too)
    section: dict | None     # its arch section (device, date, command)
    bounds: dict | None = None  # the cell's integer bounds, dimension -> (lo, hi): what ``exercised`` is drawn against


def collect_grid(kernels=None) -> list[GridCell]:
    """Every (kernel, cell, arch) of the catalog (or of ``kernels``), read from the certificate files as
    they are now; a cell the quarantine ledger holds reads quarantined whatever its certificate says
    (an entry added after the cell was certified or failed is shown at once)."""
    from ops import catalog, certificates, quarantine
    from ops.quarantine import QUARANTINED

    kernels = catalog.every_kernel() if kernels is None else kernels
    ledger = quarantine.load()
    grid = []
    for entry in kernels:
        try:
            certificate = certificates.load(entry)
        except certificates.CertificateError as error:
            raise UsageError(str(error)) from None
        digest = certificates.source_digest(entry)
        for cell in entry.cells:
            for arch in catalog.Arch:
                section = certificate["archs"].get(arch.value)
                record = None if section is None else section["cells"].get(cell.id)
                if arch not in entry.archs:
                    status = "not claimed"
                elif quarantine.lookup(ledger, entry.name, cell.id, arch):
                    status = QUARANTINED
                elif section is None or record is None:
                    status = "unknown"
                elif certificates.arch_status(entry, arch, certificate, digest) == "stale":
                    status = "stale"
                elif record["status"] == certificates.CERTIFIED and (
                        certificates.POLICY.section_problem(section, digest, arch=arch) or
                        certificates.POLICY.cell_problem(record, arch=arch)):
                    status = "below policy"
                else:
                    status = record["status"] if record["status"] in (certificates.CERTIFIED, QUARANTINED) \
                        else "failing"
                grid.append(GridCell(catalog.kernel_label(entry), cell.id, cell.why, arch.value, entry.parity.value, status,
                                     record, section, span_bounds(cell)))
    return grid


def span_bounds(cell) -> dict:
    """A cell's integer ranges, dimension -> (lo, hi) (``ops.catalog.Span``, read by shape)."""
    return {name: (bound.lo, bound.hi) for name, bound in cell.bounds.items()
            if isinstance(getattr(bound, "lo", None), int) and isinstance(getattr(bound, "hi", None), int)}


@dataclasses.dataclass
class BenchTable:
    path: str
    header: str
    copy_gbps: float
    rows: list[dict]


def bench_tables(results: pathlib.Path = RESULTS) -> tuple[list[BenchTable], list[str]]:
    """The committed ``tools/bench`` tables, and the ``bench*.md`` files that are not one (with why)."""
    from tools.bench import read_table

    tables, unreadable = [], []
    for path in sorted(results.glob("bench*.md")):
        text = path.read_text(encoding="utf-8")
        try:
            copy_gbps, rows = read_table(text)
        except ValueError as error:
            unreadable.append(f"{path.name}: {error}")
            continue
        tables.append(BenchTable(path.name, text.partition("\n")[0], copy_gbps, rows))
    return tables, unreadable


# -- rendering --------------------------------------------------------------------------------------
def _escape(value) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


CSS = """
body { font: 14px/1.4 -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px; color: #212121; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.meta { color: #616161; margin: 0 0 12px; }
table { border-collapse: separate; border-spacing: 3px; }
th { text-align: left; font-weight: 600; padding: 2px 6px; }
td { padding: 2px 6px; vertical-align: middle; }
td.status { width: 104px; height: 34px; text-align: center; color: #fff; font-size: 12px; line-height: 1.2; }
td.status small { opacity: 0.9; }
td.op { font-weight: 600; }
.legend span.swatch { display: inline-block; width: 14px; height: 14px; vertical-align: -2px; margin: 0 4px 0 14px; }
table.list { border-collapse: collapse; } table.list td, table.list th { border-bottom: 1px solid #e0e0e0; padding: 3px 8px; }
table.list td, table.list th { white-space: normal; overflow-wrap: anywhere; }
code, pre { font: 12px/1.35 Menlo, Consolas, monospace; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 2px 0; max-width: 760px; }
.note { color: #616161; font-size: 12px; }
/* no sideways scroll at 1400 px: wide tables wrap their cells, figures shrink to the page */
body { max-width: 1352px; } svg { max-width: 100%; height: auto; }
table.run, table.errors { table-layout: fixed; width: 100%; }
table.run td, table.errors td { white-space: normal; overflow-wrap: anywhere; }
table.run td.finding pre { max-width: none; }
tr.failing td { background: #fdecea; } tr.failing td.status { background: #c62828; }
.flag { color: #b71c1c; font-weight: 600; }
""" + "\n".join(f"td.s-{status.replace(' ', '-')} {{ background: {colour}; }}"
                for status, colour in STATUS_COLOURS.items()) + \
    "\ntd.s-not-claimed { color: #9e9e9e; }\n"


def _grid_html(grid: list[GridCell]) -> str:
    archs = list(dict.fromkeys(square.arch for square in grid))
    rows, seen = [], {}
    for square in grid:
        seen.setdefault((square.op, square.cell), []).append(square)
    for (op, cell), squares in seen.items():
        tds = []
        for square in squares:
            examples = f"<br><small>{_escape(square.record['examples'])} examples</small>" if square.record else ""
            tip = "" if square.section is None else \
                f"{square.section.get('device', '')}, {square.section.get('date', '')}: {square.section.get('command', '')}"
            if square.status == "stale" and square.record:
                tip = f"was {square.record['status']} on sources since changed; {tip}"
            tds.append(f'<td class="status s-{square.status.replace(" ", "-")}" title="{_escape(tip)}">'
                       f"{_escape(square.status)}{examples}</td>")
        rows.append(f'<tr><td class="op">{_escape(op)}</td><td title="{_escape(squares[0].why)}">{_escape(cell)}</td>{"".join(tds)}</tr>')
    head = "<tr><th>op</th><th>cell</th>" + "".join(f"<th>{_escape(arch)}</th>" for arch in archs) + "</tr>"
    counts = {status: sum(s.status == status for s in grid) for status in STATUS_COLOURS}
    legend = "".join(f'<span class="swatch" style="background:{colour};border:1px solid #bdbdbd"></span>'
                     f"{_escape(status)} ({counts[status]})" for status, colour in STATUS_COLOURS.items())
    return f'<p class="legend">{legend}</p><table class="grid">{head}{"".join(rows)}</table>'


def _unjudged_html(unjudged: list[dict]) -> str:
    """Kernels the catalog left out on this machine: shown, with the sections no one judged here."""
    if not unjudged:
        return ""
    rows = "".join(f'<tr><td class="op">{_escape(left_out["module"])}</td>'
                   f'<td>{_escape(", ".join(left_out["certificate_archs"]) or "none")}</td>'
                   f'<td class="wrap">{_escape(left_out["why"])}</td></tr>' for left_out in unjudged)
    return ('<p class="note">Kernels not in the catalog on this machine: their certificate sections are not '
            'judged here (neither fresh nor stale) and have no rows above.</p><table class="list"><tr><th>kernel '
            "module</th><th>certificate sections, not judged</th><th>why</th></tr>" + rows + "</table>")


def _sections_html(grid: list[GridCell]) -> str:
    """Where and how each certificate section was earned."""
    sections = {}
    for square in grid:
        if square.section is not None:
            sections.setdefault((square.op, square.arch), (square.section, square.status == "stale"))
    if not sections:
        return ('<p class="note">No certificate file holds a section yet: every claimed cell is unknown. '
                "Certify with <code>tools/certify-cells --device cuda</code> on a GPU, or "
                "<code>--device cpu</code> for the interpreter.</p>")
    rows = []
    for (op, arch), (section, stale) in sections.items():
        versions = ", ".join(f"{name} {version}" for name, version in section.get("versions", {}).items() if version)
        rows.append(f'<tr><td class="op">{_escape(op)}</td><td>{_escape(arch)}</td><td>{"stale" if stale else "fresh"}</td>'
                    f'<td>{_escape(section.get("device", ""))}</td><td>{_escape(section.get("date", ""))}</td>'
                    f'<td class="wrap">{_escape(versions)}</td><td class="wrap"><code>{_escape(section.get("command", ""))}</code></td></tr>')
    return ('<table class="list"><tr><th>op</th><th>arch</th><th>sources</th><th>device</th><th>date</th>'
            "<th>versions</th><th>command</th></tr>" + "".join(rows) + "</table>")


def error_svg(kernel: float, stock: float, allowed: float, width: int = 320) -> str:
    """Kernel and stock worst error as bars over the allowed band (shaded, its edge dashed), in ULPs."""
    finite = [v for v in (kernel, stock, allowed) if math.isfinite(v)]
    top = max(max(finite, default=1.0), 1.0) * 1.15
    scale = (width - 110) / top

    def length(value):
        return width - 110 if not math.isfinite(value) else value * scale

    kernel_colour = KERNEL_COLOUR if kernel <= allowed else STATUS_COLOURS["failing"]
    parts = [f'<svg width="{width}" height="40" role="img" '
             f'aria-label="kernel {_fmt(kernel)} ULP, stock {_fmt(stock)} ULP, allowed {_fmt(allowed)} ULP">',
             f'<rect x="0" y="0" width="{length(allowed):.1f}" height="40" fill="{BAND_COLOUR}"/>',
             f'<line x1="{length(allowed):.1f}" y1="0" x2="{length(allowed):.1f}" y2="40" stroke="{STATUS_COLOURS["certified"]}" '
             'stroke-dasharray="3,2"/>']
    for y, label, value, colour in ((4, "kernel", kernel, kernel_colour), (22, "stock", stock, STOCK_COLOUR)):
        parts.append(f'<rect x="0" y="{y}" width="{max(length(value), 1):.1f}" height="13" fill="{colour}"/>')
        parts.append(f'<text x="{max(length(value), 1) + 4:.1f}" y="{y + 11}" font-size="11" fill="#212121">'
                     f"{label} {_fmt(value)}</text>")
    parts.append(f'<text x="{width - 4}" y="37" font-size="10" text-anchor="end" fill="{STATUS_COLOURS["certified"]}">'
                 f"band {_fmt(allowed)} ULP</text></svg>")
    return "".join(parts)


WIDE_BAND_ULP = 8.0  # CONTRACTS.md: a band wider than 8 output ULP judges nothing unless the op declares why


def band_flag(allowed: float) -> str:
    """A warning where a band is so wide that passing it says little (CONTRACTS.md's vacuous band)."""
    if math.isfinite(allowed) and allowed <= WIDE_BAND_ULP:
        return ""
    return (f'<br><span class="flag">wide band: {_fmt(allowed)} ULP is over {WIDE_BAND_ULP:g} ULP, where a band '
            "judges little (vacuous unless the op declares why)</span>")


def _log_position(value: int, lo: int, hi: int, width: float) -> float:
    """Where ``value`` of ``lo..hi`` sits on a log scale ``width`` wide (sizes span decades)."""
    if hi <= lo:
        return width
    return width * math.log2(max(value - lo, 0) + 1) / math.log2(hi - lo + 1)


def exercised_svg(exercised: dict | None, bounds: dict | None, width: int = 220) -> str:
    """Per integer dimension: the cell's bounds as a track (log scale) and the region the examples reached
    filled over it; a dimension never reached is drawn empty and named."""
    if not exercised or not bounds:
        return '<span class="note">no region recorded</span>'
    label_width, track, row = 64, width - 64, 16
    parts, y = [], 0
    for name, (lo, hi) in bounds.items():
        seen = exercised.get(name)
        parts.append(f'<text x="0" y="{y + 11}" font-size="10" fill="#424242">{_escape(name)}</text>')
        parts.append(f'<rect x="{label_width}" y="{y + 3}" width="{track}" height="9" fill="#eeeeee" stroke="#bdbdbd"/>')
        if isinstance(seen, list) and len(seen) == 2 and all(isinstance(v, int) for v in seen):
            start, end = (_log_position(v, lo, hi, track) for v in seen)
            parts.append(f'<rect x="{label_width + start:.1f}" y="{y + 3}" width="{max(end - start, 2):.1f}" height="9" '
                         f'fill="{KERNEL_COLOUR}"><title>{_escape(name)} {seen[0]}..{seen[1]} of {lo}..{hi}</title></rect>')
        y += row
    label = "; ".join(f"{name} {exercised[name][0]}..{exercised[name][1]} of {lo}..{hi}" for name, (lo, hi)
                      in bounds.items() if isinstance(exercised.get(name), list) and len(exercised[name]) == 2)
    return (f'<svg width="{width}" height="{y + 2}" role="img" class="exercised" aria-label="exercised {_escape(label)}">'
            + "".join(parts) + "</svg>")


def size_svg(points: list | None, width: int = 220, height: int = 90) -> str:
    """Kernel (blue) and stock op (grey) error per example against the example's output elements (log
    scale), with the 8-ULP limit of a band dashed red where it is in view."""
    finite = [(size, float(kernel), float(stock)) for size, kernel, stock in points or ()
              if math.isfinite(float(kernel)) and math.isfinite(float(stock)) and size > 0]
    if not finite:
        return '<span class="note">no band example recorded</span>'
    left, bottom = 26, 14
    top_error = max(max(max(k, s) for _, k, s in finite), 1.0) * 1.1
    largest = max(size for size, _, _ in finite)

    def x(size):
        return left + (width - left - 4) * (math.log2(size) / math.log2(largest) if largest > 1 else 1.0)

    def y(error):
        return (height - bottom) * (1 - error / top_error)

    parts = [f'<line x1="{left}" y1="{height - bottom}" x2="{width}" y2="{height - bottom}" stroke="#9e9e9e"/>',
             f'<line x1="{left}" y1="0" x2="{left}" y2="{height - bottom}" stroke="#9e9e9e"/>',
             f'<text x="0" y="10" font-size="9" fill="#616161">{_fmt(top_error)}</text>',
             f'<text x="0" y="{height - bottom}" font-size="9" fill="#616161">0</text>',
             f'<text x="{width - 2}" y="{height - 2}" font-size="9" text-anchor="end" fill="#616161">{largest} el.</text>']
    if top_error > WIDE_BAND_ULP:
        parts.append(f'<line x1="{left}" y1="{y(WIDE_BAND_ULP):.1f}" x2="{width}" y2="{y(WIDE_BAND_ULP):.1f}" '
                     f'stroke="{STATUS_COLOURS["failing"]}" stroke-dasharray="3,2"/>')
    for size, kernel, stock in finite:
        parts.append(f'<circle cx="{x(size):.1f}" cy="{y(stock):.1f}" r="2" fill="{STOCK_COLOUR}"/>')
        parts.append(f'<circle cx="{x(size):.1f}" cy="{y(kernel):.1f}" r="2" fill="{KERNEL_COLOUR}"/>')
    return (f'<svg width="{width}" height="{height}" role="img" class="by-size" aria-label="error against size, '
            f'{len(finite)} examples">' + "".join(parts) + "</svg>")


def _errors_html(grid: list[GridCell]) -> str:
    from oracles.band import FLOOR_ULP, LEGITIMATE_FACTOR

    rows = []
    for square in grid:
        if square.record is None:
            continue
        record = square.record
        # float(): a non-finite error is recorded as the string "inf" or "nan"
        kernel, stock = float(record["worst_kernel_error_ulp"]), float(record["worst_stock_error_ulp"])
        failure = record.get("failure") if square.status == "failing" else None
        if failure:
            # a failing example's error is never recorded as a worst error: its finding says it, not the bars
            plot = (f'<span class="flag">FAILED ({_escape(failure.get("oracle"))})</span><pre>'
                    f'{_escape(failure.get("message", ""))}\nminimal: '
                    f'{_escape(json.dumps(failure.get("recipe"), sort_keys=True, separators=(",", ":")))}</pre>')
            numbers = "<td>—</td><td>—</td><td>—</td>"
        elif square.parity == "band":
            # the widest band applied (recorded since the legitimate-implementations rule); older records: 2 x stock
            allowed = float(record.get("band", {}).get("worst_allowed_ulp", max(LEGITIMATE_FACTOR * stock, FLOOR_ULP)))
            plot = error_svg(kernel, stock, allowed) + band_flag(allowed)
            numbers = f"<td>{_fmt(kernel)}</td><td>{_fmt(stock)}</td><td>{_fmt(allowed)}</td>"
        else:
            plot = (f'<span class="note">bitwise: exact bits required; the stock op broke the contract on '
                    f'{_escape(record["stock_disagreements"])} of {_escape(record["examples"])} examples</span>')
            numbers = "<td>0</td><td>—</td><td>0 (bitwise)</td>"
        rows.append(f'<tr class="{"failing" if failure else ""}"><td class="op">{_escape(square.op)}</td>'
                    f'<td>{_escape(square.cell)}</td><td>{_escape(square.arch)}</td>'
                    f'<td>{_escape(square.status)}</td><td>{_escape(record["examples"])}</td>{numbers}'
                    f'<td class="wrap">{plot}</td><td class="wrap">{exercised_svg(record.get("exercised"), square.bounds)}'
                    f'</td><td class="wrap">{size_svg(record.get("errors_by_size"))}</td></tr>')
    if not rows:
        return '<p class="note">No certificate records a cell yet.</p>'
    return ('<table class="list errors"><col style="width:9%"><col style="width:8%"><col style="width:5%">'
            '<col style="width:5%"><col style="width:4%"><col style="width:4%"><col style="width:4%"><col style="width:4%">'
            '<col style="width:23%"><col style="width:17%"><col style="width:17%">'
            "<tr><th>op</th><th>cell</th><th>arch</th><th>status</th><th>examples</th>"
            "<th>kernel ULP</th><th>stock ULP</th><th>allowed ULP</th><th>worst error against its band</th>"
            "<th>exercised region against the cell's bounds</th><th>error against size (ULP; elements out)</th></tr>"
            + "".join(rows) + "</table>"
            + f'<p class="note">Band: max({LEGITIMATE_FACTOR:g} x E, {FLOOR_ULP:g} ULP), E the worst error of the '
              "legitimate implementations (the stock op and the reference's reduction orders), in ULPs of the output "
              "dtype at each row's largest |truth| (oracles/band.py); the band is judged per example, and the one "
              "shown is the widest applied over the cell.</p>")


def _device_flag(arch: str) -> str:
    return "cpu" if arch == "cpu-interp" else "cuda"


def impl_root(impl: str) -> str | None:
    """The directory an ``--impl`` module is found in (what PYTHONPATH must hold to import it again), or
    None.  Found by looking at files only: the module under judgement is never imported in the judge."""
    parts = impl.partition(":")[0].split(".")
    for folder in (*impl_paths(), *(p for p in sys.path if p)):
        base = pathlib.Path(folder).resolve().joinpath(*parts)
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return str(pathlib.Path(folder).resolve())
    return None


def reproduction(op_name: str, cell_id: str, device: str, recipe: dict | None, impl: str | None,
                 flags: Sequence[str] = ()) -> str:
    """The one command that runs this cell again (on this one recipe, when it has a seed), from any directory
    (``tools.engine.commands``), with the environment it needs: the --impl module's PYTHONPATH, and the
    Triton interpreter on the CPU."""
    from oracles.battery import recipe_json

    environment = ["TRITON_INTERPRET=1"] if device == "cpu" else []
    root = impl_root(impl) if impl else None
    tool_environment, tool = commands.tool_command("certify-cells", "tools.certify_cells",
                                                   (root,) if root else ())
    words = [*tool, "--op", op_name, "--cell", cell_id, "--device", device, *flags]
    if impl:
        words += ["--impl", impl]
    if recipe and "seed" in recipe:
        words += ["--replay", recipe_json(recipe)]
    return commands.shell_line([*environment, *tool_environment], words)


def isolation_flags(isolation: dict, device: str) -> list[str]:
    """The flags a reproduction line needs to run a cell the way a run did (its report's "isolation")."""
    flags = ["--isolate"] if isolation.get("isolated") and device == "cpu" else []
    if isolation.get("cell_timeout") is not None:
        flags += ["--cell-timeout", f"{isolation['cell_timeout']:g}"]
    if isolation.get("sanitize"):
        flags += ["--sanitize", isolation["sanitize"]]
    if isolation.get("check_quarantine"):
        flags += ["--check-quarantine"] + (["--quarantine", isolation["quarantine"]] if isolation["quarantine"] else [])
    return flags


def failure_lines(run: dict, result: dict, oracle: str | None = None) -> list[str]:
    """Oracle, finding, minimal recipe and reproduction of a failed result of a run report: of ``oracle``,
    or of the headline failure."""
    from oracles.selection import oracles_text

    verdict = result.get("verdicts", {}).get(oracle) if oracle else None
    failure = {"oracle": oracle, "message": verdict["finding"], "recipe": verdict.get("recipe")} if verdict \
        else result["failure"]
    recipe = failure.get("recipe") or {}
    device = _device_flag(run["arch"])
    flags = isolation_flags(run.get("isolation", {}), device) + \
        (["--oracles", oracles_text(run["oracles"])] if run.get("partial") else [])
    return [f"oracle:  {failure['oracle']}", f"finding: {failure['message']}",
            f"minimal: {json.dumps(recipe, sort_keys=True, separators=(',', ':'))}",
            "reproduce: " + reproduction(result["op"], result["cell"], device, recipe, run.get("impl"), flags)]


def _failing_oracles(result: dict) -> list[str]:
    return [oracle for oracle, verdict in result.get("verdicts", {}).items() if verdict["verdict"] == "fail"]


def _verdicts_html(result: dict) -> str:
    """The per-oracle verdicts of a run's result: pass / FAIL / n/a (why) / not asked."""
    shown = []
    for oracle, verdict in result.get("verdicts", {}).items():
        word = {"pass": "pass", "fail": "FAIL"}.get(verdict["verdict"], verdict["verdict"])
        rows = f" ({verdict['rows']} rows)" if verdict["verdict"] == "fail" and "rows" in verdict else ""
        shown.append(f'<span title="{_escape(verdict.get("why", verdict.get("finding", "")))}">'
                     f"{_escape(oracle)}: {_escape(word)}{rows}</span>")
    return "<br>".join(shown)


def _run_html(run: dict | None) -> str:
    from ops.quarantine import QUARANTINED

    if run is None:
        return '<p class="note">No run: the page shows the certificate files only.</p>'
    rows = []
    for result in run["results"]:
        oracles = _failing_oracles(result) or ([None] if "failure" in result else [])
        failure = "".join("<pre>" + _escape("\n".join(failure_lines(run, result, oracle))) + "</pre>"
                          for oracle in oracles)
        status = result["status"] if result["status"] in ("certified", QUARANTINED) else \
            "certified" if result["status"] == "passed" else "failing"
        rows.append(f'<tr class="{"failing" if status == "failing" else ""}"><td class="op">{_escape(result["op"])}</td>'
                    f'<td>{_escape(result["cell"])}</td>'
                    f'<td class="status s-{status}">{_escape(result["status"])}</td><td>{_escape(result["examples"])}</td>'
                    f'<td>{_escape(result.get("seconds", ""))}</td><td class="wrap">{_verdicts_html(result)}</td>'
                    f'<td class="wrap finding">{failure}</td></tr>')
    judged = run.get("impl") or "the catalog kernels"
    partial = f'<p class="note"><b>{_escape(run["partial"])}</b></p>' if run.get("partial") else ""
    return (f'{partial}<p class="meta">{_escape(judged)} on {_escape(run["device"])} ({_escape(run["arch"])}), '
            f'{_escape(run["max_examples"])} drawn examples per cell besides the corners, seed {_escape(run["seed"])}</p>'
            '<table class="list run"><col style="width:10%"><col style="width:9%"><col style="width:7%">'
            '<col style="width:5%"><col style="width:5%"><col style="width:14%"><col style="width:50%">'
            "<tr><th>op</th><th>cell</th><th>verdict</th><th>examples</th><th>seconds</th>"
            "<th>oracles</th><th>failures: oracle, finding, minimal recipe, reproduction</th></tr>"
            + "".join(rows) + "</table>")


def roofline_svg(table: BenchTable, width: int = 900) -> str:
    """Per case, achieved GB/s of kernel, stock op and competitors against the copy bandwidth."""
    rows = [row for row in table.rows if not row["impl"].startswith("variant ")]
    label_width, value_width, bar_height, gap = 330, 250, 14, 4
    top = max([table.copy_gbps] + [row["GB/s"] for row in rows])
    scale = (width - label_width - value_width) / top
    parts, y, case = [], 0, None
    for row in rows:
        if (row["op"], row["case"]) != case:
            case = (row["op"], row["case"])
            y += 6
            parts.append(f'<text x="0" y="{y + 12}" font-size="12" font-weight="600" fill="#212121">'
                         f'{_escape(row["op"])} {_escape(row["case"])}</text>')
            y += bar_height + gap + 2
        colour = {"kernel": KERNEL_COLOUR, "stock": STOCK_COLOUR}.get(row["impl"], COMPETITOR_COLOUR)
        target = f" — target {row['target']}" if row["target"] else ""
        parts.append(f'<text x="12" y="{y + 11}" font-size="11" fill="#424242">{_escape(row["impl"])}{_escape(target)}</text>')
        parts.append(f'<rect x="{label_width}" y="{y}" width="{max(row["GB/s"] * scale, 1):.1f}" height="{bar_height}" '
                     f'fill="{colour}"/>')
        parts.append(f'<text x="{label_width + max(row["GB/s"] * scale, 1) + 4:.1f}" y="{y + 11}" font-size="11" '
                     f'fill="#212121">{row["GB/s"]:.0f} GB/s ({row["% of copy"]:.1f}% of copy), {row["time (us)"]:.2f} us</text>')
        y += bar_height + gap
    copy_x = label_width + table.copy_gbps * scale
    height = y + 22
    # the copy line goes first: bars and their labels are drawn over it
    parts[:0] = [f'<line x1="{copy_x:.1f}" y1="0" x2="{copy_x:.1f}" y2="{height - 16}" '
                 f'stroke="{STATUS_COLOURS["failing"]}" stroke-width="1.5" stroke-dasharray="5,3"/>',
                 f'<text x="{copy_x:.1f}" y="{height - 4}" font-size="11" text-anchor="middle" '
                 f'fill="{STATUS_COLOURS["failing"]}">copy {table.copy_gbps:.0f} GB/s</text>']
    return (f'<svg width="{width}" height="{height}" role="img" '
            f'aria-label="achieved bandwidth against copy bandwidth">' + "".join(parts) + "</svg>")


def _bench_html(tables: list[BenchTable], unreadable: list[str]) -> str:
    if not tables:
        parts = ['<p class="note">No committed tools/bench table under docs/results/ (run '
                 "<code>tools/bench --out docs/results/bench_&lt;device&gt;.md</code> on a GPU).</p>"]
    else:
        parts = [f'<h3>{_escape(table.path)}</h3><p class="meta">{_escape(table.header)}</p>{roofline_svg(table)}'
                 for table in tables]
    parts += [f'<p class="note">not read: {_escape(line)}</p>' for line in unreadable]
    return "".join(parts)


def third_party_html(folder: pathlib.Path = THIRD_PARTY) -> str:
    """The op x implementation table of the committed third-party runs (``docs/thirdparty/runs``: run
    reports and bench tables, as ``tools/verdict-table`` reads them)."""
    reports = sorted(folder.glob("*.json"))
    if not reports:
        return '<p class="note">No third-party run is committed.</p>'
    try:
        rows = verdict_table.table(reports, sorted(folder.glob("*.md")))
    except ValueError as error:
        return f'<p class="note">The committed third-party runs cannot be read: {_escape(error)}</p>'
    return verdict_table.html_table(rows)


def render_html(grid: list[GridCell], run: dict | None, tables: list[BenchTable], unreadable: list[str] = (),
                generated: str | None = None, unjudged: list[dict] = ()) -> str:
    """The page; ``unjudged``: ``catalog.unjudged_kernels()``, kernels left out of the catalog here."""
    generated = generated or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    kernels = len({square.op for square in grid})
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kernel-parity certification report</title>
<style>{CSS}</style></head><body>
<h1>kernel-parity certification report</h1>
<p class="meta">{kernels} kernels, {len({(s.op, s.cell) for s in grid})} cells; every certificate file of the catalog, read {_escape(generated)}.
A section is stale when the kernel, reference or a module they use changed since it was earned.</p>
<h2>This run</h2>
{_run_html(run)}
<h2>Status: kernel x cell x architecture</h2>
{_grid_html(grid)}
{_unjudged_html(list(unjudged))}
<h2>Worst error against the band, the region exercised, error against size</h2>
{_errors_html(grid)}
<h2>Certificate sections</h2>
{_sections_html(grid)}
<h2>Bandwidth against the copy roofline (tools/bench)</h2>
{_bench_html(tables, list(unreadable))}
<h2>Third-party implementations, judged by the same battery</h2>
{third_party_html()}
</body></html>
"""


# -- JUnit -------------------------------------------------------------------------------------------
def junit_suite(run: dict):
    """One testcase per (op, cell, oracle) of a run report (named ``cell/oracle``; a quarantined cell or a
    result without verdicts is one ``cell`` case): a failure carries finding and reproduction, an oracle
    that does not apply or was not asked is skipped with why."""
    from ops.quarantine import QUARANTINED, citation

    cases = []
    for result in run["results"]:
        classname, seconds = f"certify.{result['op']}", result.get("seconds", 0.0)
        held = result.get("quarantine") if result["status"] == QUARANTINED else None
        if held or not result.get("verdicts"):
            failure = None
            if "failure" in result:
                failure = (f"{result['failure']['oracle']}: {result['failure']['message']}",
                           "\n".join(failure_lines(run, result)))
            skipped = f"quarantined ({held['ledger']}): {citation(held['issue'], held['reason'])}" if held else None
            cases.append(junit.testcase(classname, result["cell"], seconds, failure, skipped))
            continue
        for oracle, verdict in result["verdicts"].items():
            failure = (f"{oracle}: {verdict['finding'].splitlines()[0]}", "\n".join(failure_lines(run, result, oracle))) \
                if verdict["verdict"] == "fail" else None
            skipped = f"{verdict['verdict']}: {verdict['why']}" if "why" in verdict else None
            cases.append(junit.testcase(classname, f"{result['cell']}/{oracle}", seconds / len(result["verdicts"]),
                                        failure, skipped))
    partial = f" ({run['partial']})" if run.get("partial") else ""
    return junit.testsuite(f"certify-cells {run['arch']} {run.get('impl') or 'catalog kernels'}{partial}", cases)


def write_outputs(run: dict, report_path: str | None, junit_path: str | None) -> None:
    """What ``tools/certify-cells --report PATH --junit PATH`` writes after a run."""
    if report_path:
        if report_path.endswith(".html"):
            tables, unreadable = bench_tables()
            from ops.catalog import unjudged_kernels

            text = render_html(collect_grid(), run, tables, unreadable, unjudged=unjudged_kernels())
        else:
            text = json.dumps(run, indent=2)
        try:
            pathlib.Path(report_path).write_text(text, encoding="utf-8")
        except OSError as error:
            raise UsageError(f"--report: cannot write {report_path}: {error.strerror}") from None
    if junit_path:
        junit.write(junit_path, [junit_suite(run)])
