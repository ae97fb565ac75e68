"""Issue 27: a Gluon prototype of nvfp4_gemv's M > 1 path whose decoded weights never touch shared memory
beside the catalog kernel: not in the catalog, not judged; a measurement to decide whether a Gluon kernel is
worth building. mma.sync's operand A layout for bf16 with ``k_width = 8`` gives a thread 8 consecutive values of
K a row, which are 4 packed bytes; the same parent with ``k_width = 4`` on the packed uint8 tile gives the thread
exactly those bytes, so the decode lands in the operand and the conversion is a register renaming.

Each program owns BLOCK_N rows of the weight (16 a warp: 64 or 32); each step loads a [BLOCK_N, BLOCK_KB] tile of packed bytes and its
block scales straight from global memory in mma.sync's operand A byte layout (``k_width = 4``: 4 packed bytes, 8
values of K, a thread and row), decodes them with the catalog kernel's own placed-decode PTX into the bf16 operand
(``k_width = 8``), reads x's [2 BLOCK_KB, BLOCK_M] slice in operand B's layout and accumulates with ``mma_v2``.
No pipeline (plain loads, the next step's issued by the compiler as it can); split-K over a second grid axis, its
fp32 partials summed by one more kernel; K a multiple of 16, any N, M at most BLOCK_M (16): tails of K and N are
masked (``EVEN`` off).

    python3 docs/lab/nvfp4_gemv_gluon.py            # on a GPU: agreement with the catalog kernel, then times
    python3 docs/lab/nvfp4_gemv_gluon.py --static   # anywhere: compiled for sm_90a, the layout conversions the
                                                    # TTGIR keeps and what the PTX does with shared memory

On a GPU it prints, for a few shapes with tails of K and N, each split's largest difference from the catalog
kernel's output, then for M = 1, 4 and 16 at N = K = 8192 (the bench shapes) each split's difference and time beside
the catalog kernel's (CUDA-graph replays, ``triton.testing.do_bench_cudagraph``) with the copy bandwidth's share of
each. Differences are in bf16 ULPs of the row's largest output, as the judge's row scale: the kernels sum in other
orders, so a value that cancels to near zero differs by many of its own ULPs.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.ampere import mma_v2  # noqa: E402

from ops.gemm import nvfp4_gemv as catalog_kernel  # noqa: E402
from ops.gemm.nvfp4_gemv import E2M1_PLACED_PTX, PLACED_SCALE, PLACED_UNDO  # noqa: E402

BLOCK_KB, BLOCK_M = 64, 16   # 128 values of K a step; a program's rows are 16 a warp


@gluon.jit
def _gluon_gemv_tiles(x_ptr, stride_xm, rows, packed_ptr, stride_pn, scales_ptr, stride_sn, global_scale_ptr,
                      cols, depth, y_ptr, stride_ym, partial_ptr, stride_ps, stride_pm,
                      BLOCK_N: gl.constexpr, BLOCK_KB: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT: gl.constexpr,
                      EVEN: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[BLOCK_N // 16, 1],
                                                  instr_shape=[16, 8])
    a_bytes: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
    a_values: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=8)
    b_values: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=8)
    weight_rows = gl.program_id(0) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_bytes))
    byte = gl.arange(0, BLOCK_KB, layout=gl.SliceLayout(0, a_bytes))
    packed_tile = packed_ptr + weight_rows[:, None] * stride_pn + byte[None, :]
    scale_tile = scales_ptr + weight_rows[:, None] * stride_sn + (byte // 8)[None, :]   # 8 bytes a block scale
    k = gl.arange(0, 2 * BLOCK_KB, layout=gl.SliceLayout(1, b_values))
    m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, b_values))
    x_tile = x_ptr + m[None, :] * stride_xm + k[:, None]
    x_rows = (m < rows)[None, :]
    acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, mma)
    # split-K: program_id(1) takes a run of whole steps (the last run may be shorter, or empty)
    steps = (depth + 2 * BLOCK_KB - 1) // (2 * BLOCK_KB)
    share = (steps + SPLIT - 1) // SPLIT
    first = gl.program_id(1) * share
    last = gl.minimum(first + share, steps)
    for step in range(first, last):
        if EVEN:   # K a multiple of 2 BLOCK_KB, N of BLOCK_N: no masks
            packed = gl.load(packed_tile + step * BLOCK_KB)
            raw_scales = gl.load(scale_tile + step * (BLOCK_KB // 8))
            x = gl.load(x_tile + step * 2 * BLOCK_KB, mask=x_rows, other=0.0)
        else:      # past K or N: zero bytes and scales (a product of 0), zero x
            inside = (weight_rows < cols)[:, None] & ((step * BLOCK_KB + byte) < depth // 2)[None, :]
            packed = gl.load(packed_tile + step * BLOCK_KB, mask=inside, other=0)
            raw_scales = gl.load(scale_tile + step * (BLOCK_KB // 8), mask=inside, other=0.0)
            x = gl.load(x_tile + step * 2 * BLOCK_KB, mask=x_rows & ((step * 2 * BLOCK_KB + k) < depth)[:, None],
                        other=0.0)
        scales = (raw_scales.to(gl.float32) * PLACED_SCALE).to(gl.bfloat16)
        low, high = gl.inline_asm_elementwise(E2M1_PLACED_PTX, "=r,=r,=r,=r,r,r,r", [packed, scales],
                                              dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=4)
        weights = gl.convert_layout(gl.reshape(gl.join(low, high), [BLOCK_N, 2 * BLOCK_KB]), a_values)
        acc = mma_v2(weights, x, acc)
    acc = acc * (PLACED_UNDO / gl.load(global_scale_ptr))
    out_rows = gl.program_id(0) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
    out_m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma))
    if SPLIT == 1:
        gl.store(y_ptr + out_m[None, :] * stride_ym + out_rows[:, None], acc.to(gl.bfloat16),
                 mask=(out_m < rows)[None, :] & (out_rows < cols)[:, None])
    else:   # fp32 partials [SPLIT, BLOCK_M, N], summed by the host wrapper
        gl.store(partial_ptr + gl.program_id(1) * stride_ps + out_m[None, :] * stride_pm + out_rows[:, None], acc,
                 mask=(out_rows < cols)[:, None])


def gluon_gemv(x, packed, block_scales, global_scale, split: int = 1, block_n: int = 64) -> torch.Tensor:
    """y [M, N] bf16 of x [M, K] bf16 against the NVFP4 weight (M <= 16, K a multiple of 16, rows of x, packed and
    block_scales contiguous); ``split`` > 1 sums fp32 partials of K's parts afterwards (one more kernel);
    ``block_n`` rows a program, 16 a warp."""
    rows, depth = x.shape
    cols = packed.shape[0]
    assert rows <= BLOCK_M and depth % 16 == 0, (x.shape, packed.shape)
    assert x.stride(1) == 1 and packed.stride(1) == 1 and block_scales.stride(1) == 1
    y = torch.empty(rows, cols, dtype=torch.bfloat16, device=x.device)
    partials = torch.zeros(split, BLOCK_M, cols, dtype=torch.float32, device=x.device) if split > 1 else y
    even = depth % (2 * BLOCK_KB * split) == 0 and cols % block_n == 0
    _gluon_gemv_tiles[(triton.cdiv(cols, block_n), split)](
        x, x.stride(0), rows, packed, packed.stride(0), block_scales, block_scales.stride(0), global_scale, cols, depth,
        y, y.stride(0), partials, partials.stride(0), partials.stride(-2), block_n, BLOCK_KB, BLOCK_M, split, even,
        num_warps=block_n // 16)
    if split > 1:
        torch.sum(partials[:, :rows], dim=0, out=y)   # (a bf16 out: the sum rounded once)
    return y


# (rows a program, K's parts): a register prefetch of the next step (202 registers, 2 programs an SM against 5)
# was slower at every split on an H100 (docs/ops/nvfp4_gemv.md); 32 rows (2 warps) make twice the programs
VARIANTS = tuple((64, split) for split in (1, 2, 4, 8, 16)) + tuple((32, split) for split in (2, 4, 8))
ODD_SHAPES = ((3, 1000, 1040), (16, 4160, 2064), (1, 72, 16), (9, 8192, 8208))   # (M, N, K): the masked path


def static() -> int:
    """Compiled for sm_90a here, run nowhere: the main loop's shared-memory traffic and barriers."""
    from tools.compile_receipts import TargetDriver, prepare_environment
    from triton.runtime import driver

    prepare_environment()
    driver.set_active(TargetDriver(90))
    x = torch.zeros(16, 8192, dtype=torch.bfloat16)
    packed = torch.zeros(8192, 4096, dtype=torch.uint8)
    scales = torch.zeros(8192, 512).to(torch.float8_e4m3fn)
    y = torch.zeros(16, 8192, dtype=torch.bfloat16)
    with contextlib.redirect_stdout(io.StringIO()):
        compiled = _gluon_gemv_tiles.run(x, 8192, 16, packed, 4096, scales, 512, torch.ones(1), 8192, 8192, y, 8192,
                                         y, 0, 0, 64, BLOCK_KB, BLOCK_M, 1, True, grid=(1,), warmup=True,
                                         num_warps=4)
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    for line in ttgir.splitlines():   # the conversions kept: each is register moves where the PTX shows no shared
        if "ttg.convert_layout" in line or "ttg.local_" in line:
            print(re.sub(r"\s+loc\(.*$", "", line.strip()))
    counts = {what: len(re.findall(pattern, ptx)) for what, pattern in (
        ("st.shared", r"\bst\.shared"), ("ld.shared", r"\bld\.shared"), ("bar.sync", r"\bbar\.sync"),
        ("mma.sync", r"\bmma\.sync"))}
    print(f"sm_90a: {compiled.metadata.shared} bytes of shared memory;",
          ", ".join(f"{what} {count}" for what, count in counts.items()),
          "| global loads:", ", ".join(sorted(set(re.findall(r"\bld\.global[\w.]*", ptx)))))
    return 0


def on_gpu() -> int:
    import triton.testing

    from oracles.band import row_ulp

    def bf16_ulps(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
        """|got - expected| in bf16 ULPs of the row's largest |expected|, the judge's row scale: another summation
        order is not charged thousands of ULPs of a value that cancelled to near zero."""
        return (got.float() - expected.float()).abs() / row_ulp(expected.float(), torch.bfloat16)

    for rows, cols, depth in ODD_SHAPES:   # the masked path first: tails of K and N, every split
        inputs = catalog_kernel._bench_input(rows, cols, depth)("cuda")
        ours = catalog_kernel.nvfp4_gemv(**inputs)
        worst = {variant: bf16_ulps(gluon_gemv(**inputs, block_n=variant[0], split=variant[1]), ours).max().item()
                 for variant in VARIANTS}
        print(f"M={rows} N={cols} K={depth}: largest difference from the catalog kernel by (rows a program, split), "
              f"bf16 ULP of the row's scale: " + ", ".join(f"{variant}: {ulps:.2f}" for variant, ulps in worst.items()))
    copy = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    copy_us = triton.testing.do_bench_cudagraph(lambda: copy.clone()) * 1e3
    copy_gbs = 2 * copy.numel() / copy_us / 1e3
    print(f"{torch.cuda.get_device_name()}: copy {copy_gbs:.0f} GB/s")
    for rows in (1, 4, 16):
        inputs = catalog_kernel._bench_input(rows, 8192, 8192)("cuda")
        ours = catalog_kernel.nvfp4_gemv(**inputs)
        moved = catalog_kernel.bytes_moved(**inputs)
        calls = {"catalog": catalog_kernel.nvfp4_gemv}
        calls.update({f"gluon {block_n} rows, split {split}":
                      lambda block_n=block_n, split=split, **kw: gluon_gemv(**kw, block_n=block_n, split=split)
                      for block_n, split in VARIANTS})
        for name, f in calls.items():
            worst = bf16_ulps(f(**inputs), ours).max().item()
            us = triton.testing.do_bench_cudagraph(lambda f=f: f(**inputs)) * 1e3
            print(f"M={rows} {name}: {us:.2f} us ({moved / us / 1e3 / copy_gbs:.1%} of copy), largest difference "
                  f"from the catalog kernel {worst:.2f} bf16 ULP of the row's scale")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--static", action="store_true", help="compile for sm_90a here instead of running")
    args = parser.parse_args(argv)
    return static() if args.static or not torch.cuda.is_available() else on_gpu()


if __name__ == "__main__":
    sys.exit(main())
