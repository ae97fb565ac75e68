"""Certified dispatch: a kernel runs only for inputs whose cell holds a fresh certificate for this
device's arch; of an op's several kernels (one per backend), the first in BACKEND_ORDER that may run
does; otherwise the stock op runs, the fallback is counted with every kernel's reason, and
KPARITY_REQUIRE_CERTIFIED=1 turns it into an error."""
from __future__ import annotations

import pytest
import torch

import dataclasses
import sys

from ops import catalog, certificates
from ops.catalog import BACKEND_ORDER, FALLBACKS, Arch, FallbackRefused, kernels, op
from suites.certification import write_routable

pytestmark = pytest.mark.cpu
ENTRY = op("greedy_argmax")
CELL = "decode_small_batch"


@pytest.fixture
def certificate(tmp_path, monkeypatch):
    """The entry's certificate, moved to a temporary file for the test; returns a writer."""
    monkeypatch.setattr(certificates, "certificate_path",
                        lambda entry: tmp_path / f"{entry.name}-{entry.backend}.cert.json")
    certificates.forget_cached()
    FALLBACKS.clear()

    def write(status="certified", digest=None, **record):
        write_routable(ENTRY, Arch.CPU_INTERP, {CELL: {"status": status, **record}}, digest)

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
    ("no certificate", "triton: certificate for cpu-interp is unknown"),
    ("stale certificate", "triton: certificate for cpu-interp is stale"),
    ("failed cell", f"triton: cell {CELL} is not certified on cpu-interp"),
    ("uncertified cell", "triton: cell decode_mid_batch is not certified on cpu-interp"),
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


def test_only_the_exercised_region_of_a_certified_cell_routes_to_the_kernel(certificate):
    """A certificate claims what its examples reached: a V or a dtype they never reached (the CPU's size
    cap, a short run) runs the stock op, with the reason."""
    certificate(exercised={"R": [1, 16], "V": [1, 1024], "dtype": ["bfloat16"]}, narrowed_by="cpu interpreter size cap")
    assert _route(_logits(vocab=1024)) == {}
    assert _route(_logits(vocab=1025)) == {("greedy_argmax", "triton: V=1025 is outside the exercised 1..1024"): 1}
    assert _route(_logits().float()) == {("greedy_argmax", "triton: dtype=float32 was not exercised (bfloat16)"): 1}


def test_an_input_in_no_cell_runs_the_stock_op(certificate):
    certificate()
    assert _route(_logits(rows=1025, vocab=16)) == {("greedy_argmax", "triton: no cell holds this input"): 1}


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


# -- several kernels of one op -------------------------------------------------------------------
def _first_kernel(logits):
    return torch.argmax(logits, dim=-1)


def _second_kernel(logits):
    return torch.argmax(logits, dim=-1)


@pytest.fixture
def twin(certificate, monkeypatch):
    """An op ``twin_argmax`` with a cute and a triton kernel (registered triton first), each recording
    its calls; returns (entries by backend, calls, certify(backend, status, digest, cell, arch))."""
    calls = []

    def recording(kernel, backend):
        def run(logits):
            calls.append(backend)
            return kernel(logits)
        run.__module__ = __name__
        return run

    found = [dataclasses.replace(ENTRY, name="twin_argmax", backend=backend, kernel=recording(kernel, backend))
             for backend, kernel in (("triton", _second_kernel), ("cute", _first_kernel))]
    monkeypatch.setattr(catalog, "_REGISTRY", {**catalog._registry(), **catalog.group_kernels(found)})
    twins = {entry.backend: entry for entry in kernels("twin_argmax")}

    def certify(backend, status="certified", digest=None, cell=CELL, arch=Arch.CPU_INTERP):
        entry = twins[backend]
        write_routable(entry, arch, {cell: {"status": status}}, digest)

    return twins, calls, certify


def _route_twin(twins, calls, logits=None, through="triton"):
    FALLBACKS.clear()
    calls.clear()
    logits = _logits() if logits is None else logits
    assert torch.equal(twins[through](logits), torch.argmax(logits, dim=-1))
    return list(calls), dict(FALLBACKS)


def test_kernels_are_in_backend_order_whatever_order_they_were_found_in(twin):
    twins, _, _ = twin
    assert [entry.backend for entry in kernels("twin_argmax")] == list(BACKEND_ORDER) == ["cute", "triton"]
    assert op("twin_argmax") is twins["cute"]


def test_both_certified_runs_the_first_backend(twin):
    twins, calls, certify = twin
    certify("cute")
    certify("triton")
    assert _route_twin(twins, calls) == (["cute"], {})


@pytest.mark.parametrize("case, reason", [
    ("no certificate", "certificate for cpu-interp is unknown"),
    ("stale certificate", "certificate for cpu-interp is stale"),
    ("failed cell", f"cell {CELL} is not certified on cpu-interp"),
    ("another cell only", f"cell {CELL} is not certified on cpu-interp"),
])
def test_a_first_backend_that_may_not_run_passes_to_the_next_certified_one(twin, case, reason):
    twins, calls, certify = twin
    certify("triton")
    if case == "stale certificate":
        certify("cute", digest="0" * 64)
    elif case == "failed cell":
        certify("cute", status="failed")
    elif case == "another cell only":
        certify("cute", cell="decode_mid_batch")
    assert _route_twin(twins, calls) == (["triton"], {})
    # and with the second backend uncertified as well, the stock op runs, both reasons counted
    certificates.write_section(twins["triton"], Arch.CPU_INTERP, {"source_sha256": "0" * 64, "cells": {}})
    assert _route_twin(twins, calls) == ([], {("twin_argmax", f"cute: {reason}; triton: certificate for "
                                                               f"cpu-interp is stale"): 1})


def test_a_kernel_runs_only_on_archs_its_entry_claims(twin, monkeypatch):
    """A cute kernel claiming GPUs only never runs on the interpreter, even with a certificate there."""
    twins, calls, certify = twin
    monkeypatch.setattr(twins["cute"], "archs", frozenset({Arch.SM90}))
    certify("cute")
    assert _route_twin(twins, calls) == ([], {("twin_argmax", "cute: does not claim cpu-interp; triton: "
                                                              "certificate for cpu-interp is unknown"): 1})
    certify("triton")
    assert _route_twin(twins, calls) == (["triton"], {})


def test_calling_any_kernel_entry_dispatches_the_whole_op(twin):
    twins, calls, certify = twin
    certify("cute")
    assert _route_twin(twins, calls, through="triton") == (["cute"], {})
    assert _route_twin(twins, calls, through="cute") == (["cute"], {})


def test_an_op_may_not_have_two_kernels_of_one_backend_nor_an_unknown_backend():
    with pytest.raises(ValueError, match="two triton catalog entries named 'greedy_argmax'"):
        catalog.group_kernels([ENTRY, dataclasses.replace(ENTRY)])
    with pytest.raises(ValueError, match="backend 'cuda_c' is not one of"):
        catalog.group_kernels([dataclasses.replace(ENTRY, backend="cuda_c")])


def test_rms_norm_gated_has_a_cute_and_a_triton_kernel_and_the_cpu_takes_triton(certificate):
    """The real op: its cute kernel claims GPUs only, so on the interpreter a certified Triton cell runs."""
    from ops.norm import rms_norm_gated as triton_kernel

    norm = kernels("rms_norm_gated")
    assert [entry.backend for entry in norm] == ["cute", "triton"]
    assert Arch.CPU_INTERP not in norm[0].archs and norm[1] is triton_kernel.ENTRY
    x = torch.randn(2, 256).to(torch.bfloat16)
    call = {"x": x, "z": None, "weight": torch.ones(256, dtype=torch.bfloat16), "eps": 1e-6, "group_size": 256}
    write_routable(norm[1], Arch.CPU_INTERP, {"plain_rms_norm": {}})
    FALLBACKS.clear()
    assert torch.equal(op("rms_norm_gated")(**call), triton_kernel.rms_norm_gated(**call))
    assert FALLBACKS == {}
    op("rms_norm_gated")(**{**call, "group_size": 128})   # per_head_decode: not certified here
    assert FALLBACKS == {("rms_norm_gated", "cute: does not claim cpu-interp; triton: cell per_head_decode "
                                            "is not certified on cpu-interp"): 1}


def _rescan(monkeypatch, missing: str):
    """The catalog scanned afresh, with the module ``missing`` made unimportable."""
    monkeypatch.setattr(catalog, "_REGISTRY", None)
    monkeypatch.setattr(catalog, "UNAVAILABLE", {})
    for module in ("ops.norm.rms_norm_gated", "ops.norm.rms_norm_gated_cute"):
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, missing, None)
    return catalog._registry()


def test_a_kernel_whose_backend_package_is_missing_is_left_out_and_said_why(monkeypatch):
    registry = _rescan(monkeypatch, "cutlass")
    assert [entry.backend for entry in registry["rms_norm_gated"]] == ["triton"]
    assert "nvidia-cutlass-dsl is not installed" in catalog.UNAVAILABLE["ops.norm.rms_norm_gated_cute"]


def test_any_other_missing_package_still_breaks_the_catalog_loudly(monkeypatch):
    with pytest.raises(ModuleNotFoundError, match="triton"):
        _rescan(monkeypatch, "triton")
