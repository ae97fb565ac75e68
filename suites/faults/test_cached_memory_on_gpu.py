"""The judge and the implementation's host are processes apart on one GPU: what either's caching allocator
keeps of freed memory, the other cannot use.  Each gives back its cache past ``CACHE_KEPT_BYTES`` after every
example (the judge) and every message (the host): a large example's memory does not stay reserved through
the cell (73 GB of an 80 GB H100 did, on a 2026-12-05 run, until the host ran out of memory).

The judge's side is measured against what this process holds as a test begins (``_held_before``): an earlier test
of the same pytest process may leave memory allocated (a cell judged in-process keeps its host's staging buffers
for the next: on the H200, 2026-12-06h, 2.5 GB after test_isolation.py), whose segments keep free blocks no cache
release gives back."""
from __future__ import annotations

import pytest
import torch

from oracles import allocations
from suites.claims import REPO
from suites.faults.cache_holding import GIB
from tools.engine.impl_executor import ImplementationHost

pytestmark = pytest.mark.sm90


def _held_before() -> tuple[int, int]:
    """(reserved, reserved but free) of this process's allocator after a release of its cache."""
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(), torch.cuda.memory_reserved() - torch.cuda.memory_allocated()


def test_a_cache_past_the_limit_goes_back_and_one_within_it_stays():
    _, free_before = _held_before()
    small = torch.empty(allocations.CACHE_KEPT_BYTES // 4, dtype=torch.uint8, device="cuda")
    del small
    kept = torch.cuda.memory_reserved()
    allocations.give_back_cache()
    assert torch.cuda.memory_reserved() == kept > 0   # the control: within the limit, the cache stays
    large = torch.empty(allocations.CACHE_KEPT_BYTES + (1 << 30), dtype=torch.uint8, device="cuda")
    del large
    assert torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > allocations.CACHE_KEPT_BYTES
    allocations.give_back_cache()
    assert torch.cuda.memory_reserved() - torch.cuda.memory_allocated() == free_before
    assert "GiB allocated" in allocations.memory_held()


def test_the_host_gives_back_its_cache_past_the_limit_after_a_message():
    """The implementation's host, a process apart: after a message whose temporary stayed within the limit, the
    host still holds it in its cache (the control: what the host holds is seen from here); after one past the
    limit, it holds no cache.  The host reports its own allocator's figures (``memory_held``, a message of its
    own): the GPU's free memory would move with any other process on the device."""
    x = torch.ones(1024, device="cuda")
    host = ImplementationHost("cuda", call_limit_s=120, warmup=0)
    try:
        host.load([str(REPO)], {name: ("suites.faults.cache_holding", name)
                                for name in ("within_the_limit", "past_the_limit", "memory_held")})

        def held() -> tuple[int, int]:
            reserved, allocated = host.function("memory_held")(x).tolist()
            return reserved, allocated

        assert torch.equal(host.function("within_the_limit")(x), x)
        reserved, allocated = held()
        assert reserved - allocated >= 2 * GIB, (reserved, allocated)
        assert torch.equal(host.function("past_the_limit")(x), x)
        reserved, allocated = held()
        assert reserved - allocated < 0.5 * GIB, (reserved, allocated)
    finally:
        host.close()


def test_the_host_reports_its_peak_since_the_last_cell_ended():
    """What the scheduler reads of the host's memory (``end_cell``): the most its allocator reserved since the
    last cell ended, a temporary given back before included; the end resets it (the control: the next end sees
    only what the host holds now)."""
    x = torch.ones(1024, device="cuda")
    host = ImplementationHost("cuda", call_limit_s=120, warmup=0)
    try:
        host.load([str(REPO)], {"past_the_limit": ("suites.faults.cache_holding", "past_the_limit")})
        assert torch.equal(host.function("past_the_limit")(x), x)
        peak = host.end_cell()
        assert peak >= allocations.CACHE_KEPT_BYTES + GIB, peak
        assert host.end_cell() < 0.5 * GIB
    finally:
        host.close()


def test_a_cell_that_ended_leaves_neither_process_holding_its_buffers():
    """Between cells a slot holds its CUDA contexts alone (what the scheduler counts of it): a cell's inputs of
    2 GiB stay in the judge's staging buffers and its outputs in the host's buffers while the cell runs (the
    control), and after ``end_cell`` and the worker's ``empty_cache`` neither process reserves them."""
    reserved_before, _ = _held_before()
    x = torch.ones(GIB // 2, device="cuda")   # 2 GiB of float32
    host = ImplementationHost("cuda", call_limit_s=120, warmup=0)
    try:
        host.load([str(REPO)], {"within_the_limit": ("suites.faults.cache_holding", "within_the_limit"),
                                "memory_held": ("suites.faults.cache_holding", "memory_held")})
        assert torch.equal(host.function("within_the_limit")(x), x)
        del x
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() - reserved_before >= 2 * GIB   # the staging buffers of the cell
        hosted, _ = host.function("memory_held")(torch.ones(1, device="cuda")).tolist()
        assert hosted >= 2 * GIB, hosted   # the host's output buffer of 2 GiB
        host.end_cell()
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() - reserved_before < 0.5 * GIB
        hosted, _ = host.function("memory_held")(torch.ones(1, device="cuda")).tolist()
        assert hosted < 0.5 * GIB, hosted
    finally:
        host.close()
