"""tools/bench's bookkeeping, on the CPU (timing itself needs a GPU): a run cut short by its time limit
keeps every case it finished; a third-party adapter's own call and its glue are timed apart."""
from __future__ import annotations

import pathlib
import types

import pytest

from ops.catalog import op
from suites.thirdparty import staging
from tools import bench
from tools.engine import verdict_table

pytestmark = pytest.mark.cpu
REPO = pathlib.Path(__file__).resolve().parents[2]


def test_each_finished_case_is_handed_over_before_the_next_starts(monkeypatch):
    entry = op("fp8_gemv")
    monkeypatch.setattr(bench, "median_us", lambda fn: (1.0, "graph"))
    started, handed = [], []
    cases = tuple(types.SimpleNamespace(label=f"case {i}", make=lambda device, i=i: started.append(i) or {},
                                        bytes_moved=lambda **kwargs: 1, target="", competitors={})
                  for i in range(3))
    fake = types.SimpleNamespace(name=entry.name, backend=entry.backend, kernel=entry.kernel, stock=entry.stock,
                                 bench=cases)
    rows = bench.bench_entry(fake, "cpu", 1.0, False, lambda rows: handed.append((len(started), len(rows))))
    assert handed == [(1, 2), (2, 4), (3, 6)]   # kernel + stock rows of every case, as soon as it is done
    assert [row.case for row in rows] == ["case 0", "case 0", "case 1", "case 1", "case 2", "case 2"]


class _Clock:
    """A fake device clock: each stage of the fake adapter advances it by its own amount, so that a time
    says exactly which stages it covered."""

    GLUE_IN_US, CALL_US, GLUE_OUT_US = 70.0, 19.0, 8.25   # exact in binary: sums compare equal

    def __init__(self):
        self.now = 0.0

    def timer(self, fn):
        start = self.now
        fn()
        return self.now - start, "graph"

    def kernel(self, x):
        self.now += 10.0

    def adapter(self):
        def prepare(x):
            self.now += self.GLUE_IN_US    # casts, padding, scale layout
            return x

        def call(prepared):
            self.now += self.CALL_US       # the third party's function alone
            return prepared

        def finish(prepared, raw):
            self.now += self.GLUE_OUT_US   # slicing, widening
            return raw

        def fp8_gemv(x):
            prepared = prepare(x)
            return finish(prepared, call(prepared))

        fp8_gemv.stages = staging.stages(prepare, call, finish)
        return fp8_gemv


def test_a_third_partys_time_is_its_own_call_and_its_adapters_glue_is_timed_apart():
    clock = _Clock()
    adapter = clock.adapter()
    assert bench.time_implementation(adapter, {"x": 1}, clock.timer) == (19.0, "graph", 78.25)
    # the negative control: the same adapter without its stages is timed whole, glue and call together
    whole = lambda x: adapter(x)   # noqa: E731
    assert bench.time_implementation(whole, {"x": 1}, clock.timer) == (97.25, "graph", None)


def test_the_bench_table_and_the_verdict_table_show_the_call_and_the_glue_apart():
    clock = _Clock()
    entry = op("fp8_gemv")
    case = types.SimpleNamespace(label="M=16", make=lambda device: {"x": 1}, bytes_moved=lambda **kwargs: 19_000_000,
                                 target="", competitors={})
    fake = types.SimpleNamespace(name=entry.name, backend=entry.backend, kernel=clock.kernel,
                                 stock=clock.kernel, bench=(case,))
    rows = bench.bench_entry(fake, "cpu", 4000.0, False, others={"pkg.adapter:fp8_gemv": clock.adapter()},
                             timer=clock.timer)
    theirs = next(row for row in rows if row.impl == "pkg.adapter:fp8_gemv")
    assert (theirs.time_us, theirs.glue_us, theirs.gbps) == (19.0, 78.25, pytest.approx(1000.0))
    _, read = bench.read_table(f"`tools/bench` on X; copy bandwidth 4000 GB/s (same run)\n\n{bench.table(rows)}\n")
    assert [(r["impl"], r["time (us)"], r["adapter glue (us)"]) for r in read if r["impl"] != "stock"] == \
        [("kernel", 10.0, None), ("pkg.adapter:fp8_gemv", 19.0, 78.25)]
    verdict = verdict_table.Row("fp8_gemv", "pkg.adapter", {}, None, None, 1)   # a run that judged the module
    verdict_table.attach_bench([verdict], [(None, read)])   # a table that names no device
    assert verdict.bench == "19.0 us (25% of copy; M=16); adapter glue 78.2 us"


def test_a_table_written_before_the_glue_was_timed_apart_still_reads():
    _, read = bench.read_table((REPO / "docs/thirdparty/runs/fp8_gemv.md").read_text())
    cublaslt = [row for row in read if row["impl"] == "suites.thirdparty.torch_scaled_mm:fp8_gemv"]
    assert cublaslt and all(row["adapter glue (us)"] is None for row in cublaslt)
    assert cublaslt[0]["time (us)"] == 97.15   # the whole adapter's: x cast to e4m3, M padded, the call


def test_an_eager_call_reports_its_device_time_and_the_hosts_time_a_call(monkeypatch):
    """``--eager``: the device's median from do_bench, and the host's own time over HOST_CALLS unsynchronised
    calls, read on the clock given (here a fake one each call advances by 23 us)."""
    import torch
    import triton.testing

    now = [0.0]
    calls = []

    def call():
        calls.append(1)
        now[0] += 23e-6

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kwargs: 0.07)   # 70 us, in ms
    assert bench.eager_us(call, clock=lambda: now[0]) == (70.0, "eager, host 23.0 us a call")
    assert len(calls) == 1 + bench.HOST_CALLS   # the warm-up call, then the host's timed calls
    _, read = bench.read_table("`tools/bench --eager` on X; copy bandwidth 4000 GB/s (same run)\n\n" + bench.table(
        [bench.Row("op [triton]", "case", "kernel", 70.0, "eager, host 23.0 us a call", 1, 4000.0, 140.0, "")]) + "\n")
    assert read[0]["timed as"] == "eager, host 23.0 us a call"
