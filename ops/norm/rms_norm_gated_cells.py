"""What both kernels of ``norm/rms_norm_gated`` (Triton: ``rms_norm_gated.py``, CuTe DSL:
``rms_norm_gated_cute.py``) claim alike: the parameters cells are bounded on, the cells, the byte
count, the bench input and the catalog entry around a kernel.  Both certificates digest this module.

Bytes: read ``x`` and ``z`` (``2 * T * H`` each, bf16), ``weight`` (``2 * H``), write ``y`` (``2 * T * H``)
and read-modify-write ``amax`` (4).  The op is memory-bound: at the H200's 4.3 TB/s of copy bandwidth
the bench case, [8192, 4096] with a gate, moves 201 MB in 47 us; the stock torch composition makes
about nine passes over it.
"""
from __future__ import annotations

import torch

from ops.catalog import BenchCase, Cell, Entry, OneOf, Parity, Span
from references.norm import rms_norm_gated as contract

GATES = ("none", "norm_then_gate", "gate_then_norm")
PER_HEAD_GROUPS = (64, 128, 256)


def gate_of(z, norm_before_gate) -> str:
    if z is None:
        return "none"
    return "norm_then_gate" if norm_before_gate else "gate_then_norm"


def params_of(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    tokens, width = x.shape
    return {"T": tokens, "H": width, "group": "row" if group_size == width else group_size,
            "gate": gate_of(z, norm_before_gate)}


_WIDTH = Span(64, 8192)
# a per-head row holds two groups or more: a group as wide as its row is the whole-row cells' input (params_of)
_PER_HEAD_WIDTH = Span(2 * min(PER_HEAD_GROUPS), _WIDTH.hi)
_ALL_GATES = OneOf(GATES)
_GATED = OneOf(("norm_then_gate", "gate_then_norm"))
CELLS = (
    Cell("empty_batch", "a step with no tokens (T = 0): returns an empty [0, H], launches nothing, leaves amax",
         {"T": Span(0, 0), "H": _WIDTH, "group": OneOf((*PER_HEAD_GROUPS, "row")), "gate": _ALL_GATES}),
    Cell("per_head_decode", "gated norm per head (Qwen3-Next, FLA's FusedRMSNormGated: heads of 64-256 "
         "channels) in decode batches of 1..64 tokens",
         {"T": Span(1, 64), "H": _PER_HEAD_WIDTH, "group": OneOf(PER_HEAD_GROUPS), "gate": _ALL_GATES}),
    Cell("per_head_prefill", "gated norm per head over prefill chunks of 65..8192 tokens",
         {"T": Span(65, 8192), "H": _PER_HEAD_WIDTH, "group": OneOf(PER_HEAD_GROUPS), "gate": _ALL_GATES}),
    Cell("gated_whole_row", "Mamba2's gated RMSNorm with one group per row (ngroups = 1), either gate order, "
         "1..8192 tokens",
         {"T": Span(1, 8192), "H": _WIDTH, "group": OneOf(("row",)), "gate": _GATED}),
    Cell("plain_rms_norm", "plain RMSNorm (no gate, one group per row: Llama's input norm), 1..8192 tokens; "
         "the case an ungated RMSNorm kernel such as quack's can be judged on",
         {"T": Span(1, 8192), "H": _WIDTH, "group": OneOf(("row",)), "gate": OneOf(("none",))}),
)


def bytes_moved(x, z, weight, eps, group_size, norm_before_gate=True, amax=None) -> int:
    activations = x.numel() * x.element_size()
    return (2 + (z is not None)) * activations + weight.numel() * weight.element_size() + 4 * (amax is not None)


def bench_gated_rows(tokens: int, width: int, group_size: int):
    """Qwen3-Next-like per-head gated norm with FP8 amax tracking: x, z ~ N(0, 1), weight ~ N(1, 0.1)."""
    def make(device):
        generator = torch.Generator(device=device).manual_seed(0)
        bf16 = lambda *shape: torch.randn(shape, generator=generator, device=device).to(torch.bfloat16)  # noqa: E731
        return {"x": bf16(tokens, width), "z": bf16(tokens, width), "weight": (1 + 0.1 * bf16(width).float()).to(torch.bfloat16),
                "eps": 1e-6, "group_size": group_size, "norm_before_gate": True,
                "amax": torch.zeros(1, device=device)}
    return make


BENCH = (
    BenchCase("gated, group 128, amax: bf16 [8192, 4096]", bench_gated_rows(8192, 4096, 128), bytes_moved,
              ">= 80% of copy bandwidth (the stock composition: 6%)"),
)


def entry(kernel, archs, backend: str) -> Entry:
    """The catalog entry of one backend's ``kernel``: the same contract, cells and bench for both."""
    return Entry.of_contract(
        contract,
        kernel=kernel,
        parity=Parity.BAND,
        params_of=params_of,
        cells=CELLS,
        archs=archs,
        batch_invariant=True,
        batch_args=("x", "z"),
        in_place=("amax",),
        properties=(contract.amax_is_max_of_returned_values,),
        bench=BENCH,
        backend=backend,
    )
