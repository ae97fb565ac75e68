"""The runtime canary (issue 25.3): certified dispatch re-checks a sampled fraction of the calls it routes,
against the op's parity class, and catches a kernel that is right only when judged."""
from __future__ import annotations

import dataclasses
import fractions
import logging

import pytest
import torch

from ops import canary, catalog, certificates
from ops.catalog import Arch, op
from suites.certification import write_routable

pytestmark = pytest.mark.cpu
CELL = "decode_small_batch"


JUDGED_CALLS = 300
"""About the calls a judge's fresh host makes of one cell (issue 25: "a few hundred")."""


CALLS_MADE = [0]   # of the hostile kernel, in this process


def _right_for_its_first_calls(logits):
    """Right for the first :data:`JUDGED_CALLS` calls of its process — every call a judge's fresh host makes
    — and the last index of each row after, on any device.  (Being right on shared-memory inputs is no
    disguise on CUDA, where ``is_shared()`` is true of every tensor: such a kernel is right everywhere.)"""
    CALLS_MADE[0] += 1
    if CALLS_MADE[0] <= JUDGED_CALLS:
        return torch.argmax(logits, dim=-1)
    return torch.full((logits.shape[0],), logits.shape[1] - 1, dtype=torch.int64, device=logits.device)


def _argmax(logits):
    return torch.argmax(logits, dim=-1)


ENTRY = dataclasses.replace(op("greedy_argmax"), name="judged_argmax", kernel=_right_for_its_first_calls)
"""A catalog entry of the hostile kernel (``ops.canary.replay`` finds a kernel module's ``ENTRY``)."""
HONEST = dataclasses.replace(op("greedy_argmax"), name="honest_argmax", kernel=_argmax)


def certify_both(tmp_path, monkeypatch, arch) -> None:
    """Both entries in the catalog and certified on decode_small_batch for ``arch`` (temporary
    certificates), the hostile kernel's judged calls behind it (it serves now); reproductions go to
    tmp_path; the canary's counts start empty."""
    monkeypatch.setattr(catalog, "_REGISTRY", {**catalog._registry(), **catalog.group_kernels([ENTRY, HONEST])})
    monkeypatch.setattr(certificates, "certificate_path", lambda entry: tmp_path / f"{entry.name}.cert.json")
    monkeypatch.setenv(canary.CANARY_DIR_ENV, str(tmp_path / "canary"))
    monkeypatch.setenv(canary.BUDGET_ENV, "1")   # every sampled call checked (the budget's tests set theirs)
    monkeypatch.delenv(canary.REQUIRE_CERTIFIED_ENV, raising=False)
    certificates.forget_cached()
    for entry in (ENTRY, HONEST):
        write_routable(entry, arch, {CELL: {}})
    CALLS_MADE[0] = JUDGED_CALLS
    canary.reset()


@pytest.fixture
def certified(tmp_path, monkeypatch):
    certify_both(tmp_path, monkeypatch, Arch.CPU_INTERP)
    yield tmp_path
    certificates.forget_cached()


def _logits(rows=3, vocab=300):
    return torch.randn(rows, vocab).to(torch.bfloat16)


@pytest.mark.parametrize("memory", ["private", "shared"])
def test_the_hostile_kernel_is_right_for_every_call_a_judge_makes(memory):
    """What makes it a hostile kernel: a fresh process's first calls — a judge's host's — all come out
    right, whatever memory the inputs lie in; the next one is wrong."""
    CALLS_MADE[0] = 0
    inputs = [_logits() for _ in range(JUDGED_CALLS + 1)]
    if memory == "shared":
        inputs = [logits.share_memory_() for logits in inputs]
    answers = [torch.equal(_right_for_its_first_calls(logits), torch.argmax(logits, dim=-1)) for logits in inputs]
    assert answers == [True] * JUDGED_CALLS + [False]


@pytest.mark.parametrize("memory", ["private", "shared"])
def test_the_canary_catches_a_kernel_right_only_when_judged(certified, monkeypatch, caplog, memory):
    """Shared-memory inputs too: a serving process may hold them (and on CUDA every tensor says it is
    shared), so a kernel's disguise must not be what the canary's catch depends on."""
    monkeypatch.setenv(canary.CANARY_ENV, "judged_argmax=1/1,0")
    logits = _logits().share_memory_() if memory == "shared" else _logits()
    with caplog.at_level(logging.ERROR, logger="kparity.canary"):
        ENTRY(logits)  # routed to the kernel (certified), and checked
    assert canary.COUNTS == {("judged_argmax", "checked"): 1, ("judged_argmax", "mismatch"): 1}
    (found,) = canary.MISMATCHES
    assert (found["op"], found["backend"], found["cell"]) == ("judged_argmax", "triton", CELL)
    assert found["shapes"] == {"logits": "[3, 300] bfloat16"} and "differ" in found["finding"]
    assert "python -m ops.canary" in found["command"] and found["reproduction"] in found["command"]
    assert "judged_argmax" in caplog.text and "reproduce:" in caplog.text
    # the saved inputs reproduce it
    assert "differ" in canary.replay(found["reproduction"])


def test_under_require_certified_a_mismatch_raises(certified, monkeypatch):
    monkeypatch.setenv(canary.CANARY_ENV, "1/1")
    monkeypatch.setenv(canary.REQUIRE_CERTIFIED_ENV, "1")
    with pytest.raises(canary.CanaryMismatch, match="judged_argmax .triton. cell decode_small_batch"):
        ENTRY(_logits())
    assert torch.equal(HONEST(logits := _logits()), torch.argmax(logits, dim=-1))  # nothing left pending


def test_an_honest_kernel_is_checked_and_passes(certified, monkeypatch):
    """The negative control: the same check on a right kernel finds nothing."""
    monkeypatch.setenv(canary.CANARY_ENV, "1/1")
    monkeypatch.setenv(canary.REQUIRE_CERTIFIED_ENV, "1")
    for rows in (1, 16):
        HONEST(_logits(rows))
    assert canary.COUNTS == {("honest_argmax", "checked"): 2} and canary.MISMATCHES == []


def test_with_the_canary_off_the_hostile_kernel_is_served_unnoticed(certified, monkeypatch):
    """Why the canary exists: certification alone would serve this kernel's wrong answers."""
    monkeypatch.setenv(canary.CANARY_ENV, "0")
    logits = _logits()
    assert not torch.equal(ENTRY(logits), torch.argmax(logits, dim=-1))
    assert canary.COUNTS == {}


def test_a_stock_fallback_is_not_checked(certified, monkeypatch):
    monkeypatch.setenv(canary.CANARY_ENV, "1/1")
    ENTRY(_logits(rows=40))  # decode_mid_batch: not certified here, the stock op runs
    assert canary.COUNTS == {}


def test_sampling_is_unpredictable_not_every_nth_call(monkeypatch):
    half = fractions.Fraction(1, 2)
    runs = [[canary.sampled(half) for _ in range(400)] for _ in range(2)]
    assert runs[0] != runs[1]  # equal by chance with probability 2**-400
    assert 120 < sum(runs[0]) < 280
    tenth = fractions.Fraction(1, 10)
    hits = [i for i in range(3000) if canary.sampled(tenth)]
    gaps = {b - a for a, b in zip(hits, hits[1:])}
    assert len(gaps) > 3 and 180 < len(hits) < 420
    assert canary.sampled(fractions.Fraction(1)) and not canary.sampled(fractions.Fraction(0))
    # a 64-bit draw below the threshold samples: exactly the fraction of the 2^64 draws, rounded up
    assert [canary.threshold(fractions.Fraction(n, d)) for n, d in ((0, 1), (1, 2), (1, 1), (1, 3))] == [
        0, 1 << 63, 1 << 64, (1 << 64) // 3 + 1]


@pytest.mark.parametrize("text, default, per_op", [
    ("1/1000", fractions.Fraction(1, 1000), {}),
    ("0", fractions.Fraction(0), {}),
    ("greedy_argmax=1/10,1/1000", fractions.Fraction(1, 1000), {"greedy_argmax": fractions.Fraction(1, 10)}),
    ("paged_decode=0", fractions.Fraction(1, 1000), {"paged_decode": fractions.Fraction(0)}),
])
def test_the_rate_is_set_per_op(text, default, per_op):
    assert canary.parse_rates(text) == (default, per_op)


@pytest.mark.parametrize("text", ["1/0", "2", "-1/10", "one in ten", "=1/10", "1/10/2", "nan"])
def test_a_malformed_rate_is_an_error_naming_the_variable(text):
    with pytest.raises(ValueError, match="KPARITY_CANARY"):
        canary.parse_rates(text)


@pytest.mark.parametrize("text", ["1/0", "2", "-1/200", "half a percent", "1/200/2", ""])
def test_a_malformed_budget_is_an_error_naming_the_variable(text):
    with pytest.raises(ValueError, match="KPARITY_CANARY_BUDGET"):
        canary.parse_budget(text)


# -- the budget: what checks may cost a serving process ------------------------------------------------
def test_an_op_past_its_share_of_the_budget_is_not_checked_and_the_others_keep_theirs(monkeypatch):
    """1/200 of the wall time since the first sample, shared by the ops sampled so far: after a check of 1 s,
    its op waits 200 s alone, or 400 s beside a second op; the second op's first sample is checked at once."""
    now = [0.0]
    monkeypatch.setattr(canary, "_clock", lambda: now[0])
    monkeypatch.setenv(canary.BUDGET_ENV, "1/200")
    canary.reset()
    assert canary.within_budget("paged_decode")          # the first sample of an op is always checked
    canary._SPENT["paged_decode"] += 1.0                  # its check took 1 s
    now[0] = 100.0
    assert not canary.within_budget("paged_decode")      # share 0.5 s
    now[0] = 200.0
    assert canary.within_budget("paged_decode")          # share 1 s
    assert canary.within_budget("greedy_argmax")         # a second op: its first sample
    assert not canary.within_budget("paged_decode")      # share now 0.5 s each
    now[0] = 400.0
    assert canary.within_budget("paged_decode") and canary.within_budget("greedy_argmax")
    canary._IN_FLIGHT.add("greedy_argmax")               # a check of its own still queued or running
    assert not canary.within_budget("greedy_argmax")
    monkeypatch.setenv(canary.BUDGET_ENV, "1")
    canary._SPENT["paged_decode"] += 1e9
    assert canary.within_budget("paged_decode") and canary.within_budget("greedy_argmax")   # 1: no bound
    canary.reset()


def test_a_sampled_call_past_the_budget_is_counted_and_served(certified, monkeypatch):
    """Through certified dispatch at every call sampled: each check costs far more than 1/200 of the time
    between calls, so after the first check the next ones are skipped, counted, and served as usual."""
    monkeypatch.setenv(canary.CANARY_ENV, "1/1")
    monkeypatch.setenv(canary.BUDGET_ENV, "1/200")
    canary.reset()
    answers = [HONEST(logits := _logits()).equal(torch.argmax(logits, dim=-1)) for _ in range(3)]
    assert answers == [True] * 3
    assert canary.COUNTS == {("honest_argmax", "checked"): 1, ("honest_argmax", "skipped: over budget"): 2}


# -- a band op: judged within its band around the float64 truth ----------------------------------------
NORM = catalog.kernels("rms_norm_gated")[-1]  # the Triton kernel's entry: the one the CPU runs


def _norm_reference(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    return NORM.reference(x, z, weight, eps, group_size, norm_before_gate, amax)


def _norm_off_by_a_percent(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """About 2 bf16 ULP high on every element: outside a band of a few ULP."""
    return (NORM.reference(x, z, weight, eps, group_size, norm_before_gate, amax).float() * 1.01).to(torch.bfloat16)


BAND_RIGHT = dataclasses.replace(NORM, name="banded_norm", kernel=_norm_reference)
BAND_WRONG = dataclasses.replace(NORM, name="off_norm", kernel=_norm_off_by_a_percent)


@pytest.mark.parametrize("entry, mismatches", [(BAND_RIGHT, 0), (BAND_WRONG, 1)], ids=["within", "outside"])
def test_a_band_op_is_checked_against_its_band(tmp_path, monkeypatch, entry, mismatches):
    monkeypatch.setattr(catalog, "_REGISTRY", {**catalog._registry(), **catalog.group_kernels([entry])})
    monkeypatch.setattr(certificates, "certificate_path", lambda e: tmp_path / f"{e.name}.cert.json")
    monkeypatch.setenv(canary.CANARY_DIR_ENV, str(tmp_path / "canary"))
    monkeypatch.setenv(canary.CANARY_ENV, "1/1")
    monkeypatch.setenv(canary.BUDGET_ENV, "1")
    certificates.forget_cached()
    write_routable(entry, Arch.CPU_INTERP, {"plain_rms_norm": {}})
    canary.reset()
    x = torch.randn(2, 256).to(torch.bfloat16)
    entry(x=x, z=None, weight=torch.ones(256, dtype=torch.bfloat16), eps=1e-6, group_size=256)
    certificates.forget_cached()
    assert canary.COUNTS[entry.name, "checked"] == 1 and canary.COUNTS[entry.name, "mismatch"] == mismatches
    if mismatches:
        assert "exceeds the band" in canary.MISMATCHES[0]["finding"], canary.MISMATCHES
