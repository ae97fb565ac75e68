"""Why ``paged_decode_nvfp4kv/sparse_nvfp4_kv`` failed closed at 220 draws on the H100 (2026-12-06c): the
lse band of one input was vacuous, E = 16.6 ULP set by the stock op, against the op's limit of 32.

On the failing minimal recipe, built on this device as certification builds it: each legitimate
implementation's lse error against the float64 truth (ULP of the row's largest |lse|), its five worst
(row, head) with the row's conditioning (largest ``sm_scale * sum_d |q_d k_d|`` over |lse|), the kernel's
error beside them, and, for the stock op's worst row, its scores' dot taken again: batched as the stock op
takes it, the row alone, and the float64 dot rounded once (the error of the dot itself, in ULP of lse).
Run from the repository root: ``PYTHONPATH=. python3 docs/lab/nvfp4kv_lse_band.py [RECIPE_JSON]``.
"""
import json
import sys

import torch

from references.attention import paged_decode_nvfp4kv as reference
from references.attention import paged_decode_nvfp4kv_strategy as strategy
from references.attention.paged_decode_strategy import attended_tokens

RECIPE = ('{"B":95,"D":128,"Hkv":2,"M":3,"S":16,"T":31,"block_scales":"zero_and_subnormal","codes":"quantized",'
          '"global_scale":"amax","group":1,"holes":true,"kv_dtype":"nvfp4","kv_scale":1.0,"layout":"contiguous",'
          '"lengths":"mixed","seed":0,"sm_scale":0.08838834764831845,"values":"large_scores"}')
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def lse_error_ulp(lse: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    finite = truth.isfinite()
    scale = truth.abs().where(finite, torch.zeros((), dtype=truth.dtype, device=truth.device)).amax(1, keepdim=True)
    unit = 2.0 ** (torch.floor(torch.log2(scale.clamp_min(1e-30))) - 23)
    return ((lse.double() - truth).abs() / unit).where(finite, torch.zeros((), dtype=truth.dtype, device=truth.device))


def main() -> None:
    recipe = json.loads(sys.argv[1] if len(sys.argv) > 1 else RECIPE)
    inputs = strategy.build(recipe, DEVICE)
    _, truth = reference.truth(**inputs)
    results = {"stock": reference.stock(**inputs)[1]}
    results.update({order: lse for order, (_, lse) in reference.paged_decode_nvfp4kv_in_orders(**inputs).items()})
    if DEVICE == "cuda":
        from ops.attention.paged_decode_nvfp4kv import paged_decode_nvfp4kv
        results["kernel"] = paged_decode_nvfp4kv(**inputs)[1]
    errors = {name: lse_error_ulp(lse, truth).cpu() for name, lse in results.items()}
    print(f"device {torch.cuda.get_device_name() if DEVICE == 'cuda' else 'cpu'}; recipe {json.dumps(recipe)}")
    for name, error in sorted(errors.items(), key=lambda item: -float(item[1].max())):
        print(f"{name:16s} worst {float(error.max()):6.2f} ULP  mean {float(error.mean()):.3f}")
    k = reference.decode_cache(inputs["k_packed"], inputs["k_scales"], inputs["kv_global_scale"])
    pages, page_size, kv_heads, head_dim = k.shape
    attended = attended_tokens(inputs["page_table"], inputs["seq_lens"], page_size, inputs["page_select"])
    sm_scale, q = float(inputs["sm_scale"]), inputs["q"]
    group = q.shape[1] // kv_heads
    stock = errors["stock"]
    print("stock's five worst (row, head): the row's conditioning and every implementation there")
    for index in torch.topk(stock.flatten(), 5).indices.tolist():
        row, head = divmod(index, stock.shape[1])
        token = attended[row].nonzero()[:, 0]
        keys = k[inputs["page_table"][row, token // page_size].long(), token % page_size, head // group]  # [n, D]
        query = q[row, head].float()
        terms = (query.double()[None, :] * keys.double()).abs().sum(-1) * sm_scale
        exact = (keys.double() @ query.double()) * sm_scale
        alone = (keys @ query) * sm_scale
        top = int(exact.argmax())
        unit = 2.0 ** (torch.floor(torch.log2(truth[row].abs().max())) - 23)
        print(f"  row {row} head {head}: lse {float(truth[row, head]):.4f}, {token.numel()} tokens, "
              f"sum|qk| / |lse| {float(terms.max() / truth[row].abs().max()):.2f}; top score's dot alone "
              f"{float((alone[top].double() - exact[top]).abs() / unit):.2f} ULP, float64 rounded once "
              f"{float((exact[top].float().double() - exact[top]).abs() / unit):.2f}")
        print("    " + ", ".join(f"{name} {float(error[row, head]):.2f}" for name, error in errors.items()))


if __name__ == "__main__":
    main()


def stock_variants() -> None:
    """The stock op's lse on the same input taken other ways: the matmul settings of this process, the
    whole batch on the CPU, the worst row alone, and with TF32 explicitly off."""
    recipe = json.loads(sys.argv[1] if len(sys.argv) > 1 else RECIPE)
    inputs = strategy.build(recipe, DEVICE)
    _, truth = reference.truth(**inputs)
    print(f"float32 matmul precision {torch.get_float32_matmul_precision()}, "
          f"allow_tf32 {torch.backends.cuda.matmul.allow_tf32}")
    error = lse_error_ulp(reference.stock(**inputs)[1], truth)
    row, head = divmod(int(error.argmax()), error.shape[1])
    print(f"as certified: worst {float(error.max()):.2f} at row {row} head {head}")
    on_cpu = {name: value.cpu() if isinstance(value, torch.Tensor) else value for name, value in inputs.items()}
    print(f"the same input on the CPU: worst {float(lse_error_ulp(reference.stock(**on_cpu)[1], truth.cpu()).max()):.2f}")
    alone = {name: value[row:row + 1] if name in ("q", "page_table", "seq_lens", "page_select") and value is not None
             else value for name, value in inputs.items()}
    print(f"row {row} alone: {float(lse_error_ulp(reference.stock(**alone)[1], truth[row:row + 1]).max()):.2f}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    print(f"TF32 off, precision highest: worst {float(lse_error_ulp(reference.stock(**inputs)[1], truth).max()):.2f}")


if __name__ == "__main__" and DEVICE == "cuda":
    stock_variants()
