"""fla-core's ``fused_recurrent_gated_delta_rule`` behind the gdn contract, for the battery to judge.

    tools/certify-cells --op gdn_decode --impl suites.ssm.fla_adapter:gdn_decode --device cpu

fla-core is a test-only extra (``pip install --no-deps fla-core``; it needs einops, and the torch and
Triton already here).  What its function does (``fla/ops/gated_delta_rule/fused_recurrent.py``, read
at fla-core 0.6.0), against our contract:
- q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g, beta ``[B, T, HV]``; v head i reads q/k head
  ``i // (HV // H)``: our GVA mapping.  ``g`` is the log decay (``use_gate_in_kernel=False``).
- ``initial_state [N, HV, K, V]``: our slot layout (``state_v_first=False``), but one state per row, not
  a pool: this function has no slot indices (fla's KDA kernel has ``ssm_state_indices``).  It is loaded
  as fp32 and kept in fp32 across the T tokens of a call; ``output_final_state=True`` writes the state
  after the last token, always fp32, to a new tensor.  Nothing is done in place.
- per token, in fp32: ``h *= exp(g); v' = beta * (v - sum(h * k)); h += k v'; o = sum(h * (q * scale))``
  — the contract's step, with ``scale`` applied to q before the product instead of after (a rounding
  difference, judged by the band).  ``use_qk_l2norm_in_kernel``: ``x / sqrt(sum(x^2) + 1e-6)``, as ours,
  with ``tl.sqrt`` and ``/`` (approximate on NVIDIA GPUs); ``exp`` is ``tl.exp`` (``ex2.approx``).
- o comes back in q's dtype (bf16).

What the adapter adds, none of it fla's (the glue a serving engine writes around it):
- the contract's refusals (``unchecked_gdn_decode`` leaves them out, to show what fla itself accepts);
- ``state[slots]`` gathered as ``initial_state`` (padding rows read slot 0, and are dropped);
- the final state written back to the live rows' slots in the pool's dtype, through a ``where`` over
  the pool, so there is no host sync and a CUDA graph can capture the call; o = 0 on padding rows;
- ``gdn_verify``: one fla call over all T tokens for o, and for ``checkpoints[:, t]`` one call over
  tokens ``0..t`` with ``output_final_state`` — the state fla holds after token t, rounded once to the
  pool's dtype; zero past a row's count.  That is fla's multi-token semantics: its running state stays
  fp32 between tokens, where the contract rounds it to the pool's dtype after every token;
- ``gdn_decode`` is split in stages: ``tools/bench`` times fla's own call apart from the gathering and the
  write-back above;
- ``gdn_commit``: a torch copy with the contract's refusals (fla has none; ``suites/thirdparty/gdn_slots.py``,
  shared with vLLM's adapter).
"""
from __future__ import annotations

import torch

import ops  # noqa: F401 - on a CPU, chooses the Triton interpreter before fla imports Triton
from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule  # noqa: E402 - after ops

from references.ssm import gdn_decode as decode_contract
from references.ssm import gdn_verify as verify_contract
from references.ssm.gdn_decode import live_rows
from suites.thirdparty import staging
from suites.thirdparty.gdn_slots import gdn_commit  # noqa: F401 - the op, all adapter code
from suites.thirdparty.gdn_slots import write_rows


def _initial_states(state, slots) -> tuple[torch.Tensor, torch.Tensor]:
    live = live_rows(slots, state.shape[0])
    return live, state[torch.where(live, slots, 0).long()].float()


def _fla(q, k, v, g, beta, scale, initial_state, qk_l2norm, final_state):
    return fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, scale=scale, initial_state=initial_state,
                                            output_final_state=final_state, use_qk_l2norm_in_kernel=qk_l2norm)


# -- gdn_decode, in stages (``suites/thirdparty/staging.py``): tools/bench times fla's call apart from the glue --
def _gathered_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False) -> dict:
    """fla's arguments for one token per row (the live rows' states gathered), and what finishing needs."""
    live, initial = _initial_states(state, slots) if q.shape[0] else (None, None)
    return {"fla": (q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None], scale, initial, qk_l2norm, True),
            "state": state, "slots": slots, "live": live, "v": v}


def _prepare_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False) -> dict:
    decode_contract.validate(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    return _gathered_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm)


def _call_decode(prepared):
    """fla's own call (its final state is a new tensor: the call can run again on the same arguments)."""
    return None if prepared["live"] is None else _fla(*prepared["fla"])


def _finish_decode(prepared, returned):
    v = prepared["v"]
    if returned is None:
        return torch.zeros(v.shape, dtype=torch.bfloat16, device=v.device)
    o, final = returned
    live = prepared["live"]
    write_rows(prepared["state"], prepared["slots"], live, final)
    return torch.where(live[:, None, None], o[:, 0], 0)


def unchecked_gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    """fla for one token per row, with no refusals of its own."""
    prepared = _gathered_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    return _finish_decode(prepared, _call_decode(prepared))


def gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    prepared = _prepare_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    return _finish_decode(prepared, _call_decode(prepared))


gdn_decode.stages = staging.stages(_prepare_decode, _call_decode, _finish_decode)


def gdn_verify(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm=False):
    verify_contract.validate(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm)
    batch, tokens = q.shape[:2]
    o = torch.zeros(v.shape, dtype=torch.bfloat16, device=v.device)
    checkpoints = torch.zeros(batch, tokens, *state.shape[1:], dtype=state.dtype, device=state.device)
    if batch == 0:
        return o, checkpoints
    live, initial = _initial_states(state, slots)
    counts = torch.where(live, num_tokens.clamp(0, tokens), 0)
    drafted = torch.arange(tokens, device=q.device)[None, :] < counts[:, None]
    o_all, _ = _fla(q, k, v, g, beta, scale, initial, qk_l2norm, False)
    o = torch.where(drafted[..., None, None], o_all, 0)
    for t in range(tokens):
        _, after = _fla(q[:, :t + 1], k[:, :t + 1], v[:, :t + 1], g[:, :t + 1], beta[:, :t + 1], scale, initial,
                        qk_l2norm, True)
        checkpoints[:, t] = torch.where(drafted[:, t, None, None, None], after.to(state.dtype), 0)
    return o, checkpoints
