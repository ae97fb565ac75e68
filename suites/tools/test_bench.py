"""tools/bench's bookkeeping, on the CPU (timing itself needs a GPU): a run cut short by its time limit
keeps every case it finished."""
from __future__ import annotations

import types

import pytest

from ops.catalog import op
from tools import bench

pytestmark = pytest.mark.cpu


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
