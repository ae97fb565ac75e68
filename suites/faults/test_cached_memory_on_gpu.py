"""The judge and the implementation's host are processes apart on one GPU: what either's caching allocator
keeps of freed memory, the other cannot use.  Each gives back its cache past ``CACHE_KEPT_BYTES`` after every
example (the judge) and every message (the host): a large example's memory does not stay reserved through
the cell (73 GB of an 80 GB H100 did, on a 2026-12-05 run, until the host ran out of memory)."""
from __future__ import annotations

import pytest
import torch

from oracles import allocations
from suites.claims import REPO
from suites.faults.cache_holding import GIB
from tools.engine.impl_executor import ImplementationHost

pytestmark = pytest.mark.sm90


def test_a_cache_past_the_limit_goes_back_and_one_within_it_stays():
    torch.cuda.empty_cache()
    small = torch.empty(allocations.CACHE_KEPT_BYTES // 4, dtype=torch.uint8, device="cuda")
    del small
    kept = torch.cuda.memory_reserved()
    allocations.give_back_cache()
    assert torch.cuda.memory_reserved() == kept > 0   # the control: within the limit, the cache stays
    large = torch.empty(allocations.CACHE_KEPT_BYTES + (1 << 30), dtype=torch.uint8, device="cuda")
    del large
    assert torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > allocations.CACHE_KEPT_BYTES
    allocations.give_back_cache()
    assert torch.cuda.memory_reserved() - torch.cuda.memory_allocated() == 0
    assert "GiB allocated" in allocations.memory_held()


def test_the_host_gives_back_its_cache_past_the_limit_after_a_message():
    """The implementation's host, a process apart: after a call whose temporary stayed within the limit, the
    GPU's free memory stays lower by about that temporary (the control: the host's cache is visible from
    here); after one past the limit, it is back to where it was before either (the host gave back its whole
    cache).  Run alone on the GPU: other processes' allocations would move its free memory."""
    x = torch.ones(1024, device="cuda")
    host = ImplementationHost("cuda", call_limit_s=120, warmup=0)
    try:
        host.load([str(REPO)], {name: ("suites.faults.cache_holding", name)
                                for name in ("within_the_limit", "past_the_limit")})
        host.function("within_the_limit")(x[:1])     # the host's CUDA context, before the baseline
        host.function("past_the_limit")(x[:1])
        torch.cuda.synchronize()
        before = torch.cuda.mem_get_info()[0]
        assert torch.equal(host.function("within_the_limit")(x), x)
        within = torch.cuda.mem_get_info()[0]
        assert before - within > 1.5 * GIB, (before, within)
        assert torch.equal(host.function("past_the_limit")(x), x)
        after = torch.cuda.mem_get_info()[0]
        assert abs(before - after) < 0.5 * GIB, (before, within, after)
    finally:
        host.close()
