"""The runtime canary on CUDA (issue 25.3): a sampled call is judged by the worker thread on its own side
stream, after the call's event; the mismatch of a kernel right only when judged is counted there and raised
by the next routed call (or ``ops.canary.drain``) under ``KPARITY_REQUIRE_CERTIFIED=1``."""
from __future__ import annotations

import pytest
import torch

from ops import canary, certificates
from ops.catalog import arch_of
from suites.test_canary import ENTRY, HONEST, certify_both

pytestmark = pytest.mark.sm90


@pytest.fixture
def certified_here(tmp_path, monkeypatch):
    certify_both(tmp_path, monkeypatch, arch_of(torch.device("cuda")))
    yield
    canary.drain()
    certificates.forget_cached()


def _logits(rows=3, vocab=300):
    return torch.randn(rows, vocab, device="cuda").to(torch.bfloat16)


def test_the_canary_catches_it_on_cuda_in_its_worker(certified_here, monkeypatch):
    monkeypatch.setenv(canary.CANARY_ENV, "1/1")
    for _ in range(3):
        HONEST(_logits())
        ENTRY(_logits())
    canary.drain()
    assert canary.COUNTS["honest_argmax", "checked"] + canary.COUNTS["honest_argmax", "skipped: checks pending"] == 3
    assert canary.COUNTS["honest_argmax", "mismatch"] == 0
    assert canary.COUNTS["judged_argmax", "mismatch"] >= 1
    assert canary.MISMATCHES[0]["shapes"] == {"logits": "[3, 300] bfloat16"}
    assert "differ" in canary.replay(canary.MISMATCHES[0]["reproduction"])


def test_under_require_certified_the_deferred_mismatch_raises(certified_here, monkeypatch):
    monkeypatch.setenv(canary.CANARY_ENV, "1/1")
    monkeypatch.setenv(canary.REQUIRE_CERTIFIED_ENV, "1")
    ENTRY(_logits())
    with pytest.raises(canary.CanaryMismatch, match="judged_argmax"):
        canary.drain()


def test_an_op_with_a_check_in_flight_is_over_its_budget(certified_here, monkeypatch):
    """On CUDA a check is queued, not run, when its call returns: the next calls of the op, made before the
    worker is done, must not queue more (the H200 once admitted a burst of them, +30.9% of a decode step)."""
    monkeypatch.setenv(canary.CANARY_ENV, "1/1")
    monkeypatch.setenv(canary.BUDGET_ENV, "1/200")
    canary.reset()
    for _ in range(3):
        HONEST(_logits())
    canary.drain()
    assert canary.COUNTS["honest_argmax", "checked"] == 1, canary.COUNTS
    assert canary.COUNTS["honest_argmax", "skipped: over budget"] == 2, canary.COUNTS
