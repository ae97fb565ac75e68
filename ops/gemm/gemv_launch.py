"""What the quantized GEMVs share: the launch plan and the deterministic split-K reduction.

A GEMV at decode (M <= 16) streams a weight of N x K once; the activations (M x K bf16) are small and
come from L2. Each program owns BLOCK_N weight rows and a slice of K, dequantizes a [BLOCK_N, BLOCK_K]
tile per step and multiplies it with the [16, BLOCK_K] activation tile on the tensor cores (M padded to
16, the smallest dot, so M = 1 and M = 16 cost the same pass over the weights). Products of a bf16
activation and a dequantized weight (at most 6 significant bits) are exact, the sum is float32. A plan
may instead run M = 1 on CUDA cores (``core_products``): float32 FMAs of the weight tile against x's one
row, summed over K once after the last step, with no conversion into the dot's operand layout.

When N alone gives too few programs (fewer row tiles than the plan's ``split_below`` times the SMs),
K is split: each split writes float32 partials and a second kernel sums them in split order. No
atomics: the summation order is fixed by the plan, which depends on (N, K) and the device only, so
results are deterministic.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, BenchCase, Cell, Entry, Parity, Span
from ops.triton_backend import bf16_bits_to_float32, float32_to_bf16_rne

ACTIVATION_ROWS = 16  # M <= 16 by contract; the smallest tl.dot operand
# The interpreter pays per program and per step (tens of ms under load), hardly per byte: 256-row tiles
# and the widest step whose [256, 16, BLOCK_K] product stays within Triton's 2**20-element limit.
INTERPRETER_BLOCK_N = 256
INTERPRETER_BLOCK_K = 2**20 // (INTERPRETER_BLOCK_N * ACTIVATION_ROWS)


@dataclasses.dataclass(frozen=True)
class PlanShape:
    """The tunable half of a plan, independent of (N, K): what ``bench_variants`` sweeps."""
    block_n: int          # weight rows per program (at most; fewer when N is smaller)
    step_bytes: int       # bytes of one weight row per step: 128 is one whole cache line
    num_stages: int       # steps of loads in flight (cp.async pipeline depth)
    num_warps: int
    split_below: float    # K is split while the row tiles number fewer than this many times the SMs
    cores_at_m1: bool = False  # M = 1 on CUDA cores (no tensor cores), see ``core_products``
    float32_decode: bool = False  # NVFP4 on CUDA cores: E2M1_FLOAT32_PTX, not the bf16 table
    placed_decode: bool = False  # NVFP4: E2M1_PLACED_PTX (bit placement, weights times 2**-7), not the table
    prefetch_scales: bool = False  # NVFP4: each step loads the next step's block scales (see nvfp4_gemv)
    stepped: bool = False  # NVFP4: addresses from fixed int32 offsets plus the step (no pointer tensors)
    max_registers: int | None = None  # ptxas cap per thread (maxnreg); None: Triton's choice
    # NVFP4, M > 1, compiled: decoded straight into the tensor cores' operand registers (a Gluon kernel,
    # rows_a_warp rows a warp: num_warps is block_n / rows_a_warp); the interpreter runs the Triton kernel with
    # the options above
    operand_decode: bool = False
    programs_per_sm: int = 1  # where K is split: into enough splits for this many programs an SM
    rows_a_warp: int = 16  # operand decode: weight rows a warp (16-row mma tiles); each warp reads the step's x
    x_shared: bool = False  # operand decode: x copied once a step into shared memory, each warp's operand read there

    def label(self, splits: int | None = None) -> str:
        """The shape in words, with the ``splits`` of K its plan makes of some (N, K) where given."""
        split = "" if splits is None else f", {splits} splits"
        if self.operand_decode:   # the GPU's plan (the other options are the interpreter's, which runs no Gluon)
            programs = f"{self.programs_per_sm} program" + "s" * (self.programs_per_sm != 1)
            return (f"{self.block_n} rows, {self.step_bytes} B steps, {self.rows_a_warp} rows a warp{split}, decoded "
                    f"into the operand registers (Gluon), split for {programs} an SM"
                    + (", x through shared memory" if self.x_shared else ""))
        return (f"{self.block_n} rows, {self.step_bytes} B steps, {self.num_stages} stages, {self.num_warps} warps"
                + split + (", M=1 on CUDA cores" if self.cores_at_m1 else "")
                + (", float32 decode" if self.float32_decode and self.cores_at_m1 else "")
                + (", placed decode" if self.placed_decode else "")
                + (", scales prefetched" if self.prefetch_scales else "")
                + (", stepped addresses" if self.stepped else "")
                + (f", at most {self.max_registers} registers" if self.max_registers else ""))


@dataclasses.dataclass(frozen=True)
class GemvPlan:
    block_n: int      # weight rows per program
    block_k: int      # K elements per step
    splits: int       # programs along K
    chunk: int        # K elements per split, a multiple of block_k
    num_warps: int
    num_stages: int
    compiled: bool    # for a GPU: tensor-core dot, inline PTX; else the interpreter's float32 sums
    cuda_cores: bool  # M = 1 products on CUDA cores, summed over K once at the end (``core_products``)
    float32_decode: bool
    placed_decode: bool = False
    prefetch_scales: bool = False
    stepped: bool = False
    max_registers: int | None = None
    operand_decode: bool = False
    x_shared: bool = False  # operand decode: x staged in shared memory once a step


def gemv_plan(rows: int, cols: int, weight_bits: int, sms: int, on_interpreter: bool, shape: PlanShape,
              m: int = ACTIVATION_ROWS) -> GemvPlan:
    """Plan for a weight of ``rows`` (N) x ``cols`` (K) elements of ``weight_bits`` bits each, against
    ``m`` activation rows."""
    block_k = shape.step_bytes * 8 // weight_bits
    block_k = INTERPRETER_BLOCK_K if on_interpreter else block_k
    widest = INTERPRETER_BLOCK_N if on_interpreter else shape.block_n
    block_n = min(widest, max(16, triton.next_power_of_2(rows)))
    tiles = triton.cdiv(rows, block_n)
    # Below split_below x SMs row tiles, K is split (in chunks of at least 4 steps) so that every SM
    # streams (programs_per_sm programs each); the partials are summed in split order by a second kernel.
    splits = 1
    if tiles < shape.split_below * sms:
        per_sm = 1 if on_interpreter else shape.programs_per_sm  # the interpreter pays per program
        splits = max(1, min(triton.cdiv(per_sm * sms, tiles), triton.cdiv(cols, 4 * block_k)))
    chunk = triton.cdiv(triton.cdiv(max(cols, 1), splits), block_k) * block_k
    operand_decode = shape.operand_decode and weight_bits == 4 and m > 1 and not on_interpreter
    return GemvPlan(block_n=block_n, block_k=block_k, splits=triton.cdiv(max(cols, 1), chunk), chunk=chunk,
                    num_warps=max(1, block_n // shape.rows_a_warp) if operand_decode else shape.num_warps,
                    num_stages=shape.num_stages,
                    compiled=not on_interpreter,
                    cuda_cores=m == 1 and shape.cores_at_m1,
                    float32_decode=m == 1 and shape.cores_at_m1 and shape.float32_decode and weight_bits == 4,
                    placed_decode=shape.placed_decode and weight_bits == 4,
                    prefetch_scales=shape.prefetch_scales and weight_bits == 4,
                    stepped=shape.stepped and weight_bits == 4, max_registers=shape.max_registers,
                    operand_decode=operand_decode, x_shared=operand_decode and shape.x_shared)


def plan_variants(rows: int, cols: int, weight_bits: int, sms: int, m: int,
                  shapes: tuple[PlanShape, ...]) -> dict[str, GemvPlan]:
    """GPU launch plans of ``shapes`` (the op's variant table) for ``m`` activation rows, labelled, for the
    GEMVs' ``bench_variants`` (the same plan reached from two shapes, e.g. CUDA-core shapes at M > 1, is
    timed once)."""
    variants = {}
    for shape in shapes:
        plan = gemv_plan(rows, cols, weight_bits, sms, False, shape, m)
        if plan not in variants.values():
            variants[shape.label(plan.splits)] = plan
    return variants


@triton.jit
def step_bounds(chunk, depth, BLOCK_K: tl.constexpr):
    """(start, whole, stop) of this program's split of K: whole steps run start..whole unmasked, then one
    masked step whole..stop when the split ends inside a step (the last split, K not a multiple)."""
    start = tl.program_id(1) * chunk
    stop = tl.minimum(start + chunk, depth)
    return start, start + (stop - start) // BLOCK_K * BLOCK_K, stop


@triton.jit
def clamp_rows(offsets, count):
    """Row offsets past ``count`` read row ``count - 1`` instead: loads need no mask (the rows' results
    are never stored), so the steps' loads are plain vectors."""
    return tl.minimum(offsets, count - 1).to(tl.int64)


@triton.jit
def accumulate(acc, weights, x_bits, COMPILED: tl.constexpr):
    """acc[n, m] + sum over k of weights[n, k] * x[m, k]; ``weights`` exact in bf16 (float32 or bf16),
    ``x_bits`` the bf16 activations' bits (int16).

    The interpreter's ``tl.dot`` is wrong on bf16 operands (bit patterns multiplied as integers, off by
    1e11 on a 16x64x32 product) and slow on float32 (numpy's matmul with a dtype argument skips BLAS:
    18 ms for 256x128x16; Triton 3.6, measured): there the products are summed in float32 by ``tl.sum``.
    Both sums are float32 over exact products; only their order differs.
    """
    if COMPILED:
        return tl.dot(weights.to(tl.bfloat16), tl.trans(x_bits.to(tl.bfloat16, bitcast=True)), acc)
    else:
        x = bf16_bits_to_float32(x_bits)
        return acc + tl.sum(weights[:, None, :] * x[None, :, :], axis=2)


@triton.jit
def core_products(acc, weights, x_bits):
    """M = 1 on CUDA cores: ``acc`` (shaped like ``weights``) + weights * x, elementwise in float32 (exact
    products), x's one row (bf16 bits, int16) broadcast over the rows; the caller sums over K once, after
    the last step. The tensor-core dot pads M to 16: for M = 1 it converts every weight into the dot's
    operand layout through shared memory for 1/16 of the products it runs."""
    return acc + weights * bf16_bits_to_float32(x_bits)[None, :]


@triton.jit
def store_rows(acc, y_ptr, stride_ym, partial_ptr, split, rows, cols, offs_n, scale,
               BLOCK_M: tl.constexpr, SPLIT: tl.constexpr):
    """Write a program's [BLOCK_N, BLOCK_M] float32 sums: y = bf16(acc * scale), or the split's partials."""
    offs_m = tl.arange(0, BLOCK_M)
    live = (offs_n < cols)[:, None] & (offs_m < rows)[None, :]
    if SPLIT:
        # partials[split, m, n], float32, unscaled: the reduction applies the scale once
        slot = (split * rows + offs_m[None, :]).to(tl.int64) * cols + offs_n[:, None]
        tl.store(partial_ptr + slot, acc, mask=live)
    else:
        tl.store(y_ptr + offs_m[None, :].to(tl.int64) * stride_ym + offs_n[:, None], float32_to_bf16_rne(acc * scale),
                 mask=live)


@triton.jit(do_not_specialize=["splits", "rows", "cols", "stride_ym"])
def _sum_splits(partial_ptr, splits, rows, cols, scale_ptr, y_ptr, stride_ym,
                BLOCK: tl.constexpr, INVERT_SCALE: tl.constexpr):
    row = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = offs_n < cols
    total = tl.zeros([BLOCK], tl.float32)
    for split in range(0, splits):  # in split order: the same sum every run
        total += tl.load(partial_ptr + (split * rows + row).to(tl.int64) * cols + offs_n, mask=live, other=0.0)
    scale = tl.load(scale_ptr)
    if INVERT_SCALE:
        scale = tl.math.div_rn(1.0, scale)
    tl.store(y_ptr + row.to(tl.int64) * stride_ym + offs_n, float32_to_bf16_rne(total * scale), mask=live)


def sum_splits(partials: torch.Tensor, scale: torch.Tensor, y: torch.Tensor, invert_scale: bool) -> None:
    """y[m, n] = bf16(sum over splits of partials[split, m, n], in order, times scale (or 1 / scale))."""
    splits, rows, cols = partials.shape
    block = min(triton.next_power_of_2(cols), 1024)
    _sum_splits[(rows, triton.cdiv(cols, block))](
        partials, splits, rows, cols, scale, y, y.stride(0), BLOCK=block, INVERT_SCALE=invert_scale, num_warps=4)


def run_tiles(kernel, x: torch.Tensor, cols: int, weight_args: tuple, scale: torch.Tensor, invert_scale: bool,
              plan: GemvPlan, **meta) -> torch.Tensor:
    """y bf16 [M, cols]: ``kernel`` (a GEMV's tile kernel, arguments x, weight, outputs, chunk) over ``plan``,
    then the split-K sum when K is split. ``scale`` multiplies every output (its reciprocal: ``invert_scale``)."""
    rows, depth = x.shape
    y = torch.empty(rows, cols, dtype=torch.bfloat16, device=x.device)
    if cols == 0:
        return y
    split = plan.splits > 1
    partials = torch.empty((plan.splits, rows, cols) if split else (1,), dtype=torch.float32, device=x.device)
    kernel[(triton.cdiv(cols, plan.block_n), plan.splits)](
        x.view(torch.int16), x.stride(0), x.stride(1), rows, *weight_args, cols, depth,
        y, y.stride(0), partials, plan.chunk,
        BLOCK_M=1 if plan.cuda_cores else ACTIVATION_ROWS, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k, SPLIT=split,
        COMPILED=plan.compiled, CUDA_CORES=plan.cuda_cores,
        NUM_STAGES=plan.num_stages, num_warps=plan.num_warps, **meta,
        **({"maxnreg": plan.max_registers} if plan.max_registers and plan.compiled else {}),
    )
    if split:
        sum_splits(partials, scale, y, invert_scale)
    return y


class OnBf16Weights:
    """``torch.matmul`` on the weight already stored in bf16 (dequantized once, outside the timing):
    the cuBLAS bf16 GEMV a model without quantization runs, on twice to four times the bytes."""

    def __init__(self, dequantize):
        self.dequantize = dequantize
        self.cached: tuple | None = None

    def __call__(self, x, **weight):
        key = tuple((t.data_ptr(), t._version) for t in weight.values() if isinstance(t, torch.Tensor))
        if self.cached is None or self.cached[0] != key:
            self.cached = (key, self.dequantize(**weight).bfloat16())
        return torch.matmul(x, self.cached[1].T)


# -- what the two catalog entries share -------------------------------------------------------------
def gemv_cells(min_depth: int, checkpoints: str) -> tuple[Cell, Cell]:
    """The two cells of a quantized GEMV: K from ``min_depth``; ``checkpoints`` names models of the wide one."""
    return (
        Cell("narrow_outputs", "decode projections with few outputs (N < 2048: routers, small heads, TP shards), "
             "too few rows to fill an H200: K is split",
             {"M": Span(1, 16), "N": Span(1, 2047), "K": Span(min_depth, 16384)}),
        Cell("wide_outputs", f"decode QKV/MLP projections, N 2048..32768 ({checkpoints}): rows "
             "across programs, one pass from N = 4224 on an H200",
             {"M": Span(1, 16), "N": Span(2048, 32768), "K": Span(min_depth, 16384)}),
    )


BENCH_SIDE = 8192
BENCH_TARGET_M16 = "<= 1.3x the M=1 time (one pass over the weights for every M)"


def gemv_entry(contract, kernel, params_of, cells, bench_input, bytes_moved, target_m1: str, dequantize) -> Entry:
    """A quantized GEMV's catalog entry: band parity, every arch, bench rows M = 1, 4, 16 at N = K = 8192
    (``bench_input(rows, cols, depth)`` makes their inputs) against cuBLAS on the ``dequantize``d weight."""
    return Entry.of_contract(
        contract,
        kernel=kernel,
        parity=Parity.BAND,
        params_of=params_of,
        cells=cells,
        archs=ALL_ARCHS,
        bench=tuple(
            BenchCase(f"M={rows} N=K={BENCH_SIDE}", bench_input(rows, BENCH_SIDE, BENCH_SIDE), bytes_moved,
                      target_m1 if rows == 1 else BENCH_TARGET_M16,
                      {"torch.matmul on bf16 weights": OnBf16Weights(dequantize)})
            for rows in (1, 4, 16)
        ),
    )
