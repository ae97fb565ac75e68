"""The runtime canary on CUDA (issue 25.3): a sampled call is judged by the worker thread on its own side
stream, after the call's event; the mismatch of a kernel right only when judged is counted there and raised
by the next routed call (or ``ops.canary.drain``) under ``KPARITY_REQUIRE_CERTIFIED=1``."""
from __future__ import annotations

import pytest
import torch

from ops import canary, catalog, certificates
from ops.catalog import arch_of
from suites.certification import write_routable
from suites.test_canary import CELL, ENTRY, HONEST

pytestmark = pytest.mark.sm90


@pytest.fixture
def certified_here(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "_REGISTRY", {**catalog._registry(), **catalog.group_kernels([ENTRY, HONEST])})
    monkeypatch.setattr(certificates, "certificate_path", lambda entry: tmp_path / f"{entry.name}.cert.json")
    monkeypatch.setenv(canary.CANARY_DIR_ENV, str(tmp_path / "canary"))
    monkeypatch.delenv(canary.REQUIRE_CERTIFIED_ENV, raising=False)
    certificates.forget_cached()
    for entry in (ENTRY, HONEST):
        write_routable(entry, arch_of(torch.device("cuda")), {CELL: {}})
    canary.COUNTS.clear()
    canary.MISMATCHES.clear()
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
