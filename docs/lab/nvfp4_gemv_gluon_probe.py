"""Issue 27: can nvfp4_gemv's M > 1 path decode its weights straight into the tensor cores' operand, with no trip
through shared memory?  A Gluon probe (layouts written out), compiled for sm_90a on a machine with no GPU.

The Triton kernel's decoded tile goes registers -> shared memory -> registers each step (a layout Triton picks:
`docs/lab/nvfp4_gemv_shared_static.py`). The mma.sync operand A layout of bf16 with ``k_width = 8`` gives a
thread 8 consecutive values of K a row, 4 packed bytes; the same parent with ``k_width = 4`` on the packed uint8
tile gives the thread exactly those 4 bytes. The probe loads the bytes in that layout, decodes them with the
kernel's own placed-decode PTX (4 bytes an instruction group, ``pack=4``), joins the low and high values and
reshapes to [N, K], converts to the operand layout and runs ``mma_v2`` against x in operand B's layout.  It
prints the conversions the TTGIR kept and what the PTX does with shared memory: a conversion the compiler
proves to be a register renaming leaves no ``st.shared``, ``ld.shared`` or ``bar.sync``.

    python3 docs/lab/nvfp4_gemv_gluon_probe.py

One step of one program (no pipeline, no scales' loads, no tails): a layout probe, not a kernel.
"""
from __future__ import annotations

import contextlib
import io
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.compile_receipts import TargetDriver, prepare_environment  # noqa: E402

prepare_environment()

import torch  # noqa: E402 - after the environment is set
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.ampere import mma_v2  # noqa: E402
from triton.runtime import driver  # noqa: E402

from ops.gemm.nvfp4_gemv import E2M1_PLACED_PTX, PLACED_SCALE  # noqa: E402

ROWS, STEP_BYTES, X_ROWS = 64, 64, 16   # a 64 x 128 weight tile (4 warps of 16 rows), 16 rows of x


@gluon.jit
def decode_into_operand(packed_ptr, scale, x_ptr, y_ptr, K_BYTES: gl.constexpr, BLOCK_N: gl.constexpr,
                        BLOCK_KB: gl.constexpr, BLOCK_M: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8])
    a_bytes: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
    a_values: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=8)
    b_values: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=8)
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_bytes))
    cols = gl.arange(0, BLOCK_KB, layout=gl.SliceLayout(0, a_bytes))
    packed = gl.load(packed_ptr + rows[:, None] * K_BYTES + cols[None, :])
    scales = gl.full([BLOCK_N, BLOCK_KB], scale * PLACED_SCALE, gl.float32, a_bytes).to(gl.bfloat16)
    low, high = gl.inline_asm_elementwise(E2M1_PLACED_PTX, "=r,=r,=r,=r,r,r,r", [packed, scales],
                                          dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=4)
    weights = gl.convert_layout(gl.reshape(gl.join(low, high), [BLOCK_N, 2 * BLOCK_KB]), a_values)
    k = gl.arange(0, 2 * BLOCK_KB, layout=gl.SliceLayout(1, b_values))
    m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, b_values))
    x = gl.load(x_ptr + m[None, :] * (2 * K_BYTES) + k[:, None])
    acc = mma_v2(weights, x, gl.zeros([BLOCK_N, BLOCK_M], gl.float32, mma))
    out_rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
    out_cols = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma))
    gl.store(y_ptr + out_rows[:, None] * BLOCK_M + out_cols[None, :], acc)


def main() -> int:
    driver.set_active(TargetDriver(90))   # compiled for sm_90a, run nowhere
    packed = torch.zeros(ROWS, 4096, dtype=torch.uint8)
    x = torch.zeros(X_ROWS, 8192, dtype=torch.bfloat16)
    y = torch.zeros(ROWS, X_ROWS, dtype=torch.float32)
    with contextlib.redirect_stdout(io.StringIO()):
        compiled = decode_into_operand.run(packed, 1.0, x, y, 4096, ROWS, STEP_BYTES, X_ROWS, grid=(1,), warmup=True,
                                           num_warps=4)
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    for line in ttgir.splitlines():
        if "ttg.convert_layout" in line or "ttg.local_" in line:
            print(re.sub(r"\s+loc\(.*$", "", line.strip()))
    counts = {what: len(re.findall(pattern, ptx)) for what, pattern in (
        ("st.shared", r"\bst\.shared"), ("ld.shared", r"\bld\.shared"), ("bar.sync", r"\bbar\.sync"),
        ("shfl", r"\bshfl\."), ("mma.sync", r"\bmma\.sync"), ("prmt", r"\bprmt\."))}
    loads = sorted(set(re.findall(r"\bld\.global[\w.]*", ptx)))
    print("PTX:", ", ".join(f"{what} {count}" for what, count in counts.items()), "| global loads:", ", ".join(loads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
