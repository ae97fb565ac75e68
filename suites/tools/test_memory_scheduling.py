"""Memory-aware scheduling of the cells sharing a GPU (``tools/engine/isolation.py``): a cell starts only where
its peak GPU memory in an earlier run fits beside the known peaks of the cells running there, and each run
records every cell's peak in its report for the next run (``gpu_peak_bytes``).  On the H100 at 220 draws a
cell, six cells ran out of memory beside others and ran again from scratch (docs/results/2026-12-06c); the
figures come partly from the implementation's host, which may say anything: they order cells, never judge."""
from __future__ import annotations

import json
import types

import pytest
import torch

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
    gdn = {("op", "gdn", None)}
    peaks = {("op", cell, None): peak for cell, peak in PEAKS.items()}   # keyed as the tasks are

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
    queue.defer(paged, {("op", "other", None)})                  # out of memory beside "other", which has ended
    assert queue.next(gdn, beside(gdn)) is tiny and queue.next(gdn, beside(gdn)) is None
    assert queue.next(set(), beside(set())) is paged and not queue


def _judge_side_holding_buffers(**host):
    """The judge's side of a host (no process behind it), holding a cell's buffers."""
    judge_side = ImplementationHost.__new__(ImplementationHost)
    for name, value in {"device": "cpu", **host, "_buffers": {0: "staging"}, "_free": {("cuda", 512): [0]},
                        "_unsent": {0: "staging"}, "_host_buffers": {0: "output"}, "_captured": [0],
                        "_pool": "pool"}.items():
        setattr(judge_side, name, value)
    return judge_side


@pytest.mark.parametrize("said, read", [
    (12 * GIB, 12 * GIB), (0, 0),
    (-1, None), (True, None), (1.5, None), ("12", None), ((1, 2), None), (None, None),
])
def test_the_hosts_figure_is_taken_only_as_a_non_negative_int(said, read):
    """The host is the implementation's process: whatever else it answers is unknown, never an error."""
    host = _judge_side_holding_buffers(fault=None, _ask=lambda message, expected, limit_s: said)
    assert ImplementationHost.end_cell(host) == read


def test_the_judge_closes_the_hosts_buffers_before_asking_and_keeps_its_own_until_the_answer():
    """CUDA IPC keeps a buffer its maker frees while another process holds it open (until ``ipc_collect``): the
    host's output buffers, closed here before the host is asked to end its cell, can go back with its cache; the
    judge's staging buffers, which the host holds open until it answers, go after (an H100 run, 2026-12-06g,
    found the host's 4 GiB of output buffers still reserved when the judge closed them after asking)."""
    seen = []
    host = _judge_side_holding_buffers(fault=None, _ask=lambda *args: seen.append(
        (dict(host._host_buffers), dict(host._buffers))) or 0)
    assert ImplementationHost.end_cell(host) == 0
    assert seen == [({}, {0: "staging"})], seen


def test_the_judge_lets_go_of_its_buffers_whatever_the_host_answers():
    """Its own side's buffers, pool and the host's buffers held open go when a cell ends: after a figure, after a
    refusal to answer, and where the host had ended already (the control: before the call, all are held). A
    host that did not end its cell is faulted, so that the next cell gets a fresh one; one that did is not."""
    def refuses(message, expected, limit_s):
        raise ValueError("no")
    for host, figure in [(_judge_side_holding_buffers(fault=None, _ask=lambda *args: 7), 7),
                         (_judge_side_holding_buffers(fault=None, _ask=refuses), None)]:
        assert host._buffers and host._host_buffers and host._pool is not None
        assert ImplementationHost.end_cell(host) == figure
        assert (host._buffers, host._free, host._unsent, host._host_buffers, host._captured, host._pool) == \
            ({}, {}, {}, {}, [], None)
        assert (host.fault is None) == (figure is not None), host.fault
    assert ImplementationHost.end_cell(types.SimpleNamespace(fault="ended", _ask=None)) is None


def test_a_host_on_the_cpu_answers_that_it_reserved_nothing():
    """The message itself, through a real host: on the CPU its caching allocator never served anything."""
    host = ImplementationHost("cpu", call_limit_s=60, warmup=0)
    try:
        assert host.end_cell() == 0 and host.fault is None
    finally:
        host.close()


def test_calls_after_a_cell_ended_stage_and_return_through_new_buffers():
    """Both sides let go of a cell's buffers and number them again from nothing: a call after ``end_cell``
    answers right through buffers made afresh, and its output is the host's, not a buffer of the cell before
    (the control: before the end, later calls of a size reuse what the first two made)."""
    host = ImplementationHost("cpu", call_limit_s=60, warmup=0)
    try:
        host.load([], {"neg": ("torch", "neg")})
        x = torch.arange(6.0)
        for _ in range(3):
            assert torch.equal(host.function("neg")(x), -x)
        assert set(host._buffers) == {0, 1}
        assert host.end_cell() == 0 and not host._buffers and not host._host_buffers
        y = torch.arange(40.0)   # another size class: what a stale buffer numbered 0 could not hold
        assert torch.equal(host.function("neg")(y), -y)
        assert set(host._buffers) == {0} and host.fault is None
    finally:
        host.close()


def test_an_output_in_a_buffer_the_host_never_shared_fails_its_call():
    """A host that answers ``end_cell`` but keeps its own buffers (and their numbers) sends the next cell's
    output in a buffer the judge no longer holds: the implementation's failure, never the judge's KeyError."""
    from oracles.failures import OracleFailure

    judge_side = types.SimpleNamespace(oracle="parity", device="cpu", _host_buffers={})
    judge_side._not_accepted = lambda problem: ImplementationHost._not_accepted(judge_side, problem)
    item = ("storage", (3, 16), torch.float32, 0, (4,), (1,), torch.device("cpu"))
    sent = {"structure": "tensor", "types": ["torch.Tensor"], "tensors": [item], "copies": [None],
            "overwritten": [], "layouts": ["torch.strided"]}
    with pytest.raises(OracleFailure, match="buffer 3, which it never shared"):
        ImplementationHost._outputs(judge_side, sent, poisoned=False)


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
            on_result(task, results[task.key], 0.1, (index + 1) * GIB if index else None)
        return results

    monkeypatch.setattr(certify, "run_tasks", run_tasks)
    monkeypatch.setattr("ops.certificates.write_section",
                        lambda entry, arch, section, report: written.append((section, report)) or "x")
    out = tmp_path / "report.json"
    assert certify_cells.main(["--device", "cpu", "--op", "greedy_argmax", "--max-examples", "24",
                               "--report", str(out)]) == 0
    assert scheduled == [{(entry.name, cells[0], entry.backend): 7 * GIB}]
    (section, earned), = written
    for rows in (json.loads(out.read_text())["results"], earned["results"]):
        peaks = {row["cell"]: row.get("gpu_peak_bytes", "absent") for row in rows}
        assert peaks == {cell: (index + 1) * GIB if index else "absent" for index, cell in enumerate(cells)}, peaks
    assert not any("gpu_peak_bytes" in record for record in section["cells"].values())
