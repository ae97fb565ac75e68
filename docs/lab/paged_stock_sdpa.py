"""Which SDPA backend puts the paged stock op's o off on the H200 (issue #24, docs/lab/pending/README.md).

``sparse_nvfp4_kv``'s recipe of docs/results/2026-12-02/certify_sm90_paged.log failed closed: o's band vacuous,
the stock op 55.5 ULP from float64 truth (truth ~1e-9: zero and subnormal block scales) where the kernel was
within 0.46 ULP.  On the CPU the same cell's seed 26 put the bf16-SDPA stock op 25.8 ULP off: rounding the
decoded K to bf16 moves large scores.  The stock op now runs SDPA on the decoded float32 values.  This runs
it on that recipe (or the one given as JSON) with each of SDPA's backends alone, and prints each one's
error against the truth, with the magnitudes of the decoded V and of V rounded to bf16.

Run from the repository root, on the GPU: ``python3 docs/lab/paged_stock_sdpa.py [RECIPE_JSON]``.
"""
import contextlib
import json
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, ".")
from oracles.band import output_error  # noqa: E402
from ops.catalog import entries  # noqa: E402
from oracles.tensors import as_outputs, clone_inputs  # noqa: E402
from references.attention import paged_decode as dense_contract  # noqa: E402
from references.attention import paged_decode_nvfp4kv as contract  # noqa: E402

RECIPE = {"B": 2, "D": 64, "Hkv": 1, "M": 1, "S": 16, "T": 1, "block_scales": "zero_and_subnormal",
          "codes": "quantized", "global_scale": "amax", "group": 1, "holes": False, "kv_dtype": "nvfp4",
          "kv_scale": 1.0, "layout": "contiguous", "lengths": "mixed", "seed": 0, "sm_scale": 0.125,
          "values": "large_scores"}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}


@contextlib.contextmanager
def only(backend):
    """The stock op's own ``sdpa_kernel([...])`` narrowed to one backend."""
    chosen = dense_contract.sdpa_kernel
    dense_contract.sdpa_kernel = lambda backends: sdpa_kernel([backend])
    try:
        yield
    finally:
        dense_contract.sdpa_kernel = chosen


def main() -> None:
    recipe = json.loads(sys.argv[1]) if len(sys.argv) > 1 else RECIPE
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    entry = entries()["paged_decode_nvfp4kv"]
    kwargs = entry.strategy_module.build(recipe, device)
    truth = as_outputs(entry.truth(**clone_inputs(kwargs)))
    v = contract.decode_cache(kwargs["v_packed"], kwargs["v_scales"], kwargs["kv_global_scale"])
    finite = v[(v != 0) & v.isfinite()].abs()   # unattended slots hold NaN garbage
    smallest, largest = (finite.min().item(), finite.max().item()) if finite.numel() else (0.0, 0.0)
    subnormal = (v.to(torch.bfloat16).float().abs() < torch.finfo(torch.bfloat16).tiny) & (v != 0) & v.isfinite()
    print(f"device {device}; decoded V: {finite.numel()} finite nonzero, |v| {smallest:.3g} .. {largest:.3g}; "
          f"subnormal once rounded to bf16: {int(subnormal.sum())}; "
          f"|o| truth max {truth[0].abs().max().item():.3g}")
    for name, backend in [("stock as written", None), *BACKENDS.items()]:
        try:
            with only(backend) if backend is not None else contextlib.nullcontext():
                o, lse = entry.stock(**clone_inputs(kwargs))
        except RuntimeError as error:   # a backend that does not take these inputs says so
            print(f"{name}: {str(error).splitlines()[0][:120]}")
            continue
        errors = [output_error(out, true) for out, true in zip((o, lse), truth)]
        print(f"{name}: o {errors[0].error_ulp:.3g} ULP (relative RMS {errors[0].relative_rms:.3g}), "
              f"lse {errors[1].error_ulp:.3g} ULP")


if __name__ == "__main__":
    main()
