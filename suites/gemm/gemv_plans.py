"""The GEMVs' launch-plan variants (``gemv_launch.VARIANT_SHAPES``) as implementations for the battery.

``tools/bench --variants`` times every variant on the device and the lead makes the winner the default:
each must be a correct GEMV before it can be. On a GPU every shape is its own compiled kernel; under the
interpreter (block sizes fixed, see ``gemv_launch``) shapes differ only in the design they run, tensor-core
or CUDA-core products at M = 1, so one shape per design stands for the rest.
"""
from __future__ import annotations

from oracles.battery import Implementation
from ops.gemm.gemv_launch import VARIANT_SHAPES, PlanShape
from ops.triton_backend import interpreting


def shapes_to_judge(default: PlanShape) -> list[PlanShape]:
    """Every variant shape on a GPU; under the interpreter one per design, the default's first."""
    if not interpreting():
        return list(VARIANT_SHAPES)
    designs = {}
    for shape in (default, *VARIANT_SHAPES):
        designs.setdefault(shape.cores_at_m1, shape)
    return list(designs.values())


def planned(entry, op_module, shape: PlanShape) -> Implementation:
    """``op_module``'s kernel launched on ``shape``'s plan, refusals included."""
    def run(x, **weight):
        op_module.contract.validate(x, **weight)
        return op_module.run_plan(x, **weight, plan=op_module.plan_for(x, next(iter(weight.values())), shape))
    return Implementation(f"{op_module.__name__} on {shape.label()}", {entry.name: run})
