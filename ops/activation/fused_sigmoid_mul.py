"""activation/fused_sigmoid_mul — y = sigmoid(gate) * x in fp32, rounded once to bf16, with the FP8 amax of y
(Triton).

Contract (docs/contracts/fused_sigmoid_mul.md, for CONTRACTS.md): ``fused_sigmoid_mul(x, gate, amax=None) -> y
bf16[T, H]``; band parity for the output, exact self-consistency for the in-place ``amax``. Real users: the
gated attention output of Qwen3-Next-like models (vLLM, SGLang: attn_out * torch.sigmoid(gate)), 16 heads of
256 = 4096 channels.

One program computes a ``[BLOCK_ROWS, BLOCK_COLS]`` tile: every element on its own, from its own inputs, so
neither the tile nor the batch around a row can change a bit of it (batch invariance by construction); each
program folds its tile's largest |y| into ``amax`` with one exact integer atomic max. Inputs are loaded as
bits and widened exactly, the result rounded once to nearest even (``ops/triton_elementwise.py``: the
interpreter's own casts are not exact).

Bytes: read ``x`` (2 bytes an element), ``gate`` (2 bytes an element), write ``y`` (2 bytes an element),
read-modify-write ``amax`` (4 bytes); no reuse, so the op is memory-bound: the bench case moves its bytes at
copy bandwidth or not at all.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, BenchCase, Cell, Entry, Parity, Span
from ops.triton_backend import interpreting
from ops.triton_elementwise import fold_amax, load_bf16, sigmoid, store_bf16
from references.activation import fused_sigmoid_mul as contract


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    block_rows: int
    block_cols: int
    num_warps: int


def launch_plan(rows: int, cols: int) -> LaunchPlan:
    # GPU: 4096 elements a program at 8 warps: 16 a thread, two 16-byte loads of each bf16 input in flight;
    # a narrow row shares its program with the next rows rather than leaving lanes idle.  The interpreter
    # costs about 60 ms a program whatever its size: there, programs of 4096 columns, so that the CPU
    # strategy's inputs (2**14 elements at most) take 1 to 4 of them, amax folded across programs.
    tile, widest = (4096, 4096) if interpreting() else (4096, 1024)
    block_cols = min(triton.next_power_of_2(cols), widest)
    block_rows = min(tile // block_cols, triton.next_power_of_2(max(rows, 1)))
    return LaunchPlan(block_rows, block_cols, num_warps=max(1, min(8, block_rows * block_cols // 512)))


# -- kernel ---------------------------------------------------------------------------------------
@triton.jit
def _fused_sigmoid_mul(
    # inputs
    x_ptr, x_row_stride, x_col_stride, gate_ptr, gate_row_stride, gate_col_stride,
    # outputs: y (contiguous) and amax's bits (int32; unused without WRITE_AMAX)
    out_ptr, amax_bits_ptr,
    # sizes
    rows, cols,
    # meta
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, WRITE_AMAX: tl.constexpr,
):
    row = (tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)[:, None]  # row * stride past 2**31
    col = (tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS))[None, :]
    inside = (row < rows) & (col < cols)
    x = load_bf16(x_ptr, row * x_row_stride + col * x_col_stride, inside)
    gate = load_bf16(gate_ptr, row * gate_row_stride + col * gate_col_stride, inside)
    y = store_bf16(out_ptr, row * cols + col, sigmoid(gate) * x, inside)
    if WRITE_AMAX:
        fold_amax(amax_bits_ptr, y, inside)


# -- host wrapper ---------------------------------------------------------------------------------
def run_plan(plan: LaunchPlan, x, gate, amax=None) -> torch.Tensor:
    """Launch ``plan`` on already-validated arguments."""
    rows, cols = x.shape
    y = torch.empty((rows, cols), dtype=torch.bfloat16, device=x.device)
    if y.numel() == 0:
        return y
    grid = (triton.cdiv(rows, plan.block_rows), triton.cdiv(cols, plan.block_cols))
    _fused_sigmoid_mul[grid](
        x, x.stride(0), x.stride(1), gate, gate.stride(0), gate.stride(1),
        y, y if amax is None else amax.view(torch.int32), rows, cols,
        BLOCK_ROWS=plan.block_rows, BLOCK_COLS=plan.block_cols, WRITE_AMAX=amax is not None, num_warps=plan.num_warps,
    )
    return y


def fused_sigmoid_mul(x, gate, amax=None) -> torch.Tensor:
    contract.validate(x, gate, amax)
    return run_plan(launch_plan(*x.shape), x, gate, amax)


# -- cells, bench case, catalog entry -------------------------------------------------------------
def params_of(x, gate, amax=None) -> dict:
    rows, cols = x.shape
    return {"T": rows, "H": cols}


CELLS = (
    Cell("empty_batch",
         "a step with no tokens (T = 0): returns an empty [0, H], launches nothing, leaves amax",
         {"T": Span(0, 0), "H": Span(1, 16384)}),
    Cell("decode",
         "decode batches of 1..256 tokens; gated attention of 16..64 heads of 128..256 channels (H 2048..16384)",
         {"T": Span(1, 256), "H": Span(1, 16384)}),
    Cell("prefill",
         "prefill chunks of 257..16384 tokens at the same widths",
         {"T": Span(257, 16384), "H": Span(1, 16384)}),
)


def bytes_moved(x, gate, amax=None) -> int:
    return sum(t.numel() * t.element_size() for t in (x, gate)) + x.numel() * 2 + 4 * (amax is not None)


def bench_input(rows: int, cols: int):
    """The bench input, at the size of the module docstring's real users: inputs ~ N(0, 1)."""
    def make(device):
        generator = torch.Generator(device=device).manual_seed(0)
        return {"x": torch.randn((rows, cols), generator=generator, device=device).to(torch.bfloat16),
                "gate": torch.randn((rows, cols), generator=generator, device=device).to(torch.bfloat16),
                "amax": torch.zeros(1, device=device)}
    return make


BENCH = (
    BenchCase("bf16 [8192, 4096], amax", bench_input(8192, 4096), bytes_moved, ">= 80% of copy bandwidth"),
)

ENTRY = Entry.of_contract(
    contract,
    kernel=fused_sigmoid_mul,
    parity=Parity.BAND,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    batch_invariant=True,
    batch_args=("x", "gate"),
    in_place=("amax",),
    properties=(contract.amax_is_max_of_returned_values,),
    bench=BENCH,
)
