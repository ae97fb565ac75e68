"""FlashInfer's paged decode findings at 220 draws (2026-12-07c), each reproduced outside the judge on the GPU.
One step a process (a CUDA error ends the context): ``python3 docs/lab/flashinfer_findings.py STEP [RECIPE_JSON]``

    lse RECIPE     the recipe's lse three ways against the float64 truth, in fp32 ULP of each row's |truth|:
                   FlashInfer as the adapter calls it (tensor cores, vLLM's configuration), FlashInfer on its CUDA
                   cores (``use_tensor_cores=False``), and a float64 model of the tensor-core kernel's
                   denominator: each probability exp2(s - m) rounded to bf16 before the row sum (its
                   ``m16k16_rowsum_f16f16f32`` over the bf16 P fragment, ``attention/prefill.cuh``), one KV tile
    batch RECIPE   each row alone against the same row in the recipe's batch, bit for bit, with FlashInfer's
                   default plan and with ``plan(..., disable_split_kv=True)`` (its batch-invariance control)
    refuse NAME    one row of the contract's refusal table (``references/attention/paged_decode.py``) alone,
                   through the adapter, then a legal call: what FlashInfer does with it, and whether the process
                   can still compute

Every step prints what it compared and ends with one ``STEP: ...`` line.
"""
from __future__ import annotations

import json
import math
import pathlib
import sys
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import flashinfer  # noqa: E402
import torch  # noqa: E402

from ops.catalog import op  # noqa: E402
from references.attention import paged_decode as reference  # noqa: E402
from suites.thirdparty import flashinfer_decode as adapter  # noqa: E402

DEVICE = torch.device("cuda")
LN2 = math.log(2.0)
FLASHINFER_WRAPPER = flashinfer.BatchDecodeWithPagedKVCacheWrapper


def _wrapper_class(use_tensor_cores: bool = True, disable_split_kv: bool = False):
    """FlashInfer's wrapper as the adapter makes it, but with these two settings."""
    class Configured(FLASHINFER_WRAPPER):
        def __init__(self, workspace, layout, **options):
            options["use_tensor_cores"] = use_tensor_cores
            super().__init__(workspace, layout, **options)

        def plan(self, *args, **options):
            return super().plan(*args, disable_split_kv=disable_split_kv, **options)
    return Configured


def _run(call: dict, **settings):
    adapter.flashinfer.BatchDecodeWithPagedKVCacheWrapper = _wrapper_class(**settings)
    try:
        o, lse = adapter.paged_decode(**call)
    finally:
        adapter.flashinfer.BatchDecodeWithPagedKVCacheWrapper = FLASHINFER_WRAPPER
    torch.cuda.synchronize()
    return o, lse


def _ulp_errors(lse: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """|lse - truth| in fp32 ULP of |truth| (finite entries)."""
    scale = torch.finfo(torch.float32).eps * torch.exp2(torch.floor(torch.log2(truth.abs().clamp_min(1e-30))))
    return ((lse.double() - truth) / scale).abs()


def _bf16_probability_lse(call: dict) -> torch.Tensor:
    """The tensor-core kernel's lse in float64 but for its probabilities rounded to bf16 before the row sum
    (one KV tile: the running maximum is the row's)."""
    lse = torch.full(call["q"].shape[:2], -torch.inf, dtype=torch.float64, device=DEVICE)
    for rows in reference.attended_rows(call["q"], call["k_cache"], call["v_cache"], call["page_table"],
                                        call["seq_lens"], call["kv_scale"], call["page_select"], torch.float64, 1):
        scores = rows.masked(reference.element_scores(rows.q, rows.k, call["kv_scale"], float(call["sm_scale"])))
        scores2 = scores / LN2                                              # base 2, as the kernel's exp2
        top = scores2.amax(dim=-1, keepdim=True)
        probabilities = torch.exp2(scores2 - top).to(torch.bfloat16).double()
        row_lse = (top.squeeze(-1) + torch.log2(probabilities.sum(dim=-1))) * LN2
        rows.store(torch.zeros(call["q"].shape, dtype=torch.float64, device=DEVICE), lse, rows.q * 0, row_lse)
    return lse


def lse_step(recipe: dict) -> None:
    call = op("paged_decode").strategy_module.build(recipe, DEVICE)
    _, truth = reference.truth(**call)
    tensor_cores = _run(call)[1]
    model = _bf16_probability_lse(call)
    cuda_cores = _run(call, use_tensor_cores=False)[1]
    finite = torch.isfinite(truth)
    for name, lse in (("tensor cores (the adapter's)", tensor_cores), ("CUDA cores", cuda_cores),
                      ("model: bf16 probabilities summed", model)):
        errors = _ulp_errors(lse, truth)[finite]
        print(f"{name}: worst {errors.max().item():.3g} ULP, mean {errors.mean().item():.3g} ULP vs the truth "
              f"({int(finite.sum())} finite rows x heads)")
    against_model = _ulp_errors(tensor_cores, model)[finite]
    print(f"tensor cores against the model: worst {against_model.max().item():.3g} ULP")
    for index in range(min(4, int(finite.sum()))):
        at = finite.nonzero()[index].tolist()
        print(f"  {at}: truth {truth[tuple(at)].item():.9f} tensor cores {tensor_cores[tuple(at)].item():.9f} "
              f"model {model[tuple(at)].item():.9f} CUDA cores {cuda_cores[tuple(at)].item():.9f}")
    print("lse: done")


def _row(call: dict, index: int) -> dict:
    alone = dict(call)
    for name in ("q", "page_table", "seq_lens", "page_select"):
        if call.get(name) is not None:
            alone[name] = call[name][index:index + 1]
    return alone


def batch_step(recipe: dict) -> None:
    call = op("paged_decode").strategy_module.build(recipe, DEVICE)
    for disable_split_kv in (False, True):
        together = _run(call, disable_split_kv=disable_split_kv)
        differing = []
        for index in range(call["q"].shape[0]):
            alone = _run(_row(call, index), disable_split_kv=disable_split_kv)
            count = sum(int((a.view(torch.int16 if a.dtype == torch.bfloat16 else torch.int32) !=
                             t[index:index + 1].view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)).sum())
                        for a, t in zip(alone, together))
            differing.append(count)
        print(f"disable_split_kv={disable_split_kv}: elements differing alone vs in the batch, a row: {differing}")
    print("batch: done")


def refuse_step(name: str) -> None:
    row = next(refusal for refusal in reference.REFUSALS if refusal.what == name)
    try:
        returned = adapter.paged_decode(**row.make(DEVICE))
        torch.cuda.synchronize()
        print(f"{name}: answered, {[tuple(t.shape) for t in returned]}")
    except Exception:  # noqa: BLE001 - what FlashInfer does is the point
        traceback.print_exc(limit=4)
        print(f"{name}: raised")
    try:
        legal = op("paged_decode").strategy_module.build(json.loads(MINIMAL_BF16), DEVICE)
        adapter.paged_decode(**legal)
        torch.cuda.synchronize()
        print("then a legal call: ran")
    except Exception as error:  # noqa: BLE001
        print(f"then a legal call: {type(error).__name__}: {str(error).splitlines()[0]}")
    print("refuse: done")


MINIMAL_BF16 = ('{"B":1,"D":64,"Hkv":1,"M":1,"S":16,"T":null,"group":1,"holes":true,"kv_dtype":"bfloat16",'
                '"kv_scale":0.5,"layout":"interleaved","lengths":"mixed","seed":4906993901901878943,"sm_scale":0.125,'
                '"values":"normal"}')

if __name__ == "__main__":
    step = sys.argv[1]
    if step == "refuse":
        refuse_step(sys.argv[2])
    else:
        {"lse": lse_step, "batch": batch_step}[step](json.loads(sys.argv[2]))
