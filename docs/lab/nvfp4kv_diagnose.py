"""Where paged_decode_nvfp4kv leaves the band on the H200 (issue #27): each stage apart.

1. the tile decode (``_nvfp4_tile``) of every (code byte, scale byte) pair against the exact value;
2. e4m3 -> fp16 of every scale byte, and fp16 products with subnormal results;
3. the batched 16-wide score dot and the p @ v dot on subnormal fp16 operands, M = 1 and M = 16;
4. the failing minimal recipes of docs/results/2026-12-01/certify_sm90_all.log, and the same recipes
   with normal block scales, through kernel and reference;
5. whether the compiled kernel flushes subnormals (``.ftz`` in its PTX).
Run on the GPU from the repository root: ``python3 docs/lab/nvfp4kv_diagnose.py``.
"""
import json
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, ".")
from ops.attention import paged_decode_nvfp4kv as kernel_module  # noqa: E402
from ops.attention.paged_decode_nvfp4kv import _nvfp4_tile  # noqa: E402
from references.attention import paged_decode_nvfp4kv as reference  # noqa: E402
from references.attention import paged_decode_nvfp4kv_strategy as strategy  # noqa: E402
from references.formats.e2m1 import e2m1_decode  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _decode_kernel(packed_ptr, scale_ptr, out_ptr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    rows = tl.arange(0, BLOCK_N)
    valid = rows < BLOCK_N
    tile = _nvfp4_tile(packed_ptr + rows[:, None] * (D // 2), 1, scale_ptr + rows[:, None] * (D // 16), 1, valid,
                       BLOCK_N, D)
    tl.store(out_ptr + rows[:, None] * D + tl.arange(0, D)[None, :], tile)


def stage_decode():
    # every scale byte (256) x every code byte (256): rows of D = 512 elements (256 bytes, 32 scales)
    D, rows = 512, 256
    packed = torch.arange(256, dtype=torch.uint8, device=DEVICE).repeat(rows, 1)             # [256, 256]
    scale_bytes = torch.arange(256, dtype=torch.uint8, device=DEVICE)[:, None].repeat(1, D // 16)
    scales = scale_bytes.view(torch.float8_e4m3fn)
    out = torch.empty(rows, D, dtype=torch.float16, device=DEVICE)
    _decode_kernel[(1,)](packed, scales, out, BLOCK_N=rows, D=D)
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(rows, D)
    exact = e2m1_decode(codes).double() * scales.double().repeat_interleave(16, dim=1) * 2.0 ** -14
    got = out.double()
    finite = scales.double().repeat_interleave(16, dim=1).isfinite()
    bad = finite & (got != exact)
    print(f"[decode] {int(bad.sum())} of {int(finite.sum())} elements differ from e2m1*scale*2^-14")
    if bad.any():
        index = bad.nonzero()[:12]
        for r, c in index.tolist():
            print(f"   scale byte 0x{r:02x} ({float(scales[r, 0])!r}) code {int(codes[r, c])}: got "
                  f"{float(got[r, c])!r} exact {float(exact[r, c])!r}")
        sub = (scale_bytes[:, 0] < 8)
        print(f"   of which subnormal-scale rows: {int(bad[sub].sum())}; zero-scale row: {int(bad[0].sum())}")


@triton.jit
def _convert_kernel(s_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(s_ptr + offs).to(tl.float16))


@triton.jit
def _mul_kernel(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(a_ptr + offs) * tl.load(b_ptr + offs))


def stage_convert_and_multiply():
    s = torch.arange(256, dtype=torch.uint8, device=DEVICE).view(torch.float8_e4m3fn)
    out = torch.empty(256, dtype=torch.float16, device=DEVICE)
    _convert_kernel[(1,)](s, out, N=256)
    want = s.float().half()
    same = (out.view(torch.int16) == want.view(torch.int16)) | (out.isnan() & want.isnan())
    print(f"[e4m3->fp16] {int((~same).sum())} of 256 bytes differ; first: "
          f"{[(hex(i), float(out[i]), float(want[i])) for i in (~same).nonzero().flatten()[:6].tolist()]}")
    a = torch.tensor([2.0 ** -15, 2.0 ** -14, 1.5 * 2 ** -14, 2.0 ** -24, 3 * 2.0 ** -16] * 52, dtype=torch.float16,
                     device=DEVICE)[:256]
    b = torch.tensor([0.5, 0.25, 0.75, 1.0, 0.125, 2 ** -3] * 43, dtype=torch.float16, device=DEVICE)[:256]
    out = torch.empty(256, dtype=torch.float16, device=DEVICE)
    _mul_kernel[(1,)](a, b, out, N=256)
    want = (a.double() * b.double()).half()
    print(f"[fp16 mul, subnormal results] {int((out != want).sum())} of 256 differ; "
          f"e.g. {float(a[0])}*{float(b[0])}: got {float(out[0])!r} want {float(want[0])!r}")


@triton.jit
def _dot_kernel(a_ptr, b_ptr, out_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    rm, rk, rn = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def stage_dot():
    for M in (16, 1, 2):
        K, N = 16, 64
        gen = torch.Generator(device=DEVICE).manual_seed(0)
        a = (torch.randn(M, K, generator=gen, device=DEVICE) * 4).half()
        b = (torch.randint(1, 8, (K, N), generator=gen, device=DEVICE).float() * 2.0 ** -24).half()  # subnormal
        out = torch.empty(M, N, dtype=torch.float32, device=DEVICE)
        try:
            _dot_kernel[(1,)](a, b, out, M=M, K=K, N=N)
        except Exception as error:  # noqa: BLE001
            print(f"[dot M={M}] does not compile: {type(error).__name__}: {str(error)[:200]}")
            continue
        want = a.double() @ b.double()
        rel = ((out.double() - want).norm() / want.norm()).item()
        print(f"[dot M={M}, subnormal fp16 B] relative error {rel:.3g}; out[0,:4] {out[0, :4].tolist()} "
              f"want {want[0, :4].tolist()}")


def error_ulp(out, truth):
    from oracles.band import output_error
    return output_error(out, truth).error_ulp


def run_recipe(recipe, label):
    call = strategy.build(recipe, DEVICE)
    o, lse = kernel_module.paged_decode_nvfp4kv(**call)
    true_o, true_lse = reference.truth(**call)
    ref_o, ref_lse = reference.paged_decode_nvfp4kv(**call)
    stock_o, stock_lse = reference.stock(**call)
    print(f"[recipe {label}] o: kernel {error_ulp(o, true_o):.3g} ULP, reference {error_ulp(ref_o, true_o):.3g}, "
          f"stock {error_ulp(stock_o, true_o):.3g}; lse: kernel {error_ulp(lse, true_lse):.3g}, "
          f"stock {error_ulp(stock_lse, true_lse):.3g}")
    diff = (o.float() - true_o.float()).abs()
    print(f"   |o| max {true_o.abs().max().item():.4g}, kernel |o| max {o.abs().max().item():.4g}, "
          f"max diff {diff.max().item():.4g}; kernel o[0,0,:6] {o[0, 0, :6].tolist()} truth {true_o[0, 0, :6].tolist()}")
    return call


def stage_recipes():
    base = {"B": 1, "D": 64, "Hkv": 1, "M": 1, "S": 16, "T": None, "block_scales": "zero_and_subnormal",
            "codes": "midpoints", "global_scale": "one", "group": 1, "holes": True, "kv_dtype": "nvfp4",
            "kv_scale": 1.0, "layout": "interleaved", "lengths": "mixed", "seed": 6387226880856538906,
            "sm_scale": 0.125, "values": "normal"}
    sparse = {**base, "T": 1, "seed": 7073777892455990490}
    for label, recipe in (("dense minimal", base), ("sparse minimal", sparse),
                          ("dense, quantized scales", {**base, "block_scales": "quantized"}),
                          ("dense, amax global scale", {**base, "global_scale": "amax"}),
                          ("dense, contiguous layout", {**base, "layout": "contiguous"}),
                          ("dense, group 4", {**base, "group": 4})):
        try:
            run_recipe(recipe, label)
        except Exception as error:  # noqa: BLE001
            print(f"[recipe {label}] {type(error).__name__}: {error}")


def stage_ptx():
    caches = getattr(kernel_module._decode_splits_nvfp4, "device_caches", {})
    for device, cache in caches.items():
        for key, compiled in cache[0].items():
            ptx = compiled.asm.get("ptx", "")
            ftz = [line.strip() for line in ptx.splitlines() if ".ftz" in line]
            print(f"[ptx] a compiled variant: {len(ftz)} .ftz instructions; kinds: "
                  f"{sorted({line.split()[0] for line in ftz})[:12]}")
            cvt = sorted({line.split()[0] for line in ptx.splitlines() if line.strip().startswith("cvt")})
            print(f"   cvt kinds: {cvt[:20]}")
            mul16 = sorted({line.split()[0] for line in ptx.splitlines() if "f16" in line and "mul" in line})
            print(f"   f16 mul kinds: {mul16[:10]}")
            break


if __name__ == "__main__":
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu")
    for stage in (stage_decode, stage_convert_and_multiply, stage_dot, stage_recipes, stage_ptx):
        try:
            stage()
        except Exception as error:  # noqa: BLE001
            print(f"{stage.__name__}: {type(error).__name__}: {error}")
        sys.stdout.flush()
