"""norm/rms_norm_gated — gated RMSNorm over groups of channels, with the FP8 amax of its output (Triton).

Contract (CONTRACTS.md): ``rms_norm_gated(x[T, H], z | None, weight[H], eps, group_size,
norm_before_gate=True, amax=None) -> y bf16[T, H]``; per row and group of ``group_size`` channels, in
fp32: ``y = x * rsqrt(mean(x^2) + eps) * w * silu(z)`` (norm, then gate) or ``u = x * silu(z)``,
``y = u * rsqrt(mean(u^2) + eps) * w`` (gate, then norm); rounded once to bf16.  ``amax`` (fp32, one
element) becomes ``max(amax, max |y|)`` over the returned bf16 values.  Band parity for ``y``,
exact self-consistency for ``amax``; batch-invariant.  Its CuTe DSL twin is ``rms_norm_gated_cute.py``;
cells and byte count are shared (``rms_norm_gated_cells.py``): one pass over x, z and y.

A program normalizes rows ``program, program + programs, ...`` one at a time (by default one program
a row, ``programs == rows``; persistent plans launch as many programs as are resident), each row held as a
``[GROUPS, GROUP]`` tile (groups padded to powers of two, masked), each group's sum of squares one
``tl.sum`` over the last axis.  Every row is reduced by the same code whichever program takes it and
whatever rows come before or after it: no row shares a tile with a neighbour, and the tile depends on H
and the group size alone, never on T, which keeps the op batch-invariant.  Multiply-adds are not fused
(``enable_fp_fusion=False``; a bench variant times fusion): each product and sum rounds on its own, as the
contract's fp32 arithmetic is written.  Division and square root round to nearest (``div_rn``,
``sqrt_rn``) and ``exp`` is libdevice's; bf16 goes through the exact conversions of ``ops/triton_backend``.
A plan with ``fast_math`` (bench variants only, until certified) takes silu and rstd from the GPU's
approximations instead (``ex2.approx``, ``rcp.approx``, ``rsqrt.approx``: within 2^-16 of silu and rstd,
the rounding of exp's argument included), which y's one rounding to bf16 hides: the band is a bf16 ulp,
2^-8 of the row's largest |y| at least (docs/ops/rms_norm_gated.md).
x and z are read once: their loads ask to be evicted first, leaving L2 to the weight every row reads.

Cost model (H200 bench case [8192, 4096], group 128, gate, amax): 201 MB move in 47 us at copy
bandwidth, and the per-element arithmetic (~45 SASS instructions an element at 8 warps a row) issues in
about as long.  So the plan spends no instruction it can avoid: no masks when the row fills the tile, the
group mean as an exact multiplication by 1/group when the group is a power of two, the GPU's own bf16
rounding, one relaxed atomic a program.  The counts and the kernels before this one:
docs/ops/rms_norm_gated.md.

amax: each program takes the largest ``|y|`` of its rows as the 15 low bits of the bf16 pattern —
``|y|`` has a clear sign bit, and non-negative bf16 values order as their bit patterns do (+inf below
every NaN) — and folds it, as the high half of an fp32 pattern read as int32, into ``amax`` with one
relaxed integer ``atomic_max``.  Integer max is associative and commutative, so whatever order the
atomics land in, ``amax`` ends at ``max(old, max |y|)`` exactly (no ordering is asked of the atomic: the
value is read after the kernel); an old value that is negative reads as a negative int32 and loses to any
``|y|``, as it does in float.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from ops.catalog import ALL_ARCHS
from ops.norm import rms_norm_gated_cells as claims
from ops.triton_backend import exp_fp32, float32_to_bf16_rne, sm_count
from ops.triton_masks import block_and
from references.norm import rms_norm_gated as contract


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    groups: int                  # groups per row, padded to a power of two
    group: int                   # channels per group, padded to a power of two
    num_warps: int
    programs_per_sm: int | None = None  # persistent programs per multiprocessor; None: one program a row
    evict_first: bool = True     # x and z loads marked evict-first (read once)
    prefetch: bool = False       # persistent: load the next row's x and z before normalizing this one
    fp_fusion: bool = False      # let the compiler fuse multiply-adds (changes y's bits: bench only)
    fast_math: bool = False      # approximate exp, reciprocal and rsqrt (changes y's bits: bench only)


def launch_plan(width: int, group_size: int, elements_per_thread: int = 16, max_warps: int = 8) -> LaunchPlan:
    group = triton.next_power_of_2(group_size)
    groups = triton.next_power_of_2(width // group_size)
    # 16 elements a thread: two 16-byte loads of each of x and z in flight per thread (8 warps a row at
    # H = 4096).  Persistent programs, 2 an SM, each loading its next row before normalizing this one: the
    # H200 sweep's best, 66.2 us at [8192, 4096], 71.5% of copy (docs/ops/rms_norm_gated.md).
    warps = max(1, min(max_warps, group * groups // (32 * elements_per_thread)))
    return LaunchPlan(groups=groups, group=group, num_warps=triton.next_power_of_2(warps), programs_per_sm=2,
                      prefetch=True)


def bench_variants(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> dict:
    """Launch plans around the default, for ``tools/bench --variants``, at 4, 8 and 16 warps a row: one
    program a row, without evict-first loads, with fused multiply-adds, and persistent
    programs (2 or 4 an SM) with and without the next row prefetched; and the prefetching persistent plans
    with fast math, alone and with fused multiply-adds.  Fusion and fast math change the numerics: a winner
    there needs the band re-certified before it can be the default."""
    variants = {}

    def add(label, plan):
        variants[label] = lambda plan=plan, **kwargs: run_plan(plan, **kwargs)

    for elements_per_thread in (32, 16, 8):
        plan = dataclasses.replace(launch_plan(x.shape[1], group_size, elements_per_thread, max_warps=16),
                                   programs_per_sm=None, prefetch=False)
        warps = f"{plan.num_warps} warps"
        add(f"{warps}, one program a row", plan)
        add(f"{warps}, one program a row, no evict-first", dataclasses.replace(plan, evict_first=False))
        add(f"{warps}, one program a row, fp fusion (numerics differ)", dataclasses.replace(plan, fp_fusion=True))
        for programs_per_sm in (2, 4):
            persistent = dataclasses.replace(plan, programs_per_sm=programs_per_sm)
            add(f"{warps}, {programs_per_sm} persistent programs/SM", persistent)
            prefetching = dataclasses.replace(persistent, prefetch=True)
            add(f"{warps}, {programs_per_sm} persistent programs/SM, next row prefetched", prefetching)
            fast = dataclasses.replace(prefetching, fast_math=True)
            add(f"{warps}, {programs_per_sm} persistent programs/SM, next row prefetched, fast math (numerics differ)",
                fast)
            add(f"{warps}, {programs_per_sm} persistent programs/SM, next row prefetched, fast math, fp fusion "
                f"(numerics differ)", dataclasses.replace(fast, fp_fusion=True))
    return variants


# -- kernel ---------------------------------------------------------------------------------------
@triton.jit
def _load_row(x_ptr, x_row_stride, x_col_stride, z_ptr, z_row_stride, z_col_stride, row, col, inside,
              GATE: tl.constexpr, STREAM: tl.constexpr):
    """One row's x and z as loaded, bf16 (z is x without a gate, and is then not read)."""
    row = tl.cast(row, tl.int64)  # row * stride past 2**31 elements
    x = tl.load(x_ptr + row * x_row_stride + col * x_col_stride, mask=inside, other=0.0, eviction_policy=STREAM)
    z = x
    if GATE != "none":
        z = tl.load(z_ptr + row * z_row_stride + col * z_col_stride, mask=inside, other=0.0,
                    eviction_policy=STREAM)
    return x, z


@triton.jit
def _silu(z, FAST_MATH: tl.constexpr):
    """silu(z) = z / (1 + exp(-z)), fp32."""
    if FAST_MATH:
        # (z/4) / (1/4 + 2^(-z log2(e) - 2)): ex2.approx.ftz and rcp.approx.ftz (fast_dividef of 1), 8
        # instructions where libdevice's exp and the rounded division issue ~22.  The quarters keep rcp's argument
        # below 2^126 wherever exp(-z) is finite, so that its result is never subnormal (.ftz would flush it), and
        # z/4 is exact (z is bf16); the last product does not flush: a subnormal silu stays, as the exact path's.
        gate = (z * 0.25) * libdevice.fast_dividef(1.0, 0.25 + tl.math.exp2(z * -1.4426950408889634 - 2.0))
    else:
        # z * -1 rather than -z (0 - z) lets ptxas fold the sign into exp's first multiply-add
        gate = tl.math.div_rn(z, 1.0 + exp_fp32(z * -1.0))
    return gate


@triton.jit
def _rsqrt(value, FAST_MATH: tl.constexpr):
    """1 / sqrt(value), fp32 (a group's mean square plus eps)."""
    if FAST_MATH:
        # tl.math.rsqrt is rsqrt.approx.ftz, which reads a subnormal as 0 (rstd inf where the exact path is
        # finite, eps 0): such a value is lifted by 2^24 first and its root brought back by 2^12
        lifted = value < 1.1754943508222875e-38
        root = tl.math.rsqrt(tl.where(lifted, value * 16777216.0, value)) * tl.where(lifted, 4096.0, 1.0)
    else:
        root = tl.math.div_rn(1.0, tl.math.sqrt_rn(value))
    return root


# rows is the persistent loop's bound (bounds and index tensors: one compile per plan); x, z, w and
# their strides stay specialized: they set the width of the row loads.
@triton.jit(do_not_specialize=["rows"])
def _rms_norm_gated_rows(
    # inputs (z is x when there is no gate: never read then)
    x_ptr, x_row_stride, x_col_stride, z_ptr, z_row_stride, z_col_stride, w_ptr, w_stride,
    # outputs: y (contiguous) and amax's bits (int32; unused without WRITE_AMAX)
    y_ptr, amax_bits_ptr,
    # sizes
    rows, width, group_size, group_divisor, eps,
    # meta
    GROUPS: tl.constexpr, GROUP: tl.constexpr, WRITE_AMAX: tl.constexpr,
    GATE: tl.constexpr,        # "none", "norm_then_gate" or "gate_then_norm" (rms_norm_gated_cells.gate_of)
    WHOLE_TILE: tl.constexpr,  # the row fills the tile exactly: no padding lanes, no masks
    STREAM: tl.constexpr,      # eviction policy of the read-once x and z loads
    PREFETCH: tl.constexpr,    # load a program's next row before normalizing this one (persistent plans)
    FAST_MATH: tl.constexpr,   # silu and rstd from the GPU's approximations (_silu, _rsqrt)
):
    lane = tl.arange(0, GROUP)[None, :]
    if WHOLE_TILE:
        col = tl.arange(0, GROUPS)[:, None] * GROUP + lane
        inside = tl.full((GROUPS, GROUP), True, tl.int1)  # folds away
    else:
        col = tl.arange(0, GROUPS)[:, None] * group_size + lane
        inside = (lane < group_size) & (col < width)
    w = tl.load(w_ptr + col * w_stride, mask=inside, other=0.0).to(tl.float32)
    largest = tl.zeros((), dtype=tl.int32)
    programs = tl.num_programs(0)
    if PREFETCH:
        x_next, z_next = _load_row(x_ptr, x_row_stride, x_col_stride, z_ptr, z_row_stride, z_col_stride,
                                   tl.program_id(0), col, inside, GATE, STREAM)
    for row in range(tl.program_id(0), rows, programs):
        if PREFETCH:
            x_held, z_held = x_next, z_next
            x_next, z_next = _load_row(x_ptr, x_row_stride, x_col_stride, z_ptr, z_row_stride, z_col_stride,
                                       row + programs, col, block_and(inside, row + programs < rows), GATE, STREAM)
        else:
            x_held, z_held = _load_row(x_ptr, x_row_stride, x_col_stride, z_ptr, z_row_stride, z_col_stride,
                                       row, col, inside, GATE, STREAM)
        x = x_held.to(tl.float32)
        u = x
        if GATE != "none":
            gate = _silu(z_held.to(tl.float32), FAST_MATH)
            if GATE == "gate_then_norm":
                u = x * gate
        # padding lanes hold 0 and add nothing to a group's sum of squares
        square_sum = tl.sum(u * u, axis=1)
        if WHOLE_TILE:  # the group size is a power of two: dividing by it is this exact multiplication
            mean_square = square_sum * (1.0 / GROUP)
        else:
            mean_square = tl.math.div_rn(square_sum, group_divisor)
        rstd = _rsqrt(mean_square + eps, FAST_MATH)
        y = u * rstd[:, None] * w
        if GATE == "norm_then_gate":
            y = y * gate
        y = float32_to_bf16_rne(y)
        tl.store(y_ptr + tl.cast(row, tl.int64) * width + col, y, mask=inside)
        if WRITE_AMAX:
            # |y|'s bf16 bits (see the module docstring for why an integer max is exact and order-free)
            bits = y.to(tl.uint16, bitcast=True).to(tl.int32) & 0x7FFF
            if not WHOLE_TILE:  # padding lanes out (a padded group's rstd is inf when eps is 0: y there is NaN)
                bits = tl.where(inside, bits, 0)
            largest = tl.maximum(largest, tl.max(tl.max(bits, axis=1), axis=0))
    if WRITE_AMAX:
        tl.atomic_max(amax_bits_ptr, largest << 16, sem="relaxed")


# -- host wrapper ---------------------------------------------------------------------------------
def _programs(plan: LaunchPlan, rows: int, device: torch.device) -> int:
    if plan.programs_per_sm is None:
        return rows
    # off the GPU (the interpreter) sm_count is small, so that the CPU suites still see rows shared out
    return min(rows, plan.programs_per_sm * sm_count(device))


def run_plan(plan: LaunchPlan, x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    """Launch ``plan`` on already-validated arguments (``tools/bench`` sweeps plans through this)."""
    rows, width = x.shape
    y = torch.empty((rows, width), dtype=torch.bfloat16, device=x.device)
    if y.numel() == 0:
        return y
    gate = claims.gate_of(z, norm_before_gate)  # "none", "norm_then_gate" or "gate_then_norm"
    gate_input = x if z is None else z
    _rms_norm_gated_rows[(_programs(plan, rows, x.device),)](
        x, x.stride(0), x.stride(1), gate_input, gate_input.stride(0), gate_input.stride(1),
        weight, weight.stride(0),
        y, y if amax is None else amax.view(torch.int32),
        rows, width, group_size, float(group_size), float(eps),
        GROUPS=plan.groups, GROUP=plan.group, GATE=gate, WRITE_AMAX=amax is not None,
        WHOLE_TILE=plan.group == group_size and plan.groups * plan.group == width,
        STREAM="evict_first" if plan.evict_first else "", PREFETCH=plan.prefetch, FAST_MATH=plan.fast_math,
        num_warps=plan.num_warps, enable_fp_fusion=plan.fp_fusion,
    )
    return y


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    return run_plan(launch_plan(x.shape[1], group_size), x, z, weight, eps, group_size, norm_before_gate, amax)


# -- catalog entry --------------------------------------------------------------------------------
ENTRY = claims.entry(rms_norm_gated, ALL_ARCHS, "triton")
