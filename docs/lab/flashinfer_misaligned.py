"""Where FlashInfer's decode meets "CUDA error: misaligned address" on the H200 (2026-12-04: every cell of
paged_decode died under the write guards on an 'edges' / 'padded_last' corner).  One step a process (a CUDA
error ends the context): ``python3 docs/lab/flashinfer_misaligned.py STEP RECIPE_JSON`` with STEP one of
plain (the adapter on the recipe's inputs), cloned (on ``clone_inputs`` copies, as the write guards give
them), poisoned (under ``PoisonedAllocations``, as the host runs it for the write guards).  Each prints the
inputs' strides and 16-byte alignment, then the allocations made during the call, then ok or the error."""
from __future__ import annotations

import json
import sys
import traceback

import torch

from ops.catalog import op
from oracles.allocations import PoisonedAllocations
from oracles.tensors import clone_inputs
from suites.thirdparty import flashinfer_decode as adapter


def describe(name, t):
    return (f"{name}: {tuple(t.shape)} {t.dtype} stride {t.stride()} offset {t.storage_offset()} "
            f"ptr%16 {t.data_ptr() % 16} ptr%128 {t.data_ptr() % 128}")


def main(step: str, recipe: dict) -> None:
    entry = op("paged_decode")
    call = entry.strategy_module.build(recipe, torch.device("cuda"))
    if step == "cloned":
        call = clone_inputs(call)
    for name, value in call.items():
        print(describe(name, value) if isinstance(value, torch.Tensor) else f"{name}: {value!r}")
    mode = PoisonedAllocations(0xFF) if step == "poisoned" else None
    try:
        if mode is None:
            adapter.paged_decode(**call)
        else:
            with mode:
                adapter.paged_decode(**call)
        torch.cuda.synchronize()
        print(f"{step}: ok")
    except Exception:  # noqa: BLE001 - the point is to print it
        traceback.print_exc(limit=6)
        print(f"{step}: error")
    for tensor, _ in (mode.allocations if mode is not None else []):
        print("  allocated", describe("", tensor))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
