"""gdn_decode and gdn_verify launch one sm90 compile of ``_gdn_tokens`` (replay equivalence rests on it).

Triton specialises a launch on its integer arguments and pointers (16-divisible or not) and picks load
layouts, and with them reduction orders, from what it knows. On the H200 a q/k token stride that was
16-divisible in decode's T = 1 view and not in verify's fused projection gave the L2-norm sums another
order at 2 warps, and fp32 checkpoints parted from successive decode calls. Here each launch's sm90
specialisation is computed on the CPU, by Triton's own binder with the CUDA backend (nothing runs):
decode's must equal verify's on every recipe layout.
"""
from __future__ import annotations

import pytest
import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from ops.ssm import gdn_decode as decode
from ops.ssm import gdn_verify as verify
from references.ssm import gdn_verify_strategy as strategy

pytestmark = pytest.mark.cpu

SM90 = GPUTarget("cuda", 90, 32)
KERNEL = decode._gdn_tokens   # launches() stands a recorder in its place
# The H200's failing recipe (fp32_state, 2026-11-29), and the other layouts and head sizes.
FAILED_ON_H200 = {"B": 4, "Dk": 128, "Dv": 128, "H": 1, "T": 8, "free_slots": 3, "group": 1,
                  "layout": "fused_projection", "padding": "ends", "qk_l2norm": True, "scale": "inv_sqrt_dk",
                  "slots": "last_slot_free", "state_dtype": "float32", "tokens": "full", "values": "large",
                  "seed": 0}
RECIPES = {
    "failed_on_h200": FAILED_ON_H200,
    "fused_projection_gqa_bf16": {**FAILED_ON_H200, "H": 2, "group": 2, "Dk": 64, "Dv": 128, "T": 3,
                                  "state_dtype": "bfloat16", "tokens": "mixed"},
    "contiguous": {**FAILED_ON_H200, "layout": "contiguous", "Dv": 64, "T": 5},
    "strided_pool": {**FAILED_ON_H200, "layout": "strided_pool", "Dk": 64, "T": 2, "qk_l2norm": False},
}


def kernel_options() -> dict:
    """``_gdn_tokens``'s specialisation options, whether Triton compiles it or interprets it (CPU)."""
    if isinstance(KERNEL, JITFunction):
        return {"do_not_specialize": KERNEL.do_not_specialize,
                "do_not_specialize_on_alignment": KERNEL.do_not_specialize_on_alignment}
    return dict(KERNEL.kwargs)


def sm90_binder(do_not_specialize=None):
    """Triton's launch binder for ``_gdn_tokens`` on sm90; ``do_not_specialize`` replaces the kernel's."""
    options = kernel_options()
    if do_not_specialize is not None:
        options["do_not_specialize"] = do_not_specialize
    jit = JITFunction(KERNEL.fn, **options)
    return jit, create_function_from_signature(jit.signature, jit.params, make_backend(SM90))


def launches(monkeypatch, recipe) -> tuple[list, list]:
    """The (args, kwargs) of verify's launch and of each replaying decode call's, on ``recipe``'s inputs."""
    recorded = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: recorded.append((args, kwargs))

    kwargs = strategy.build(recipe, "cpu")
    monkeypatch.setattr(decode, "_gdn_tokens", Recorder())
    verify.gdn_verify(**kwargs)
    for t in range(recipe["T"]):
        decode.gdn_decode(kwargs["q"][:, t], kwargs["k"][:, t], kwargs["v"][:, t], kwargs["g"][:, t],
                          kwargs["beta"][:, t], kwargs["state"], kwargs["slots"], kwargs["scale"], kwargs["qk_l2norm"])
    return recorded[:1], recorded[1:]


def specialisation_differences(binder, jit, verify_launch, decode_launches) -> list[str]:
    names = [p.name for p in jit.params]
    _, verify_key, _ = binder(*verify_launch[0], **verify_launch[1])
    differences = []
    for t, (args, kwargs) in enumerate(decode_launches):
        _, decode_key, _ = binder(*args, **kwargs)
        differences += [f"token {t}: {name}: verify {v}, decode {d}"
                        for name, v, d in zip(names, verify_key, decode_key) if v != d]
    return differences


@pytest.mark.parametrize("recipe", RECIPES.values(), ids=RECIPES.keys())
def test_decode_and_verify_share_one_sm90_compile(monkeypatch, recipe):
    (verify_launch,), decode_launches = launches(monkeypatch, recipe)
    jit, binder = sm90_binder()
    assert specialisation_differences(binder, jit, verify_launch, decode_launches) == []


def test_a_specialised_token_stride_is_caught():
    """Negative control: the kernel as it was on the H200 (q, k, v token strides specialised) fails."""
    as_on_h200 = [name for name in kernel_options()["do_not_specialize"]
                  if name not in ("q_stride_t", "k_stride_t", "v_stride_t")]
    with pytest.MonkeyPatch.context() as monkeypatch:
        (verify_launch,), decode_launches = launches(monkeypatch, FAILED_ON_H200)
    jit, binder = sm90_binder(as_on_h200)
    differences = specialisation_differences(binder, jit, verify_launch, decode_launches)
    assert "token 0: q_stride_t: verify ('i32', ''), decode ('i32', 'D')" in differences
