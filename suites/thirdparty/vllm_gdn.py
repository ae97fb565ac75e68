"""vLLM's gated delta rule (``vllm/third_party/flash_linear_attention/ops/fused_recurrent.py``,
``fused_recurrent_gated_delta_rule``, vLLM 0.33.0's copy of flash-linear-attention, carried:
``suites/thirdparty/vendored.py``) as ``ssm/gdn_decode``, ``gdn_verify`` and ``gdn_commit``.

vLLM's copy differs from fla-core's (``suites/ssm/fla_adapter.py``) where serving needs it: a state pool
read and written in place through ``ssm_state_indices`` (index 0 is its NULL block: a row whose index is
``<= 0`` is skipped, its output left unwritten), and for speculative decoding a 2-D index ``[N, T]``
that stores the state after token t in slot ``indices[n, t]`` — the contract's checkpoints.  Its step,
per token in fp32: ``h *= exp(g); v' = beta * (v - sum(h * k)); h += v' k; o = sum(h * (q * scale))``
(``scale`` applied to q first), ``qk_l2norm`` as ``x / sqrt(sum(x^2) + 1e-6)``; the running state stays
fp32 between the tokens of a call, each stored checkpoint is rounded to the pool's dtype.  Its state
layout is ``[slots, HV, V, K]`` (V before K); the contract's is ``[slots, HV, Dk, Dv]``.

What the adapter does, none of it vLLM's:
- a pool in vLLM's layout with a NULL block at 0: ``state[slots[b]]`` transposed into slot ``1 + b``
  (decode) or into the first checkpoint slot of row b (verify); padding rows get index 0;
- verify: the index ``[B, T]`` of one checkpoint slot per (row, token), 0 past a row's ``num_tokens``;
- the live rows' slots written back to ``state``, transposed (decode); ``o = 0`` on padding rows and past
  a row's count, checkpoints transposed back and zero there (verify);
- ``gdn_commit``: a torch copy with the contract's refusals (``suites/thirdparty/gdn_slots.py``; vLLM reads
  the accepted checkpoint's slot at its next step instead of copying it).
"""
from __future__ import annotations

import torch

from references.ssm.gdn_decode import live_rows
from suites.thirdparty import staging
from suites.thirdparty.gdn_slots import gdn_commit, write_rows
from suites.thirdparty.vendored import load_module

PACKAGE = "vllm"
JUDGED = {"gdn_decode": "gdn_decode", "gdn_verify": "gdn_verify", "gdn_commit": "gdn_commit"}
ADAPTER_CODE = {
    "gdn_decode": "state[slots] gathered, transposed, into a pool with vLLM's NULL block at 0, and written back; "
                  "o = 0 on padding rows",
    "gdn_verify": "the initial state into each row's first checkpoint slot; checkpoint indices 0 past num_tokens; "
                  "checkpoints transposed back; zeros past num_tokens and on padding rows",
    "gdn_commit": "all of it: the contract's refusals and a torch copy (vLLM has no commit)",
}
__all__ = ["gdn_commit", "gdn_decode", "gdn_verify"]

fused_recurrent_gated_delta_rule = load_module(
    "vllm", "vllm/third_party/flash_linear_attention/ops/fused_recurrent.py").fused_recurrent_gated_delta_rule


def _vllm_layout(states: torch.Tensor) -> torch.Tensor:
    """``[..., HV, Dk, Dv]`` -> vLLM's ``[..., HV, V, K]``, contiguous."""
    return states.transpose(-1, -2).contiguous()


# -- gdn_decode, and the call both ops make -----------------------------------------------------------
def _prepare_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    batch = q.shape[0]
    live = live_rows(slots, state.shape[0])
    pool = _vllm_layout(torch.zeros(batch + 1, *state.shape[1:], dtype=state.dtype, device=state.device))
    pool[1:] = _vllm_layout(state[torch.where(live, slots, 0).long()])
    indices = torch.where(live, torch.arange(1, batch + 1, device=q.device), 0).to(torch.int32)
    return {"q": q[:, None], "k": k[:, None], "v": v[:, None], "g": g[:, None], "beta": beta[:, None],
            "scale": scale, "initial_state": pool, "ssm_state_indices": indices,
            "use_qk_l2norm_in_kernel": qk_l2norm,
            # the adapter's, for finish
            "state": state, "slots": slots, "live": live}


def _call(prepared):
    if prepared["q"].shape[0] == 0:
        return None
    o, _ = fused_recurrent_gated_delta_rule(
        prepared["q"], prepared["k"], prepared["v"], prepared["g"], prepared["beta"], prepared["scale"],
        prepared["initial_state"], inplace_final_state=True, ssm_state_indices=prepared["ssm_state_indices"],
        use_qk_l2norm_in_kernel=prepared["use_qk_l2norm_in_kernel"])
    return o


def _finish_decode(prepared, o):
    live, v = prepared["live"], prepared["v"]
    if o is None:
        return torch.zeros(v.shape[0], *v.shape[2:], dtype=torch.bfloat16, device=v.device)
    write_rows(prepared["state"], prepared["slots"], live, prepared["initial_state"][1:].transpose(-1, -2))
    return torch.where(live[:, None, None], o[:, 0], 0)


def gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    prepared = _prepare_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    return _finish_decode(prepared, _call(prepared))


gdn_decode.stages = staging.stages(_prepare_decode, _call, _finish_decode)


# -- gdn_verify ------------------------------------------------------------------------------------------
def _prepare_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    batch, tokens = q.shape[:2]
    live = live_rows(slots, state.shape[0])
    counts = torch.where(live, num_tokens.long().clamp(0, tokens), 0)
    drafted = torch.arange(tokens, device=q.device)[None, :] < counts[:, None]            # [B, T]
    pool = _vllm_layout(torch.zeros(1 + batch * tokens, *state.shape[1:], dtype=state.dtype, device=state.device))
    first = 1 + torch.arange(batch, device=q.device) * tokens
    pool[first] = _vllm_layout(state[torch.where(live, slots, 0).long()])
    indices = torch.where(drafted, first[:, None] + torch.arange(tokens, device=q.device)[None, :], 0)
    return {"q": q, "k": k, "v": v, "g": g, "beta": beta, "scale": scale, "initial_state": pool,
            "ssm_state_indices": indices.to(torch.int32).contiguous(), "use_qk_l2norm_in_kernel": qk_l2norm,
            # the adapter's, for finish
            "drafted": drafted, "state_shape": state.shape}


def _finish_verify(prepared, o):
    v, drafted = prepared["v"], prepared["drafted"]
    batch, tokens = drafted.shape
    shape = prepared["state_shape"]
    pool = prepared["initial_state"]
    if o is None:
        return (torch.zeros(v.shape, dtype=torch.bfloat16, device=v.device),
                torch.zeros(batch, tokens, *shape[1:], dtype=pool.dtype, device=pool.device))
    checkpoints = pool[1:].view(batch, tokens, *pool.shape[1:]).transpose(-1, -2)
    return (torch.where(drafted[..., None, None], o, 0),
            torch.where(drafted[..., None, None, None], checkpoints, 0).contiguous())


def gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    prepared = _prepare_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    return _finish_verify(prepared, _call(prepared))


gdn_verify.stages = staging.stages(_prepare_verify, _call, _finish_verify)
