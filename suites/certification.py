"""What every op suite shares: this machine's device, arch marks, and the battery as pytest checks."""
from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import settings

from ops import quarantine
from ops.catalog import arch_of, kernels
from oracles.battery import CellResult, Implementation, run_cell
from tools import certify_cells
from tools.cli import run_main
from tools.engine.certify import describe


def machine_device() -> torch.device:
    """Where the suites run kernels: the GPU when there is one, else the CPU (Triton interpreter)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def arch_marks(archs) -> list:
    """The pytest marks of the architectures an entry claims."""
    return [getattr(pytest.mark, arch.marker) for arch in sorted(archs, key=lambda arch: arch.value)]


def cell_params(entry) -> list:
    return [pytest.param(cell, id=cell.id) for cell in entry.cells]


@functools.lru_cache(maxsize=1)
def _ledger() -> list:
    return quarantine.load()


def judged(entry, module, name: str) -> Implementation:
    """``module.name`` as an implementation of ``entry``'s op, labelled as ``certify-cells --impl`` names it."""
    return Implementation(f"{module.__name__}:{name}", {entry.name: getattr(module, name)})


def certify_cell(entry, cell, impl: Implementation | None = None, **options) -> CellResult:
    """Run the battery on one cell with the active Hypothesis profile's number of draws.

    A cell the quarantine ledger holds for this machine's arch is not launched for the catalog
    kernel: the test is skipped with the ledger's reason (another ``impl`` is judged on it as usual).

    Graph parity is asked of the catalog kernels only: the suites' other implementations (negative
    controls, correct alternatives) are eager torch written to break one other property, and most cannot
    be captured at all.  On the H200 the graph oracle rejected them before the oracle each control
    targets, and a failed capture left torch's default CUDA generator unusable for the rest of the
    process.  The graph oracle's own controls are in ``suites/oracles/test_oracle_controls.py``.
    """
    held = quarantine.lookup(_ledger(), entry.name, cell.id, arch_of(machine_device())) if impl is None else None
    if held:
        pytest.skip(f"quarantined: {held.describe()}")
    options.setdefault("graph_parity_skipped", None if impl is None else "not asked of this implementation")
    impl = impl or Implementation.of_kernels(entry, kernels)
    options.setdefault("max_examples", settings.default.max_examples)
    options.setdefault("strategy", entry.strategy_module)
    return run_cell(entry, impl, cell, machine_device(), **options)


def certify_cells_here(words, capsys) -> tuple[int, str, str]:
    """``tools/certify-cells WORDS`` by its entry point's ``run_main``, in this process: (exit status, stdout,
    stderr).  For the tests of what the tool prints and exits with; its own process would add an interpreter
    start and the imports of torch, Triton and the catalog (the implementation still runs in its host)."""
    with pytest.raises(SystemExit) as stopped:
        run_main(certify_cells.main, list(words))
    printed = capsys.readouterr()
    return stopped.value.code, printed.out, printed.err


def assert_certified(result: CellResult, impl: str | None = None) -> None:
    assert result.status == "certified", describe(result, machine_device().type, impl)


def target_oracles(oracle: str | tuple[str, ...]) -> tuple[str, ...]:
    """The oracles a negative control is judged by: the one (or ones) that must catch its mistake."""
    return (oracle,) if isinstance(oracle, str) else tuple(oracle)


def assert_rejected(result: CellResult, oracle: str | tuple[str, ...], impl: str) -> None:
    """A negative control: the battery must reject ``impl``, and through the expected oracle (or one of
    the expected oracles, where two judge the bug and either may see it first)."""
    oracles = target_oracles(oracle)
    assert result.status == "failed", f"the battery accepted {impl}, which it must reject ({', '.join(oracles)})"
    assert set(result.failing()) & set(oracles), describe(result, machine_device().type, impl)


def cell_region(cell) -> dict:
    """A cell's whole region as a certificate's ``exercised`` records it: [lo, hi] per span, the names of its
    choices otherwise."""
    return {name: [bound.lo, bound.hi] if hasattr(bound, "lo") else [str(c).removeprefix("torch.") for c in bound.choices]
            for name, bound in cell.bounds.items()}


def routable_section(entry, cells: dict[str, dict], digest: str | None = None) -> dict:
    """A certificate section that meets ``ops.certificates.POLICY`` on this machine (on every arch), with ``cells``' records
    (each a full certified record over the cell's whole region unless it says otherwise) and ``digest`` in
    place of the code's if given.  Dispatch also asks for the report it names: write it with
    :func:`write_routable`."""
    from ops import certificates

    policy = certificates.POLICY
    least = policy.examples_on_every_arch()
    complete = {"status": certificates.CERTIFIED, "examples": least, "oracles": list(policy.oracles), "skipped": {}}
    return {"source_sha256": digest or certificates.source_digest(entry), "versions": certificates.toolchain(),
            "max_examples": least, "report_sha256": "0" * 64,
            "cells": {cell_id: {**complete, "exercised": cell_region(entry.cell(cell_id)), **record}
                      for cell_id, record in cells.items()}}


def write_routable(entry, arch, cells: dict[str, dict], digest: str | None = None, change: dict | None = None):
    """Write :func:`routable_section` (with ``change``'s fields over it) as ``arch``'s section of the entry's
    certificate, with a report beside it whose sha256 it names: what a certifying run leaves."""
    from ops import certificates

    return certificates.write_section(entry, arch, {**routable_section(entry, cells, digest), **(change or {})},
                                      report={"results": [], "written_by": "suites.certification.write_routable"})
