"""FlashInfer on the H200, the steps ``docs/lab/h200_thirdparty.sh flashinfer-setup`` runs (GPU only):

    python3 docs/lab/flashinfer_h200.py warmup   build the decode kernels every paged_decode cell reaches (JIT)
    python3 docs/lab/flashinfer_h200.py probe    what FlashInfer writes on an empty row; its FP4 entry points
                                                 and torch's FP4 _scaled_mm on sm90 (refused or not, and how)

``warmup`` calls the adapter (``suites/thirdparty/flashinfer_decode.py``) once per cache dtype and head dim of
the paged_decode cells, so that the judge's first examples do not each wait for nvcc; it prints each build's
seconds (the JIT cache is ``$FLASHINFER_WORKSPACE_BASE``, kept between calls of a warm machine).
"""
from __future__ import annotations

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

HEAD_DIMS = (64, 128, 256)
CACHE_DTYPES = (torch.bfloat16, torch.float8_e4m3fn)


def _inputs(head_dim: int, cache_dtype, seq_lens=(40, 7), group: int = 4):
    device = torch.device("cuda")
    batch, kv_heads, page_size, width = len(seq_lens), 2, 16, 4
    pages = batch * width
    return {"q": torch.randn(batch, kv_heads * group, head_dim, device=device).bfloat16(),
            "k_cache": torch.randn(pages, page_size, kv_heads, head_dim, device=device).to(cache_dtype),
            "v_cache": torch.randn(pages, page_size, kv_heads, head_dim, device=device).to(cache_dtype),
            "page_table": torch.arange(pages, dtype=torch.int32, device=device).reshape(batch, width),
            "seq_lens": torch.tensor(seq_lens, dtype=torch.int32, device=device),
            "sm_scale": head_dim ** -0.5, "kv_scale": 1.0}


def warmup() -> int:
    from suites.thirdparty import flashinfer_decode

    total = time.perf_counter()
    for cache_dtype in CACHE_DTYPES:
        for head_dim in HEAD_DIMS:
            start = time.perf_counter()
            flashinfer_decode.paged_decode(**_inputs(head_dim, cache_dtype))
            torch.cuda.synchronize()
            print(f"{str(cache_dtype).removeprefix('torch.')} KV, D={head_dim}: {time.perf_counter() - start:.1f} s",
                  flush=True)
    print(f"warmup: {len(CACHE_DTYPES) * len(HEAD_DIMS)} variants in {time.perf_counter() - total:.0f} s")
    return 0


def _attempt(what: str, call) -> None:
    try:
        result = call()
        print(f"{what}: ran ({result})", flush=True)
    except Exception as error:  # noqa: BLE001 - the probe reports what each entry point does on this GPU
        print(f"{what}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}", flush=True)


def probe() -> int:
    import flashinfer

    from suites.thirdparty import flashinfer_decode

    print(f"device {torch.cuda.get_device_name()}, sm{''.join(map(str, torch.cuda.get_device_capability()))}, "
          f"flashinfer {flashinfer.__version__}, torch {torch.__version__}")
    inputs = _inputs(128, torch.bfloat16, seq_lens=(40, 0))   # row 1 attends nothing
    prepared = flashinfer_decode._prepare(**inputs)
    o, lse = flashinfer_decode._call(prepared)
    print(f"empty row, FlashInfer's own output: o finite {bool(o[1].isfinite().all())}, max |o| "
          f"{o[1].float().abs().max().item()}, lse {lse[1].tolist()[:2]} (base 2)")
    x = torch.randn(128, 256, device="cuda").bfloat16()
    scale = torch.tensor([448.0 * 6 / x.float().abs().max().item()], device="cuda")
    _attempt("flashinfer.fp4_quantize", lambda: [t.shape for t in flashinfer.fp4_quantize(x, scale)])
    _attempt("flashinfer.nvfp4_quantize", lambda: [t.shape for t in flashinfer.nvfp4_quantize(x, scale)])
    _attempt("flashinfer.mm_bf16_fp4 (W4A16, the nvfp4_gemv contract)",
             lambda: flashinfer.mm_bf16_fp4(x[:16], torch.zeros(256, 64, dtype=torch.uint8, device="cuda"),
                                            torch.zeros(256, 8, dtype=torch.uint8, device="cuda"), scale,
                                            backend="cudnn").shape)
    a = torch.zeros(16, 128, dtype=torch.uint8, device="cuda").view(torch.float4_e2m1fn_x2)
    sf = torch.ones(16, 16, device="cuda").to(torch.float8_e4m3fn)
    _attempt("torch._scaled_mm, float4_e2m1fn_x2 with e4m3 block scales",
             lambda: torch._scaled_mm(a, a.t(), sf, sf, out_dtype=torch.bfloat16).shape)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("warmup", "probe"):
        print("usage: docs/lab/flashinfer_h200.py warmup|probe", file=sys.stderr)
        sys.exit(2)
    sys.exit(warmup() if sys.argv[1] == "warmup" else probe())
