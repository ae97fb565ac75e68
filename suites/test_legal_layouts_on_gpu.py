"""Outputs judged by value on the GPU (issue #24.2): ``suites.legal_layouts`` runs the catalog's kernels there
and returns their outputs in a legal layout drawn afresh each call; every op must pass every cell, through
the implementation host, at its smallest corner.

The stateful properties feed those outputs back as inputs (gdn_verify's checkpoints into gdn_commit, whose
kernel reads each checkpoint as one contiguous block): on the H200 that once failed gdn_decode and
gdn_verify with the kernel's own refusal (``docs/results/2026-12-02c/layouts_h200.log``), a defect of the
legal-layouts implementation, not of the kernels.  The CPU half, and the aliasing controls that must fail,
are ``suites/test_legal_layouts.py``.
"""
from __future__ import annotations

import pytest
import torch

from oracles.battery import run_cell
from ops.catalog import entries
from suites.test_legal_layouts import MODULE, SmallestCorner
from tools.engine.worker import hosted_implementation, implementation_host

pytestmark = pytest.mark.sm90


@pytest.mark.parametrize("op_name", sorted(entries()))
def test_legal_layouts_pass_every_cell_on_the_gpu(op_name):
    entry = entries()[op_name]
    impl = hosted_implementation(f"{MODULE}:{op_name}", op_name, None, implementation_host(MODULE, "cuda", 120))
    failed = [f"{result.cell_id}: {result.failure.oracle}: {result.failure.message} ({result.failure.recipe})"
              for result in (run_cell(entry, impl, cell, torch.device("cuda"), max_examples=0, shrink=False,
                                      strategy=SmallestCorner(entry.strategy_module)) for cell in entry.cells)
              if result.status != "certified"]
    assert not failed
