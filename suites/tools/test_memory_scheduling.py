"""Memory-aware scheduling of the cells sharing a GPU (``tools/engine/isolation.py``): a cell starts only where
its peak GPU memory in an earlier run fits beside the known peaks of the cells running there, and each run
records every cell's peak in its report for the next run (``gpu_peak_bytes``).  On the H100 at 220 draws a
cell, six cells ran out of memory beside others and ran again from scratch (docs/results/2026-12-06c); the
figures come partly from the implementation's host, which may say anything: they order cells, never judge."""
from __future__ import annotations

import json
import types

import pytest

from ops.catalog import Arch, kernels
from tools import certify_cells
from tools.engine import certify, isolation
from tools.engine.impl_executor import ImplementationHost
from tools.engine.isolation import CONTEXT_BYTES_A_SLOT, first_that_fits
from tools.engine.worker import CellTask

pytestmark = pytest.mark.cpu
GIB = 1 << 30
H100 = 80 * GIB
# an H100 shared by two workers: what is left for the cells' own peaks
ROOM = H100 - 2 * CONTEXT_BYTES_A_SLOT
PEAKS = {"paged": 50 * GIB, "gdn": 30 * GIB, "small": 1 * GIB, "tiny": GIB // 2, "huge": 100 * GIB,
         "exact": ROOM - 30 * GIB, "over": ROOM - 30 * GIB + 1}


@pytest.mark.parametrize("waiting, running, gpu_bytes, expected", [
    (["small"], ["gdn"], H100, 0),                        # fits beside the running cell
    (["paged"], ["gdn"], H100, None),                     # 30 + 50 GiB and two slots' contexts: waits
    (["exact"], ["gdn"], H100, 0),                        # to the byte, contexts counted
    (["over"], ["gdn"], H100, None),                      # one byte more
    (["unknown"], ["paged"], H100, 0),                    # no figure: started as before any was known
    (["paged"], ["unknown"], H100, 0),                    # a running cell of no figure counts for nothing
    (["huge"], [], H100, 0),                              # larger than the GPU, nothing running: runs alone
    (["huge"], ["tiny"], H100, None),                     # ... and not beside anything
    (["paged", "small", "tiny"], ["gdn"], H100, 1),       # the next that fits, in order: small before tiny
    (["paged", "huge", "gdn"], ["gdn2"], H100, 2),        # the ones that do not fit are passed over
    (["paged", "unknown", "small"], ["gdn"], H100, 1),    # an unknown one in order among those that fit
    (["paged"], ["gdn"], None, 0),                        # the CPU: no GPU memory to fit into
    ([], ["gdn"], H100, None),                            # nothing to start
])
def test_a_cell_starts_only_where_its_peak_fits(waiting, running, gpu_bytes, expected):
    peaks = {**PEAKS, "gdn2": PEAKS["gdn"]}
    assert first_that_fits(waiting, running, peaks, gpu_bytes, slots=2) == expected


def test_without_the_figures_two_cells_that_do_not_fit_are_started_together():
    """The negative control: knowing nothing of memory (the scheduling before these figures, and a first run)
    starts the 50 GiB cell beside the 30 GiB one on an 80 GiB GPU — what ran out of memory on the H100."""
    assert first_that_fits(["paged"], ["gdn"], {}, H100, slots=2) == 0
    assert first_that_fits(["paged"], ["gdn"], PEAKS, H100, slots=2) is None


def test_more_slots_leave_less_room():
    """Every slot's worker and host hold a CUDA context, running a cell or not."""
    assert first_that_fits(["exact"], ["gdn"], PEAKS, H100, slots=2) == 0
    assert first_that_fits(["exact"], ["gdn"], PEAKS, H100, slots=3) is None


def test_the_queue_starts_what_fits_and_keeps_the_rest_in_order():
    """``_CellQueue.next`` with the memory rule: the cell that does not fit stays first in line; a cell put back
    after running out of memory is held to the same rule; with no rule (the control) the next is taken."""
    paged, small, tiny = (CellTask("op", cell, "cuda") for cell in ("paged", "small", "tiny"))
    gdn = {("op", "gdn")}
    peaks = {("op", cell): peak for cell, peak in PEAKS.items()}

    def beside(running):
        return lambda keys: first_that_fits(keys, running, peaks, H100, slots=2)

    queue = isolation._CellQueue([paged, small, tiny])
    assert queue.next(gdn) is paged                              # the control: no rule, the first goes
    queue = isolation._CellQueue([paged, small, tiny])
    assert queue.next(gdn, beside(gdn)) is small and queue.next(gdn, beside(gdn)) is tiny
    assert queue.next(gdn, beside(gdn)) is None and queue        # paged waits for room
    assert queue.next(set(), beside(set())) is paged and not queue   # alone, it runs
    queue = isolation._CellQueue([small, tiny])
    assert queue.next(set()) is small
    queue.defer(paged, {("op", "other")})                        # out of memory beside "other", which has ended
    assert queue.next(gdn, beside(gdn)) is tiny and queue.next(gdn, beside(gdn)) is None
    assert queue.next(set(), beside(set())) is paged and not queue


@pytest.mark.parametrize("said, read", [
    (12 * GIB, 12 * GIB), (0, 0),
    (-1, None), (True, None), (1.5, None), ("12", None), ((1, 2), None), (None, None),
])
def test_the_hosts_figure_is_taken_only_as_a_non_negative_int(said, read):
    """The host is the implementation's process: whatever else it answers is unknown, never an error."""
    host = types.SimpleNamespace(fault=None, _ask=lambda message, expected, limit_s: said)
    assert ImplementationHost.peak_memory_reserved(host) == read


def test_a_host_that_fails_to_answer_gives_no_figure():
    def refuses(message, expected, limit_s):
        raise ValueError("no")
    assert ImplementationHost.peak_memory_reserved(types.SimpleNamespace(fault=None, _ask=refuses)) is None
    assert ImplementationHost.peak_memory_reserved(types.SimpleNamespace(fault="ended", _ask=None)) is None


def test_a_host_on_the_cpu_answers_that_it_reserved_nothing():
    """The message itself, through a real host: on the CPU its caching allocator never served anything."""
    host = ImplementationHost("cpu", call_limit_s=60, warmup=0)
    try:
        assert host.peak_memory_reserved() == 0 and host.fault is None
    finally:
        host.close()


def _report(tmp_path, monkeypatch, rows) -> None:
    entry = kernels("greedy_argmax")[0]
    report = tmp_path / "greedy_argmax.sm90.report.json"
    report.write_text(rows if isinstance(rows, str) else json.dumps({"results": [
        {"op": entry.name, "backend": entry.backend, "cell": cell, "seconds": 1.0, "examples": 10, **row}
        for cell, row in rows.items()]}))
    monkeypatch.setattr("ops.certificates.report_path", lambda found, arch: report)


def test_the_peaks_are_read_from_the_report_that_earned_the_section(tmp_path, monkeypatch):
    """Garbage and missing figures read as unknown (left out); the seconds of those rows still count."""
    entry = kernels("greedy_argmax")[0]
    _report(tmp_path, monkeypatch, {"decode_small_batch": {"gpu_peak_bytes": 3 * GIB},
                                    "decode_mid_batch": {"gpu_peak_bytes": "3 GiB"},
                                    "decode_large_batch": {"gpu_peak_bytes": -5},
                                    "empty_batch": {}})
    assert certify.gpu_peaks([entry], Arch.SM90) == {(entry.name, "decode_small_batch"): 3 * GIB}
    assert len(certify.seconds_a_draw([entry], Arch.SM90)) == 4
    for garbage in ({"empty_batch": {"gpu_peak_bytes": None}}, {"empty_batch": {"gpu_peak_bytes": 2.0}},
                    {"empty_batch": {"gpu_peak_bytes": False}}, {"empty_batch": {"gpu_peak_bytes": [1]}}):
        _report(tmp_path, monkeypatch, garbage)
        assert certify.gpu_peaks([entry], Arch.SM90) == {}, garbage
    _report(tmp_path, monkeypatch, "not json")
    assert certify.gpu_peaks([entry], Arch.SM90) == {}
    _report(tmp_path, monkeypatch, json.dumps({"results": [{"cell": ["a list"], "gpu_peak_bytes": 1}]}))
    assert certify.gpu_peaks([entry], Arch.SM90) == {}


def test_the_peaks_are_written_beside_the_seconds_and_read_back_for_the_next_run(tmp_path, monkeypatch):
    """A run writes each cell's peak into its report rows (the op's report and --report), never into the
    certificate's cells; a cell of no figure (the CPU's) gets no field; the next run schedules by them."""
    from oracles.battery import CellResult

    entry = kernels("greedy_argmax")[0]
    cells = [cell.id for cell in entry.cells]
    _report(tmp_path, monkeypatch, {cells[0]: {"gpu_peak_bytes": 7 * GIB}})
    scheduled, written = [], []

    def run_tasks(options, tasks, on_result, costs=None, peaks=None):
        scheduled.append(peaks)
        results = {}
        for index, task in enumerate(tasks):
            results[task.key] = CellResult(task.op, task.cell_id, "certified", examples=24)
            on_result(results[task.key], 0.1, (index + 1) * GIB if index else None)
        return results

    monkeypatch.setattr(certify, "run_tasks", run_tasks)
    monkeypatch.setattr("ops.certificates.write_section",
                        lambda entry, arch, section, report: written.append((section, report)) or "x")
    out = tmp_path / "report.json"
    assert certify_cells.main(["--device", "cpu", "--op", "greedy_argmax", "--max-examples", "24",
                               "--report", str(out)]) == 0
    assert scheduled == [{(entry.name, cells[0]): 7 * GIB}]
    (section, earned), = written
    for rows in (json.loads(out.read_text())["results"], earned["results"]):
        peaks = {row["cell"]: row.get("gpu_peak_bytes", "absent") for row in rows}
        assert peaks == {cell: (index + 1) * GIB if index else "absent" for index, cell in enumerate(cells)}, peaks
    assert not any("gpu_peak_bytes" in record for record in section["cells"].values())
