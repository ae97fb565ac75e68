"""norm/rms_norm_gated — gated RMSNorm over groups of channels, with the FP8 amax of its output (CuTe DSL).

Contract (CONTRACTS.md): ``rms_norm_gated(x[T, H], z | None, weight[H], eps, group_size,
norm_before_gate=True, amax=None) -> y bf16[T, H]``; per row and group of ``group_size`` channels, in
fp32: ``y = x * rsqrt(mean(x^2) + eps) * w * silu(z)`` (norm, then gate) or ``u = x * silu(z)``,
``y = u * rsqrt(mean(u^2) + eps) * w`` (gate, then norm); rounded once to bf16.  ``amax`` (fp32, one
element) becomes ``max(amax, max |y|)`` over the returned bf16 values.  The Triton kernel of the same
contract is ``rms_norm_gated.py``; cells, bench case and byte count are shared
(``rms_norm_gated_cells.py``): one pass over x, z and y, 201 MB for [8192, 4096] with a gate.

One CTA normalizes one row.  Its threads own *chunks* of 8 consecutive channels (16 bytes of bf16),
chunk ``k * threads + t`` for thread ``t`` and ``k < CHUNKS_PER_THREAD``, held in registers from the
loads to the store: one pass over memory.  A group of 8..256 channels (``WARP_GROUP_SIZES``) is
``group_size / 8`` aligned lanes of one warp at one ``k``, reduced with butterfly shuffles; a group
that is the whole row is reduced over the CTA (shuffles, then one fp32 a warp through shared memory,
summed in warp order).  Every order is fixed by H and the group size alone, so a row is reduced the
same way at any T: batch-invariant.  Division, square root and reciprocal round to nearest
(``div.rn``, ``sqrt.rn``, ``rcp.rn``) and ``exp`` is CUDA's ``expf``, as the contract's fp32 asks.

amax: the CTA's largest ``|y|`` is taken over the bf16 values it stores, as int32 bits — ``|y|`` has a
clear sign bit, and non-negative floats order as their bit patterns do (+inf below every NaN) — and
folded into ``amax`` with one integer ``atomic_max``.  Integer max is associative and commutative, so
in whatever order the CTAs' atomics land, ``amax`` ends at ``max(old, max |y|)`` exactly; an old value
that is negative reads as a negative int32 and loses to any ``|y|``, as it does in float.

Kernels are compiled per launch plan (``whole_row``, ``vector``, ``gate``, ``threads``) and target arch,
on first use (``compiled``).  The thread count is compiled in, as quack's RMSNorm compiles its own: the
block size is then known to the compiler (``nvvm.reqntid``), and every loop bound is a constant.
``reachable_plans`` lists every plan ``launch_plan`` can return, and the CPU compile gate
(``suites/test_cute_compile.py``) compiles each for every arch the entry claims.
"""
from __future__ import annotations

import dataclasses
import functools

import cuda.bindings.driver as cuda
import torch

from ops.cute_dsl import cute, cutlass  # first: it puts the DSL's packages on the path

from cutlass import BFloat16, Float32, Int32, Int64, const_expr  # noqa: E402,I001
from cutlass.cute.runtime import make_ptr  # noqa: E402
from cutlass.memory import SmemAllocator  # noqa: E402

from ops.catalog import Arch, arch_of  # noqa: E402
from ops.norm import rms_norm_gated_cells as claims
from references.norm import rms_norm_gated as contract

CHUNK = 8                  # channels a thread loads at once: 16 bytes of bf16
CHUNKS_PER_THREAD = 2      # two 16-byte loads of each of x, z and weight in flight per thread
MAX_THREADS = 1024
MAX_WIDTH = CHUNK * CHUNKS_PER_THREAD * MAX_THREADS  # 16384 channels: rows held in registers
WARP_SIZE = 32
WARP_GROUP_SIZES = (8, 16, 32, 64, 128, 256)  # a power of two of chunks, at most one warp's worth
SHUFFLE_OFFSETS = (16, 8, 4, 2, 1)
# The arch a compiled kernel targets, per arch the entry claims ("a": the arch-specific instruction set)
ARCH_TARGETS = {Arch.SM90: "sm_90a", Arch.SM100: "sm_100a", Arch.SM103: "sm_103a", Arch.SM107: "sm_107a"}


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    whole_row: bool  # one group per row: reduced over the CTA; else groups within a warp
    vector: int      # channels per global access: CHUNK (16-byte, aligned rows) or 1
    gate: str        # one of claims.GATES
    threads: int     # per CTA, one row per CTA: compiled in, the block size of the launch
    # every field is compiled in: a plan is its kernel's cache key


def _threads_for(width: int) -> int:
    # enough threads for every chunk in CHUNKS_PER_THREAD rounds; a power of two from one warp up, so
    # that any warp-sized group lies within one warp at each round
    chunks = -(-width // CHUNK)
    per_round = -(-chunks // CHUNKS_PER_THREAD)
    return max(WARP_SIZE, 1 << (per_round - 1).bit_length())


def launch_plan(width: int, group_size: int, gate: str, aligned: bool) -> LaunchPlan:
    """``aligned``: every row of x, z, y and the weight starts on 16 bytes and H is a multiple of 8."""
    if width > MAX_WIDTH:
        raise NotImplementedError(f"rms_norm_gated_cute holds a row in registers: H = {width} is above "
                                  f"{MAX_WIDTH}; use the Triton kernel (ops/norm/rms_norm_gated.py)")
    whole_row = group_size == width
    if not whole_row and group_size not in WARP_GROUP_SIZES:
        raise NotImplementedError(f"rms_norm_gated_cute reduces a group within a warp or over a whole row: "
                                  f"group_size = {group_size} is neither one of {WARP_GROUP_SIZES} nor H; "
                                  f"use the Triton kernel (ops/norm/rms_norm_gated.py)")
    return LaunchPlan(whole_row=whole_row, vector=CHUNK if aligned else 1, gate=gate, threads=_threads_for(width))


def reachable_plans() -> list[LaunchPlan]:
    """Every plan ``launch_plan`` returns for some input: each gate, vector width and kind of group,
    at every thread count from one warp to MAX_THREADS (rows of 1..MAX_WIDTH channels; both kinds of
    group reach every count, since a row can be any multiple of its group)."""
    thread_counts = sorted({_threads_for(width) for width in range(CHUNK, MAX_WIDTH + 1, CHUNK)})
    return [LaunchPlan(whole_row=whole_row, vector=vector, gate=gate, threads=threads)
            for whole_row in (False, True) for vector in (CHUNK, 1) for gate in claims.GATES
            for threads in thread_counts]


# -- kernel ---------------------------------------------------------------------------------------
class RmsNormGated:
    """One compiled kernel: its plan (the kind of group, the vector width, the gate and the thread
    count) is compile-time."""

    def __init__(self, plan: LaunchPlan):
        self.whole_row = plan.whole_row
        self.vector = plan.vector
        self.gate = plan.gate
        self.threads = plan.threads
        self.warps = plan.threads // WARP_SIZE

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, z_ptr: cute.Pointer, w_ptr: cute.Pointer, y_ptr: cute.Pointer,
                 amax_bits_ptr: cute.Pointer, rows: Int32, width: Int32, group_size: Int32,
                 x_row_stride: Int64, z_row_stride: Int64, y_row_stride: Int64, eps: Float32,
                 write_amax: Int32, stream: cuda.CUstream):
        self.kernel(x_ptr, z_ptr, w_ptr, y_ptr, amax_bits_ptr, rows, width, group_size,
                    x_row_stride, z_row_stride, y_row_stride, eps, write_amax).launch(
            grid=[rows, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, x_ptr: cute.Pointer, z_ptr: cute.Pointer, w_ptr: cute.Pointer, y_ptr: cute.Pointer,
               amax_bits_ptr: cute.Pointer, rows: Int32, width: Int32, group_size: Int32,
               x_row_stride: Int64, z_row_stride: Int64, y_row_stride: Int64, eps: Float32,
               write_amax: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        threads = self.threads
        # by arithmetic: the DSL's warp_idx() is a full-warp shuffle, which lane 0 alone (below) would wait
        # at forever once a CTA has two warps (issue 28)
        warp, lane = tidx // WARP_SIZE, tidx % WARP_SIZE
        chunks = (width + CHUNK - 1) // CHUNK
        gated = const_expr(self.gate != "none")
        if const_expr(self.vector == CHUNK):
            # the host checked it: H and the row strides are multiples of 8, pointers 16-byte aligned
            width = cute.assume(width, divby=CHUNK)
            x_row_stride = cute.assume(x_row_stride, divby=CHUNK)
            z_row_stride = cute.assume(z_row_stride, divby=CHUNK)
            y_row_stride = cute.assume(y_row_stride, divby=CHUNK)
        mX = cute.make_tensor(x_ptr, cute.make_layout((rows, width), stride=(x_row_stride, 1)))
        mZ = cute.make_tensor(z_ptr, cute.make_layout((rows, width), stride=(z_row_stride, 1)))
        mW = cute.make_tensor(w_ptr, cute.make_layout((width,)))
        mY = cute.make_tensor(y_ptr, cute.make_layout((rows, width), stride=(y_row_stride, 1)))
        fragment = cute.make_layout((CHUNK, CHUNKS_PER_THREAD))  # (channel in chunk, round)
        tXrX, tXrZ, tXrW, tXrY = (cute.make_rmem_tensor(fragment, BFloat16) for _ in range(4))
        # chunks past the row stay 0: they add nothing to a sum, and their y is neither stored nor in amax
        tXrX.fill(0.0)
        tXrZ.fill(0.0)
        tXrW.fill(0.0)

        # 1. load this thread's chunks of the row
        for k in cutlass.range_constexpr(CHUNKS_PER_THREAD):
            chunk = k * threads + tidx
            if chunk < chunks:
                if const_expr(self.vector == CHUNK):
                    cute.autovec_copy(cute.local_tile(mX[row, None], (CHUNK,), (chunk,)), tXrX[None, k])
                    cute.autovec_copy(cute.local_tile(mW, (CHUNK,), (chunk,)), tXrW[None, k])
                    if const_expr(gated):
                        cute.autovec_copy(cute.local_tile(mZ[row, None], (CHUNK,), (chunk,)), tXrZ[None, k])
                else:
                    for e in cutlass.range_constexpr(CHUNK):
                        column = chunk * CHUNK + e
                        if column < width:
                            tXrX[e, k] = mX[row, column]
                            tXrW[e, k] = mW[column]
                            if const_expr(gated):
                                tXrZ[e, k] = mZ[row, column]

        # 2. each round's sum of squares of u (x, or x * silu(z) when the gate comes first)
        smem = SmemAllocator()
        sPartial = smem.allocate_tensor(Float32, cute.make_layout((self.warps,)), byte_alignment=16)
        tXrRstd = cute.make_rmem_tensor(cute.make_layout((CHUNKS_PER_THREAD,)), Float32)
        tXrSum = cute.make_rmem_tensor(cute.make_layout((CHUNKS_PER_THREAD,)), Float32)
        for k in cutlass.range_constexpr(CHUNKS_PER_THREAD):
            u = self._gated_input(tXrX[None, k].load().to(Float32), tXrZ[None, k].load().to(Float32))
            tXrSum[k] = (u * u).reduce(cute.ReductionOp.ADD, Float32(0.0), reduction_profile=0)

        # 3. reduce over each group, then rstd = 1 / sqrt(mean + eps), each rounded to nearest
        if const_expr(self.whole_row):
            total = Float32(0.0)
            for k in cutlass.range_constexpr(CHUNKS_PER_THREAD):
                total = total + tXrSum[k]
            total = cute.arch.warp_reduction(total, lambda a, b: a + b)
            if lane == 0:
                sPartial[warp] = total
            cute.arch.barrier()
            total = sPartial[0]
            for other_warp in cutlass.range_constexpr(1, self.warps):
                total = total + sPartial[other_warp]
            rstd = 1.0 / cute.math.sqrt(total / width.to(Float32) + eps)
            for k in cutlass.range_constexpr(CHUNKS_PER_THREAD):
                tXrRstd[k] = rstd
        else:
            lanes = group_size // CHUNK  # a power of two up to 32: aligned lanes of one warp
            for k in cutlass.range_constexpr(CHUNKS_PER_THREAD):
                group_sum = tXrSum[k]
                for step in cutlass.range_constexpr(len(SHUFFLE_OFFSETS)):
                    # every lane shuffles; only offsets inside the group add (lanes is uniform)
                    other = cute.arch.shuffle_sync_bfly(group_sum, offset=SHUFFLE_OFFSETS[step])
                    if SHUFFLE_OFFSETS[step] < lanes:
                        group_sum = group_sum + other
                tXrRstd[k] = 1.0 / cute.math.sqrt(group_sum / group_size.to(Float32) + eps)

        # 4. y = u * rstd * w (* silu(z) when the norm comes first), rounded once to bf16, and stored
        for k in cutlass.range_constexpr(CHUNKS_PER_THREAD):
            x = tXrX[None, k].load().to(Float32)
            z = tXrZ[None, k].load().to(Float32)
            y = self._gated_input(x, z) * tXrRstd[k] * tXrW[None, k].load().to(Float32)
            if const_expr(self.gate == "norm_then_gate"):
                y = y * self._silu(z)
            tXrY[None, k].store(y.to(BFloat16))
        for k in cutlass.range_constexpr(CHUNKS_PER_THREAD):
            chunk = k * threads + tidx
            if chunk < chunks:
                if const_expr(self.vector == CHUNK):
                    cute.autovec_copy(tXrY[None, k], cute.local_tile(mY[row, None], (CHUNK,), (chunk,)))
                else:
                    for e in cutlass.range_constexpr(CHUNK):
                        column = chunk * CHUNK + e
                        if column < width:
                            mY[row, column] = tXrY[e, k]

        # 5. amax: the CTA's largest |y| as int32 bits, one integer atomic max (module docstring)
        if write_amax != 0:
            largest = Int32(0)
            for k in cutlass.range_constexpr(CHUNKS_PER_THREAD):
                for e in cutlass.range_constexpr(CHUNK):
                    if (k * threads + tidx) * CHUNK + e < width:
                        largest = cutlass.max(largest, tXrY[e, k].to(Float32).bitcast(Int32) & 0x7FFFFFFF)
            largest = cute.arch.warp_reduction(largest, lambda a, b: cutlass.max(a, b))
            sLargest = cute.recast_tensor(sPartial, Int32)
            cute.arch.barrier()  # the whole-row sum's readers are done with the shared slots
            if lane == 0:
                sLargest[warp] = largest
            cute.arch.barrier()
            if tidx == 0:
                for other_warp in cutlass.range_constexpr(1, self.warps):
                    largest = cutlass.max(largest, sLargest[other_warp])
                cute.arch.atomic_max(amax_bits_ptr, largest)

    @cute.jit
    def _silu(self, z):
        return z / (1.0 + cute.math.exp(-z))

    @cute.jit
    def _gated_input(self, x, z):
        """What is normalized: ``x``, or ``x * silu(z)`` when the gate comes before the norm."""
        if const_expr(self.gate == "gate_then_norm"):
            return x * self._silu(z)
        return x


# -- compile (cached per kernel and target) ------------------------------------------------------
def _pointer_spec(dtype, align: int) -> cute.Pointer:
    """A global pointer's compile-time spec (its alignment is compiled in; the address comes with each call)."""
    return make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)


@functools.cache
def compiled(plan: LaunchPlan, arch_target: str, options: str = ""):
    """The kernel of ``plan`` compiled for ``arch_target`` (``sm_90a``...); no GPU needed.  ``options``: more
    ``cute.compile`` options (``--keep-ptx --dump-dir DIR`` puts the PTX in the result's ``artifacts.PTX``)."""
    align = 2 * plan.vector
    # called through TVM FFI (plain ints and floats in, a few microseconds), as quack's kernels are: the DSL's
    # own executor marshals each argument in Python, about half a millisecond a call (docs/ops/rms_norm_gated.md)
    return cute.compile(
        RmsNormGated(plan),
        _pointer_spec(BFloat16, align), _pointer_spec(BFloat16, align), _pointer_spec(BFloat16, align),
        _pointer_spec(BFloat16, align), _pointer_spec(Int32, 4),
        Int32(0), Int32(0), Int32(0), Int64(0), Int64(0), Int64(0), Float32(0.0), Int32(0),
        cuda.CUstream(0),
        options=f"--gpu-arch {arch_target} --enable-tvm-ffi {options}".strip(),
    )


# -- host wrapper ---------------------------------------------------------------------------------
def _unit_columns(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.stride(-1) == 1 else tensor.contiguous()


def _aligned(*tensors: torch.Tensor) -> bool:
    return all(t.data_ptr() % 16 == 0 and (t.dim() == 1 or t.stride(0) % CHUNK == 0) for t in tensors)


def operands(x, z, weight, y, group_size, norm_before_gate) -> tuple:
    """(launch plan, x, gate input, weight): the plan for these tensors and the unit-column views of them
    the kernel reads (``docs/lab/cute_diagnose.py`` compiles the plan before the call it times)."""
    x, weight = _unit_columns(x), _unit_columns(weight)
    gate_input = x if z is None else _unit_columns(z)  # never read without a gate
    width = x.shape[1]
    aligned = width % CHUNK == 0 and _aligned(x, gate_input, weight, y)
    return launch_plan(width, group_size, claims.gate_of(z, norm_before_gate), aligned), x, gate_input, weight


@functools.cache
def _target_of(device_index: int) -> str:
    """The compile target of the GPU of this index (looked up once: an eager call's host time is the budget)."""
    arch = arch_of(torch.device("cuda", device_index))
    if arch not in ARCH_TARGETS:
        raise _not_runnable_on(f"cuda:{device_index} ({arch.value if arch else 'unknown architecture'})")
    return ARCH_TARGETS[arch]


def _not_runnable_on(where: str) -> NotImplementedError:
    return NotImplementedError(f"rms_norm_gated_cute runs on {sorted(a.value for a in ARCH_TARGETS)}, not on {where}")


def rms_norm_gated(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> torch.Tensor:
    contract.validate(x, z, weight, eps, group_size, norm_before_gate, amax)
    rows, width = x.shape
    y = torch.empty((rows, width), dtype=torch.bfloat16, device=x.device)
    if y.numel() == 0:
        return y
    if x.device.type != "cuda":
        raise _not_runnable_on(str(x.device))
    index = x.device.index
    plan, x, gate_input, weight = operands(x, z, weight, y, group_size, norm_before_gate)
    kernel = compiled(plan, _target_of(index))
    amax_bits = y if amax is None else amax  # never written when write_amax is 0
    # pointers and the stream cross TVM FFI as integer addresses; the DSL launches on the current device's
    # context, so x's device is made current only where it is not (entering a device context costs host time
    # on every call); the raw stream is read as Triton's launcher reads it, without a Stream object
    arguments = (x.data_ptr(), gate_input.data_ptr(), weight.data_ptr(), y.data_ptr(), amax_bits.data_ptr(),
                 rows, width, group_size, x.stride(0), gate_input.stride(0), y.stride(0), float(eps),
                 int(amax is not None), torch._C._cuda_getCurrentRawStream(index))
    if index == torch.cuda.current_device():
        kernel(*arguments)
    else:
        with torch.cuda.device(index):
            kernel(*arguments)
    return y


# -- catalog entry --------------------------------------------------------------------------------
ENTRY = claims.entry(rms_norm_gated, frozenset(ARCH_TARGETS), "cute")
