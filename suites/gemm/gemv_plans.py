"""The GEMVs' launch-plan variants (each op's ``VARIANT_SHAPES``) as implementations for the battery.

``tools/bench --variants`` times every variant on the device and the lead makes the winner the default:
each must be a correct GEMV before it can be. A design is what a shape's kernel computes differently
(tensor-core or CUDA-core products at M = 1, NVFP4's decode and loop options; on a GPU also the
float32 decode, the decode into the operand registers and its x through shared memory). On a GPU every
design meets every cell's corners (the default plan's in ``test_cell``), and every tile (rows, step, warps,
rows a warp) of every design, its own compiled kernel, meets narrow_outputs' corners (tails of K, M = 1
and 16, split K) as well; shapes that differ only in pipeline depth or split threshold are
not judged again. Under the interpreter the block sizes are fixed (``gemv_launch``), so one shape per design stands
for the rest, and each design meets narrow_outputs' corners alone: they reach both launch paths (split K and
one pass) at M = 1 and M = 16 and a tail of K (``test_corners_reach_both_launch_paths...`` checks it), where
wide_outputs' reach the one-pass path only. A design's wide_outputs corners are judged on the GPU list
(``test_lists/l0_h200.yml``), where they run in milliseconds; docs/ci.md (2026-12-06) gives the reason.
"""
from __future__ import annotations

from oracles.battery import Implementation
from ops.gemm.gemv_launch import PlanShape
from ops.triton_backend import interpreting
from references.validation import require_within_limits


def _design(shape: PlanShape) -> tuple:
    if interpreting():  # the placed decode's twin (values times 2**-7), the prefetch, the stepped loop run here too
        return shape.cores_at_m1, shape.placed_decode, shape.prefetch_scales, shape.stepped
    return (shape.cores_at_m1, shape.float32_decode and shape.cores_at_m1, shape.placed_decode,
            shape.prefetch_scales, shape.stepped, shape.operand_decode, shape.operand_decode and shape.x_shared)


# The cell whose corners reach every launch path of a design (under the interpreter the only one judged).
EVERY_PATH_CELL = "narrow_outputs"


def shapes_to_judge(entry, default: PlanShape, shapes: tuple[PlanShape, ...]) -> list[tuple]:
    """(cell, shape) pairs of the op's variant ``shapes``: one shape per design other than ``default``'s
    (the op's M = 1 default, whose design ``test_cell`` judges) on every cell (under the interpreter on
    :data:`EVERY_PATH_CELL`), and on a GPU one shape per other tile on narrow_outputs."""
    designs = {_design(default): default}
    for shape in shapes:
        designs.setdefault(_design(shape), shape)
    cells = [entry.cell(EVERY_PATH_CELL)] if interpreting() else entry.cells
    pairs = [(cell, shape) for cell in cells for shape in designs.values() if shape is not default]
    if not interpreting():  # every tile and design; the pipeline depth and the split threshold aside
        def tile(shape):  # the operand decode's warps are its rows over rows_a_warp
            return shape.block_n, shape.step_bytes, shape.num_warps, shape.rows_a_warp, _design(shape)
        tiles = {tile(default): default}
        for shape in shapes:
            if shape not in designs.values():
                tiles.setdefault(tile(shape), shape)
        pairs += [(entry.cell(EVERY_PATH_CELL), shape) for shape in tiles.values() if shape is not default]
    return pairs


# (launch path, M) each variant design meets on EVERY_PATH_CELL's corners under the interpreter
EVERY_PATH = {("split_k", 1), ("one_pass", 1), ("split_k", 16), ("one_pass", 16)}


def launch_paths(op_module, shape: PlanShape, built: list[dict]) -> set[tuple[str, int]]:
    """(``split_k`` or ``one_pass``, M) of ``shape``'s plan on each of the ``built`` inputs (``strategy.build``'s)."""
    def plan(x, **weight):
        return op_module.plan_for(x, next(iter(weight.values())), shape)
    return {("split_k" if plan(**kwargs).splits > 1 else "one_pass", kwargs["x"].shape[0]) for kwargs in built}


def paths_not_reached(entry, op_module, every_path_corners: list[dict]) -> dict[str, list]:
    """Each variant design judged under the interpreter (on :data:`EVERY_PATH_CELL` alone) whose own plan, on
    that cell's built corners, misses some of :data:`EVERY_PATH`: its label -> what it misses."""
    missed = {}
    for _, shape in shapes_to_judge(entry, op_module.DEFAULT_M1_SHAPE, op_module.VARIANT_SHAPES):
        paths = launch_paths(op_module, shape, every_path_corners)
        if not EVERY_PATH <= paths:
            missed[shape.label()] = sorted(EVERY_PATH - paths)
    return missed


def planned(entry, op_module, shape: PlanShape) -> Implementation:
    """``op_module``'s kernel launched on ``shape``'s plan, refusals included (the contract's and the kernel's)."""
    def run(x, **weight):
        op_module.contract.validate(x, **weight)
        if entry.limits is not None:
            require_within_limits(entry.limits(x, **weight))
        return op_module.run_plan(x, **weight, plan=op_module.plan_for(x, next(iter(weight.values())), shape))
    return Implementation(f"{op_module.__name__} on {shape.label()}", {entry.name: run})
