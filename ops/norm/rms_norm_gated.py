"""norm/rms_norm_gated — gated RMSNorm over groups of channels, with the FP8 amax of its output (Triton).

Contract (CONTRACTS.md): ``rms_norm_gated(x[T, H], z | None, weight[H], eps, group_size,
norm_before_gate=True, amax=None) -> y bf16[T, H]``; per row and group of ``group_size`` channels, in
fp32: ``y = x * rsqrt(mean(x^2) + eps) * w * silu(z)`` (norm, then gate) or ``u = x * silu(z)``,
``y = u * rsqrt(mean(u^2) + eps) * w`` (gate, then norm); rounded once to bf16.  ``amax`` (fp32, one
element) becomes ``max(amax, max |y|)`` over the returned bf16 values.  Band parity for ``y``,
exact self-consistency for ``amax``; batch-invariant.  Its CuTe DSL twin is ``rms_norm_gated_cute.py``;
cells and byte count are shared (``rms_norm_gated_cells.py``): one pass over x, z and y.

A program is persistent: it normalizes rows ``program, program + programs, ...`` one at a time, each
held as a ``[GROUPS, GROUP]`` tile (groups padded to powers of two, masked), each group's sum of squares
one ``tl.sum`` over the last axis.  Every row is reduced by the same code whichever program takes it
and whatever rows come before or after it: no row shares a tile with a neighbour (an earlier plan put
several narrow rows in one ``[ROWS, GROUPS, GROUP]`` tile, and on the H200 a row's bits then depended
on its slot in the tile: 10 of 8.2M values differed when the batch was rotated by one row).  The tile
depends on H and the group size alone, never on T, which keeps the op batch-invariant; the number of
programs (as many as are resident at once) changes only which program takes a row.  Multiply-adds are not
fused (``enable_fp_fusion=False``): each product and sum rounds on its own, as the contract's fp32
arithmetic is written.  Division and square root round to nearest (``div_rn``, ``sqrt_rn``) and
``exp`` is libdevice's; bf16 goes through the exact conversions of ``ops/triton_backend``.

amax: each program takes the largest ``|y|`` of its rows as int32 bits — ``|y|`` has a clear sign bit,
and non-negative floats order as their bit patterns do (+inf below every NaN) — and folds it into
``amax`` with one integer ``atomic_max`` at its end — one atomic per program, not per row: 8192
atomics on the one address of ``amax`` serialize in L2, the likely bound of the earlier one-row
programs (the H200 bench case took 82.8 us there, 57% of copy bandwidth).  Integer max is associative and commutative, so whatever
order the programs' atomics land in, ``amax`` ends at ``max(old, max |y|)`` exactly; an old value that
is negative reads as a negative int32 and loses to any ``|y|``, as it does in float.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, Entry, Parity
from ops.norm import rms_norm_gated_cells as claims
from ops.triton_backend import bf16_bits_to_float32, exp_fp32, float32_to_bf16_rne
from references.norm import rms_norm_gated as contract

NO_GATE, NORM_THEN_GATE, GATE_THEN_NORM = 0, 1, 2
GATE_CODES = {"none": NO_GATE, "norm_then_gate": NORM_THEN_GATE, "gate_then_norm": GATE_THEN_NORM}


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    groups: int                 # groups per row, padded to a power of two
    group: int                  # channels per group, padded to a power of two
    num_warps: int
    programs_per_sm: int | None  # persistent programs per multiprocessor; None: one program a row


def launch_plan(width: int, group_size: int, elements_per_thread: int = 16, max_warps: int = 8,
                programs_per_sm: int | None = 3) -> LaunchPlan:
    group = triton.next_power_of_2(group_size)
    groups = triton.next_power_of_2(width // group_size)
    # 16 elements a thread: two 16-byte loads of each of x, z and weight in flight per thread
    # (H200 bench case: [8192, 4096], 256 threads a row; ptxas: 16-byte loads, 80 registers, no spills,
    # so 3 such programs are resident on an SM: 396 programs, 396 atomics for 8192 rows).
    warps = max(1, min(max_warps, group * groups // (32 * elements_per_thread)))
    return LaunchPlan(groups=groups, group=group, num_warps=triton.next_power_of_2(warps),
                      programs_per_sm=programs_per_sm)


def bench_variants(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> dict:
    """Launch plans around the default, for ``tools/bench --variants``: warps a row, and programs per
    multiprocessor (persistent) or one program a row (one amax atomic a row, the plan before)."""
    variants = {}
    for elements_per_thread in (8, 16, 32):
        for programs_per_sm in (2, 3, 4, 8, None):
            plan = launch_plan(x.shape[1], group_size, elements_per_thread, max_warps=16,
                               programs_per_sm=programs_per_sm)
            programs = "one program a row" if programs_per_sm is None else f"{programs_per_sm} programs/SM"
            variants[f"{plan.num_warps} warps, {programs}"] = lambda plan=plan, **kwargs: run_plan(plan, **kwargs)
    return variants


# -- kernel ---------------------------------------------------------------------------------------
@triton.jit
def _rms_norm_gated_rows(
    # inputs (z is x when there is no gate: never read then)
    x_ptr, x_row_stride, x_col_stride, z_ptr, z_row_stride, z_col_stride, w_ptr, w_stride,
    # outputs: y (contiguous) and amax's bits (int32; unused without WRITE_AMAX)
    y_ptr, amax_bits_ptr,
    # sizes
    rows, width, group_size, group_divisor, eps,
    # meta
    GROUPS: tl.constexpr, GROUP: tl.constexpr, GATE: tl.constexpr, WRITE_AMAX: tl.constexpr,
):
    lane = tl.arange(0, GROUP)[None, :]
    col = tl.arange(0, GROUPS)[:, None] * group_size + lane
    inside = (lane < group_size) & (col < width)
    w = bf16_bits_to_float32(tl.load(w_ptr + col * w_stride, mask=inside, other=0.0))
    largest = tl.zeros((), dtype=tl.int32)
    for row in range(tl.program_id(0), rows, tl.num_programs(0)):
        row = tl.cast(row, tl.int64)  # row * stride past 2**31 elements
        x = bf16_bits_to_float32(tl.load(x_ptr + row * x_row_stride + col * x_col_stride, mask=inside, other=0.0))
        u = x
        if GATE != 0:
            z = bf16_bits_to_float32(tl.load(z_ptr + row * z_row_stride + col * z_col_stride, mask=inside,
                                             other=0.0))
            gate = tl.math.div_rn(z, 1.0 + exp_fp32(-z))  # silu(z)
            if GATE == 2:
                u = x * gate
        # padding lanes hold 0 and add nothing to a group's sum of squares
        mean_square = tl.math.div_rn(tl.sum(u * u, axis=1), group_divisor)
        rstd = tl.math.div_rn(1.0, tl.math.sqrt_rn(mean_square + eps))
        y = u * rstd[:, None] * w
        if GATE == 1:
            y = y * gate
        y = float32_to_bf16_rne(y)
        tl.store(y_ptr + row * width + col, y, mask=inside)
        if WRITE_AMAX:
            # |y| as int32 bits (see the module docstring for why an integer max is exact and order-free)
            bits = (y.to(tl.uint16, bitcast=True).to(tl.int32) << 16) & 0x7FFFFFFF
            largest = tl.maximum(largest, tl.max(tl.max(tl.where(inside, bits, 0), axis=1), axis=0))
    if WRITE_AMAX:
        tl.atomic_max(amax_bits_ptr, largest)


# -- host wrapper ---------------------------------------------------------------------------------
def _programs(plan: LaunchPlan, rows: int, device: torch.device) -> int:
    if plan.programs_per_sm is None:
        return rows
    # off the GPU (the interpreter) two programs, so that the CPU suites still see rows shared out
    multiprocessors = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2
    return min(rows, plan.programs_per_sm * multiprocessors)


def run_plan(plan: LaunchPlan, x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    """Launch ``plan`` on already-validated arguments (``tools/bench`` sweeps plans through this)."""
    rows, width = x.shape
    y = torch.empty((rows, width), dtype=torch.bfloat16, device=x.device)
    if y.numel() == 0:
        return y
    gate = GATE_CODES[claims.gate_of(z, norm_before_gate)]
    gate_input = x if z is None else z
    _rms_norm_gated_rows[(_programs(plan, rows, x.device),)](
        x, x.stride(0), x.stride(1), gate_input, gate_input.stride(0), gate_input.stride(1),
        weight, weight.stride(0),
        y, y if amax is None else amax.view(torch.int32),
        rows, width, group_size, float(group_size), float(eps),
        GROUPS=plan.groups, GROUP=plan.group, GATE=gate, WRITE_AMAX=amax is not None,
        num_warps=plan.num_warps, enable_fp_fusion=False,
    )
    return y


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    return run_plan(launch_plan(x.shape[1], group_size), x, z, weight, eps, group_size, norm_before_gate, amax)


# -- catalog entry --------------------------------------------------------------------------------
ENTRY = Entry.of_contract(
    contract,
    kernel=rms_norm_gated,
    parity=Parity.BAND,
    params_of=claims.params_of,
    cells=claims.CELLS,
    archs=ALL_ARCHS,
    batch_invariant=True,
    batch_args=("x", "z"),
    in_place=("amax",),
    properties=(contract.amax_is_max_of_returned_values,),
    bench=claims.BENCH,
    backend="triton",
)
