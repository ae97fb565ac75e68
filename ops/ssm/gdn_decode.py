"""ssm/gdn_decode — one Gated DeltaNet token per row, in place on a slot-indexed state pool.

Contract (CONTRACTS.md): ``gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False) -> o``;
q, k bf16 ``[B, H, Dk]``, v bf16 ``[B, HV, Dv]`` (v head i reads q/k head ``i // (HV // H)``), g, beta
fp32 ``[B, HV]``, ``state[S, HV, Dk, Dv]`` fp32 or bf16, slots int32 ``[B]`` (-1: padding row, o = 0,
no state touched).  Per (row, v head), in fp32: ``h = h * exp(g); u = beta * (v - h^T k);
h = h + outer(k, u); o = scale * (h^T q)``, then h is rounded to the state dtype and stored.  Band
parity (o and the pool); replay equivalence with ``gdn_verify`` + ``gdn_commit`` (bitwise).

Bytes: read and write ``B * HV * Dk * Dv`` state elements (the whole cost: 256 MiB at B=64, HV=32,
Dk=Dv=128 fp32, 62 us at 4.3 TB/s copy bandwidth), plus q, k, v, g, beta and o (under 1%).

One kernel, :func:`_gdn_tokens`, serves ``gdn_decode`` (T = 1, state written back to its slot) and
``gdn_verify`` (T tokens, each state written to a checkpoint): a program owns the ``[Dk, BV]`` block
of one (row, v head) state, holds it in registers across its tokens and reads it from memory once.
Replay equivalence asks the two to round bitwise alike, so both go through the same compiled kernel:
what differs between them (token count and strides, where states go, whether padding rows are written) is
runtime arguments, never specialised, and the launch plan depends only on (Dk, Dv).
"""
from __future__ import annotations

import dataclasses
import importlib.util

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, BenchCase, Cell, Entry, OneOf, Parity, Span
from ops.triton_backend import exp_fp32, float32_to_bf16_rne, interpreting
from ops.triton_masks import block_and
from references.ssm import gdn_decode as contract
from references.ssm import gdn_verify as verify_contract
from references.validation import require_within_limits

MAX_HEAD_DIM = 256   # a program keeps a [Dk, BV] fp32 block and Dk-long q, k in registers


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    block_k: int     # Dk rows of a program's state block (all of them, padded to a power of two)
    block_v: int     # Dv columns of a program's state block
    num_warps: int


def launch_plan(dk: int, dv: int, interpreted: bool) -> LaunchPlan:
    """Depends on (Dk, Dv) only: never on B or T, so a row rounds the same alone or in a batch (batch
    invariance) and in gdn_decode or gdn_verify (replay equivalence)."""
    block_k = triton.next_power_of_2(dk)
    if interpreted:
        # The interpreter charges per operation, not per element (13 to 45 ms per program and token,
        # measured here): one program per (row, v head).
        return LaunchPlan(block_k=block_k, block_v=triton.next_power_of_2(dv), num_warps=4)
    # 32 columns (128 bytes of each fp32 state row, 64 of bf16), all Dk rows, 64 state values per thread:
    # more state in flight per thread hides the memory latency better ([128, 32] on 2 warps: 76.8 us on
    # the H200 at B=64 HV=32 Dk=Dv=128 fp32, the best; the other plans in docs/ops/gdn_decode.md).
    block_v = min(triton.next_power_of_2(dv), 32)
    num_warps = max(1, min(8, block_k * block_v // (64 * 32)))
    return LaunchPlan(block_k=block_k, block_v=block_v, num_warps=num_warps)


# -- kernel ---------------------------------------------------------------------------------------
@triton.jit(
    # Scalars and per-row pointers: specialising them would compile gdn_decode and gdn_verify apart.
    # The q, k, v token strides too: decode's T = 1 view has a stride of H * Dk, verify's that of the
    # caller (392 in a fused projection), and a 16-divisible stride let Triton load q and k two
    # elements a thread at 2 warps, so the L2-norm sums ran in another order than verify's (H200,
    # 2026-11-29: 4138 of 16384 fp32 state elements apart after 3 tokens). Never specialised, the
    # loop's q, k pointers have no known alignment whoever calls: one layout, one summation order.
    # The row strides neither (bounds and index tensors: one compile per plan): they only move the
    # loop-carried pointers, whose alignment the token strides already leave unknown.
    do_not_specialize=["q_stride_b", "q_stride_t", "k_stride_b", "k_stride_t", "v_stride_b", "v_stride_t",
                       "g_stride_b", "g_stride_t", "g_stride_h", "beta_stride_b", "beta_stride_t",
                       "beta_stride_h", "count_stride", "count_given", "tokens", "num_slots", "slots_stride",
                       "write_padding"],
    do_not_specialize_on_alignment=["g_ptr", "beta_ptr", "count_ptr", "slots_ptr"],
)
def _gdn_tokens(
    # drafted tokens: q, k [B, T, H, Dk], v [B, T, HV, Dv] bf16; g, beta [B, T, HV] fp32
    q_ptr, q_stride_b, q_stride_t, q_stride_h,
    k_ptr, k_stride_b, k_stride_t, k_stride_h,
    v_ptr, v_stride_b, v_stride_t, v_stride_h,
    g_ptr, g_stride_b, g_stride_t, g_stride_h,
    beta_ptr, beta_stride_b, beta_stride_t, beta_stride_h,
    scale,
    # tokens per row: count_ptr[b] clamped to 0..tokens when count_given, else every row runs `tokens`
    count_ptr, count_stride, count_given, tokens,
    # the pool it starts from, and which slot each row reads (outside 0..num_slots-1: padding)
    state_ptr, state_stride_slot, num_slots, slots_ptr, slots_stride,
    # outputs: o [B, T, HV, Dv] bf16; the state after each token goes to
    # dst + slot * dst_stride_slot + b * dst_stride_b + t * dst_stride_t (the pool, or checkpoints)
    o_ptr, o_stride_b, o_stride_t, o_stride_h,
    dst_ptr, dst_stride_slot, dst_stride_b, dst_stride_t, write_padding,
    # meta
    HV: tl.constexpr, GROUP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, STATE_BF16: tl.constexpr, QK_L2NORM: tl.constexpr,
):
    pid = tl.program_id(0)
    v_blocks: tl.constexpr = (DV + BLOCK_V - 1) // BLOCK_V
    v_block = pid % v_blocks
    head_v = (pid // v_blocks) % HV
    row = (pid // (v_blocks * HV)).to(tl.int64)
    head_qk = head_v // GROUP
    ks = tl.arange(0, BLOCK_K)
    vs = v_block * BLOCK_V + tl.arange(0, BLOCK_V)
    k_in, v_in = ks < DK, vs < DV
    in_block = k_in[:, None] & v_in[None, :]
    block = head_v * DK * DV + ks[:, None] * DV + vs[None, :]

    slot = tl.load(slots_ptr + row * slots_stride).to(tl.int64)
    live = (slot >= 0) & (slot < num_slots)
    count = tl.load(count_ptr + row * count_stride, mask=count_given != 0, other=tokens)
    count = tl.where(live, tl.minimum(tl.maximum(count, 0), tokens), 0)
    stores_state = block_and(in_block, live | (write_padding != 0))

    h = tl.load(state_ptr + slot * state_stride_slot + block, mask=block_and(in_block, live), other=0.0)
    if STATE_BF16:
        h = h.to(tl.float32)
    # token 0's addresses; each token moves them on by the token strides
    q_ptrs = q_ptr + row * q_stride_b + head_qk * q_stride_h + ks
    k_ptrs = k_ptr + row * k_stride_b + head_qk * k_stride_h + ks
    v_ptrs = v_ptr + row * v_stride_b + head_v * v_stride_h + vs
    g_ptrs = g_ptr + row * g_stride_b + head_v * g_stride_h
    beta_ptrs = beta_ptr + row * beta_stride_b + head_v * beta_stride_h
    o_ptrs = o_ptr + row * o_stride_b + head_v * o_stride_h + vs
    dst_ptrs = dst_ptr + slot * dst_stride_slot + row * dst_stride_b + block
    for t in range(0, tokens):
        active = t < count
        k_mask = block_and(k_in, active)
        q = tl.load(q_ptrs, mask=k_mask, other=0.0).to(tl.float32)
        k = tl.load(k_ptrs, mask=k_mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptrs, mask=block_and(v_in, active), other=0.0).to(tl.float32)
        g = tl.load(g_ptrs, mask=active, other=0.0)
        beta = tl.load(beta_ptrs, mask=active, other=0.0)
        if QK_L2NORM:
            q = tl.math.div_rn(q, tl.math.sqrt_rn(tl.sum(q * q, axis=0) + 1e-6))
            k = tl.math.div_rn(k, tl.math.sqrt_rn(tl.sum(k * k, axis=0) + 1e-6))
        # the contract's step, in its order
        h = h * exp_fp32(g)
        u = beta * (v - tl.sum(h * k[:, None], axis=0))
        h = h + k[:, None] * u[None, :]
        o = scale * tl.sum(h * q[:, None], axis=0)
        if STATE_BF16:
            h = float32_to_bf16_rne(h).to(tl.float32)   # the rounded value is the state from here on
        # inactive tokens (past the count, padding rows) may load garbage: where() drops it
        tl.store(o_ptrs, float32_to_bf16_rne(tl.where(active, o, 0.0)), mask=v_in)
        out = tl.where(active, h, 0.0)
        if STATE_BF16:
            out = float32_to_bf16_rne(out)
        tl.store(dst_ptrs, out, mask=stores_state)
        q_ptrs += q_stride_t
        k_ptrs += k_stride_t
        v_ptrs += v_stride_t
        g_ptrs += g_stride_t
        beta_ptrs += beta_stride_t
        o_ptrs += o_stride_t
        dst_ptrs += dst_stride_t


# -- host wrappers ----------------------------------------------------------------------------------
def kernel_limits(q, k, v, g, beta, state, slots, scale, qk_l2norm=False, num_tokens=None) -> str | None:
    """This kernel's own limits (gdn_decode and gdn_verify), narrower than the contract's: it reads unit-stride
    head dims, whole contiguous slots, a host ``scale``, and keeps head dims up to ``MAX_HEAD_DIM`` in registers."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
            return f"{name}: stride(-1) = {tensor.stride(-1)}; this kernel reads unit-stride head dims"
    if not state[:1].is_contiguous():
        return f"state: strides {state.stride()}; this kernel reads each slot as one contiguous [HV, Dk, Dv] block"
    if isinstance(scale, torch.Tensor):
        return "scale: a tensor; this kernel takes a host number (reading a tensor would sync)"
    if q.shape[-1] > MAX_HEAD_DIM:
        return f"q: Dk = {q.shape[-1]} is above this kernel's {MAX_HEAD_DIM}"
    if v.shape[-1] > MAX_HEAD_DIM:
        return f"v: Dv = {v.shape[-1]} is above this kernel's {MAX_HEAD_DIM}"
    return None


def plan_for(q: torch.Tensor, v: torch.Tensor) -> LaunchPlan:
    return launch_plan(q.shape[-1], v.shape[-1], interpreting())


def launch_tokens(plan: LaunchPlan, q, k, v, g, beta, scale, qk_l2norm, num_tokens, state, slots,
                  o, destination, destination_strides, write_padding: bool) -> None:
    """Run :func:`_gdn_tokens` on validated ``[B, T, ...]`` views.

    ``num_tokens``: int32 ``[B]``, or None for T tokens on every row.  ``destination_strides``:
    (per slot, per row, per token) element strides of where each token's state goes.
    """
    batch, tokens, heads, dk = q.shape
    heads_v, dv = v.shape[2], v.shape[3]
    if batch == 0:
        return
    count = slots if num_tokens is None else num_tokens   # never read when None: count_given = 0
    grid = (batch * heads_v * triton.cdiv(dv, plan.block_v),)
    _gdn_tokens[grid](
        q, *q.stride()[:3], k, *k.stride()[:3], v, *v.stride()[:3], g, *g.stride(), beta, *beta.stride(),
        float(scale),
        count, count.stride(0), int(num_tokens is not None), tokens,
        state, state.stride(0), state.shape[0], slots, slots.stride(0),
        o, *o.stride()[:3],
        destination, *destination_strides, int(write_padding),
        HV=heads_v, GROUP=heads_v // heads, DK=dk, DV=dv, BLOCK_K=plan.block_k, BLOCK_V=plan.block_v,
        STATE_BF16=state.dtype == torch.bfloat16, QK_L2NORM=qk_l2norm, num_warps=plan.num_warps,
    )


def run_plan(plan: LaunchPlan, q, k, v, g, beta, state, slots, scale, qk_l2norm=False) -> torch.Tensor:
    """One decode step under ``plan`` on validated inputs (``tools/bench --variants`` sweeps plans)."""
    batch, heads_v, dv = v.shape
    o = torch.empty(batch, heads_v, dv, dtype=torch.bfloat16, device=q.device)
    launch_tokens(plan, q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None], scale, qk_l2norm, None,
                  state, slots, o[:, None], state, (state.stride(0), 0, 0), write_padding=False)
    return o


def gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False) -> torch.Tensor:
    contract.validate(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    require_within_limits(kernel_limits(q, k, v, g, beta, state, slots, scale, qk_l2norm))
    return run_plan(plan_for(q, v), q, k, v, g, beta, state, slots, scale, qk_l2norm)


def bench_variants(q, k, v, g, beta, state, slots, scale, qk_l2norm=False) -> dict:
    """Other block widths and warp counts, for ``tools/bench --variants`` to time beside the plan."""
    block_k = triton.next_power_of_2(q.shape[-1])
    variants = {}
    for block_v, num_warps in ((8, 1), (8, 2), (16, 2), (16, 4), (32, 1), (32, 4), (32, 8), (64, 4), (64, 8)):
        plan = LaunchPlan(block_k=block_k, block_v=min(block_v, triton.next_power_of_2(v.shape[-1])),
                          num_warps=num_warps)
        variants[f"block_v={plan.block_v} warps={num_warps}"] = (
            lambda plan=plan, **kwargs: run_plan(plan, **kwargs))
    return variants


# -- bench ----------------------------------------------------------------------------------------
def bytes_moved(q, k, v, g, beta, state, slots, scale, qk_l2norm=False) -> int:
    rows_state = v.shape[0] * state[0].numel() * state.element_size()
    return 2 * rows_state + sum(x.numel() * x.element_size() for x in (q, k, v, g, beta, slots)) + v.numel() * 2


def serving_inputs(device, lead: tuple, heads, heads_v, dk, dv, state_dtype) -> dict:
    """Serving-shaped inputs with leading dims ``lead`` ((B,) or (B, T)): unit-norm q and k, decays from
    a softplus, and a pool of exactly B slots with row b on slot b."""
    batch = lead[0]

    def unit(*shape):
        return torch.nn.functional.normalize(torch.randn(*shape, device=device), dim=-1).bfloat16()

    return {
        "q": unit(*lead, heads, dk), "k": unit(*lead, heads, dk),
        "v": torch.randn(*lead, heads_v, dv, device=device).bfloat16(),
        "g": -torch.nn.functional.softplus(torch.randn(*lead, heads_v, device=device)),
        "beta": torch.rand(*lead, heads_v, device=device),
        "state": (0.1 * torch.randn(batch, heads_v, dk, dv, device=device)).to(state_dtype),
        "slots": torch.arange(batch, dtype=torch.int32, device=device),
        "scale": dk ** -0.5, "qk_l2norm": False,
    }


def fla_fused_recurrent(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    """fla-core's ``fused_recurrent_gated_delta_rule`` on the same bytes: row b's state is pool slot b
    (the bench's slots are 0..B-1), read as ``initial_state`` and written to a fresh ``final_state``."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    return fused_recurrent_gated_delta_rule(q[:, None], k[:, None], v[:, None], g=g[:, None], beta=beta[:, None],
                                            scale=scale, initial_state=state, output_final_state=True,
                                            use_qk_l2norm_in_kernel=qk_l2norm)


# fla-core is a test-only extra: its row appears only where it is installed.
FLA_COMPETITORS = {"fla-core fused_recurrent_gated_delta_rule": fla_fused_recurrent} \
    if importlib.util.find_spec("fla") is not None else {}


# -- catalog entry --------------------------------------------------------------------------------
def params_of(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    return {"B": q.shape[0], "H": q.shape[1], "group": v.shape[1] // max(q.shape[1], 1), "Dk": q.shape[2],
            "Dv": v.shape[2], "state_dtype": state.dtype, "qk_l2norm": qk_l2norm}


def gdn_cells(**extra_bounds) -> tuple[Cell, ...]:
    """The contract's regime (B 0..256, H 1..32, HV/H in {1, 2, 4}, Dk, Dv in {64, 128}), per state dtype."""
    common = {"B": Span(0, 256), "H": Span(1, 32), "group": OneOf((1, 2, 4)), "Dk": OneOf((64, 128)),
              "Dv": OneOf((64, 128)), "qk_l2norm": OneOf((False, True)), **extra_bounds}
    return (
        Cell("fp32_state", "Qwen3-Next-style GDN layers on an fp32 state pool (vLLM's default ssm cache "
                           "dtype): 16 q/k and 32 v heads of 128", {**common, "state_dtype": OneOf((torch.float32,))}),
        Cell("bf16_state", "a bf16 state pool (half the state traffic and memory): rounding between tokens "
                           "is where decode and verify can part", {**common, "state_dtype": OneOf((torch.bfloat16,))}),
    )


CELLS = gdn_cells()

ENTRY = Entry.of_contract(
    contract,
    kernel=gdn_decode,
    parity=Parity.BAND,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    batch_invariant=True,
    batch_args=("q", "k", "v", "g", "beta", "slots"),
    in_place=("state",),
    siblings=("gdn_verify", "gdn_commit"),
    properties=(contract.writes_only_live_slots, verify_contract.replay_equivalence_of_decode_inputs),
    limits=kernel_limits,
    bench=(
        BenchCase("B=64 H=16 HV=32 Dk=Dv=128 fp32 state, one decode step",
                  lambda device: serving_inputs(device, (64,), 16, 32, 128, 128, torch.float32),
                  bytes_moved, ">= 75% of copy bandwidth (state read + write); >= 1.15x fla-core",
                  competitors=FLA_COMPETITORS),
    ),
)
