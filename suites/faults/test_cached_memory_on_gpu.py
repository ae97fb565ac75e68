"""The judge and the implementation's host are processes apart on one GPU: what either's caching allocator
keeps of freed memory, the other cannot use.  Each gives back its cache past ``CACHE_KEPT_BYTES`` after every
example (the judge) and every message (the host): a large example's memory does not stay reserved through
the cell (73 GB of an 80 GB H100 did, on a 2026-12-05 run, until the host ran out of memory)."""
from __future__ import annotations

import pytest
import torch

from oracles import allocations

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
