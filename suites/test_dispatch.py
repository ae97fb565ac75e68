"""Certified dispatch: the kernel runs only for inputs whose cell holds a fresh certificate for this
device's arch; otherwise the stock op runs, the fallback is counted, and KPARITY_REQUIRE_CERTIFIED=1
turns it into an error."""
from __future__ import annotations

import pytest
import torch

from ops import catalog, certificates
from ops.catalog import FALLBACKS, Arch, FallbackRefused, op

pytestmark = pytest.mark.cpu
ENTRY = op("greedy_argmax")
CELL = "decode_small_batch"


@pytest.fixture
def certificate(tmp_path, monkeypatch):
    """The entry's certificate, moved to a temporary file for the test; returns a writer."""
    monkeypatch.setattr(certificates, "certificate_path", lambda entry: tmp_path / f"{entry.name}.cert.json")
    certificates.forget_cached()
    FALLBACKS.clear()

    def write(status="certified", digest=None):
        certificates.write_section(ENTRY, Arch.CPU_INTERP, {
            "source_sha256": digest or certificates.source_digest(ENTRY),
            "cells": {CELL: {"status": status}},
        })

    yield write
    certificates.forget_cached()


def _logits(rows=2, vocab=300):
    return torch.randn(rows, vocab).to(torch.bfloat16)


def _route(logits):
    FALLBACKS.clear()
    answer = ENTRY(logits)
    assert torch.equal(answer, torch.argmax(logits, dim=-1))
    return dict(FALLBACKS)


def test_a_fresh_certificate_routes_to_the_kernel(certificate):
    certificate()
    assert _route(_logits()) == {}


@pytest.mark.parametrize("case, reason", [
    ("no certificate", "certificate for cpu-interp is unknown"),
    ("stale certificate", "certificate for cpu-interp is stale"),
    ("failed cell", f"cell {CELL} is not certified on cpu-interp"),
    ("uncertified cell", "cell decode_mid_batch is not certified on cpu-interp"),
])
def test_anything_else_runs_the_stock_op_and_is_counted(certificate, case, reason):
    if case == "stale certificate":
        certificate(digest="0" * 64)
    elif case == "failed cell":
        certificate(status="failed")
    elif case != "no certificate":
        certificate()
    logits = _logits(rows=40) if case == "uncertified cell" else _logits()
    assert _route(logits) == {("greedy_argmax", reason): 1}


def test_an_input_in_no_cell_runs_the_stock_op(certificate):
    certificate()
    assert _route(_logits(rows=1025, vocab=16)) == {("greedy_argmax", "no cell holds this input"): 1}


def test_require_certified_turns_a_fallback_into_an_error(certificate, monkeypatch):
    monkeypatch.setenv(catalog.REQUIRE_CERTIFIED_ENV, "1")
    with pytest.raises(FallbackRefused, match="certificate for cpu-interp is unknown"):
        ENTRY(_logits())
    certificate()
    assert _route(_logits()) == {}


def test_bad_input_is_refused_before_routing(certificate):
    with pytest.raises(ValueError, match="logits"):
        ENTRY(torch.randn(4, 8)[:, ::2])
    assert FALLBACKS == {}


def test_cell_of_maps_inputs_to_their_regime():
    assert ENTRY.cell_of(_logits(rows=0)).id == "empty_batch"
    assert ENTRY.cell_of(_logits(rows=16)).id == "decode_small_batch"
    assert ENTRY.cell_of(_logits(rows=17)).id == "decode_mid_batch"
    assert ENTRY.cell_of(_logits(rows=1024, vocab=16)).id == "decode_large_batch"
    assert ENTRY.cell_of(_logits(rows=1025, vocab=16)) is None


def test_arch_is_an_enum_and_seeds_are_stable():
    with pytest.raises(AttributeError):
        Arch.SM91  # noqa: B018 - a typo must fail
    assert catalog.stable_seed("cell", "decode_small_batch") == catalog.stable_seed("cell", "decode_small_batch")
    assert ENTRY.cell(CELL).seed() == catalog.stable_seed("cell", CELL)


def test_cells_need_snake_case_ids_and_a_why():
    with pytest.raises(ValueError, match="snake_case"):
        catalog.Cell("Small-Batch", "why", {})
    with pytest.raises(ValueError, match="why"):
        catalog.Cell("small_batch", " ", {})
