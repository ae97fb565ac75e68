"""ssm/gdn_verify — score T drafted tokens per row from the pool, leaving the pool untouched.

Contract (CONTRACTS.md): ``gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale,
qk_l2norm=False) -> (o bf16[B, T, HV, Dv], checkpoints[B, T, HV, Dk, Dv])``: the gdn_decode step over
tokens ``0..num_tokens[b]-1`` from ``state[slots[b]]``; ``checkpoints[b, t]`` is the state after token t
(rounded to the state dtype, as decode stores it); zero past a row's count and for padding rows.
Band parity; replay equivalence with gdn_decode + gdn_commit (bitwise), judged by the stateful oracle.

Bytes: read ``B * HV * Dk * Dv`` state elements once, write ``T`` times as many checkpoints (at B=64,
HV=32, Dk=Dv=128, T=4 fp32: 128 MiB read, 512 MiB written; 4 decode steps move 1 GiB, verify plus the
commit of one checkpoint per row 896 MiB).

The kernel is gdn_decode's :func:`ops.ssm.gdn_decode._gdn_tokens` with T tokens and checkpoints as the
destination, compiled once for both: the bits of every token's state and output are decode's.
"""
from __future__ import annotations

import torch

from ops.catalog import ALL_ARCHS, BenchCase, Entry, Parity, Span
from ops.ssm import gdn_decode as decode
from ops.ssm.gdn_commit import gdn_commit
from references.ssm import gdn_verify as contract
from references.validation import require_within_limits


# -- host wrapper ---------------------------------------------------------------------------------
def gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    contract.validate(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    require_within_limits(decode.kernel_limits(q, k, v, g, beta, state, slots, scale, qk_l2norm, num_tokens))
    batch, tokens, heads_v, dv = v.shape
    o = torch.empty(batch, tokens, heads_v, dv, dtype=torch.bfloat16, device=q.device)
    checkpoints = torch.empty(batch, tokens, *state.shape[1:], dtype=state.dtype, device=q.device)
    # padding rows and tokens past a row's count are written as zeros: every element is written
    decode.launch_tokens(decode.plan_for(q, v), q, k, v, g, beta, scale, qk_l2norm, num_tokens, state,
                         slots, o, checkpoints, (0, checkpoints.stride(0), checkpoints.stride(1)), write_padding=True)
    return o, checkpoints


# -- bench ----------------------------------------------------------------------------------------
BENCH_TOKENS = 4


def bytes_moved(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False) -> int:
    batch, tokens = q.shape[:2]
    slot_bytes = state[0].numel() * state.element_size()
    inputs = sum(x.numel() * x.element_size() for x in (q, k, v, g, beta, slots, num_tokens))
    return batch * slot_bytes * (1 + tokens) + inputs + v.numel() * 2


def make_verify_inputs(device, batch, tokens) -> dict:
    """The bench shape: B=64, H=16, HV=32, Dk=Dv=128, fp32 pool, every row drafting ``tokens`` tokens."""
    inputs = decode.serving_inputs(device, (batch, tokens), 16, 32, 128, 128, torch.float32)
    return {**inputs, "num_tokens": torch.full((batch,), tokens, dtype=torch.int32, device=device)}


def verify_then_commit(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    """What a speculative step costs: verify T tokens, then commit every row's last checkpoint."""
    _, checkpoints = gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    gdn_commit(state, slots, checkpoints, num_tokens)


def decode_each_token(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    """The same T tokens as T gdn_decode calls (what the state ends up as without speculation)."""
    for t in range(q.shape[1]):
        decode.gdn_decode(q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], state, slots, scale, qk_l2norm)


# -- catalog entry --------------------------------------------------------------------------------
def params_of(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    return {"B": q.shape[0], "T": q.shape[1], "H": q.shape[2], "group": v.shape[2] // max(q.shape[2], 1),
            "Dk": q.shape[3], "Dv": v.shape[3], "state_dtype": state.dtype, "qk_l2norm": qk_l2norm}


CELLS = decode.gdn_cells(T=Span(1, 8))

ENTRY = Entry.of_contract(
    contract,
    kernel=gdn_verify,
    parity=Parity.BAND,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    batch_invariant=True,
    batch_args=("q", "k", "v", "g", "beta", "slots", "num_tokens"),
    siblings=("gdn_decode", "gdn_commit"),
    properties=(contract.replay_equivalence,),
    limits=decode.kernel_limits,
    bench=(
        BenchCase(f"B=64 H=16 HV=32 Dk=Dv=128 fp32 state, T={BENCH_TOKENS}: verify; verify + commit; "
                  f"{BENCH_TOKENS} decode steps",
                  lambda device: make_verify_inputs(device, 64, BENCH_TOKENS),
                  bytes_moved, f"compare verify + commit with {BENCH_TOKENS} x gdn_decode (896 vs 1024 MiB moved)",
                  competitors={"verify + commit": verify_then_commit,
                               f"{BENCH_TOKENS} x gdn_decode": decode_each_token}),
    ),
)
