"""fla-core's fused_recurrent_gated_delta_rule judged against the gdn contract (a test-only extra: skipped
where fla-core is not installed).  The whole judgement is ``docs/thirdparty/fla_report.md``, made by
``tools/certify-cells``; these pin its two findings about state semantics on small inputs."""
from __future__ import annotations

import pytest

from oracles.band import check_band
from oracles.determinism import run_on_copy
from oracles.failures import OracleFailure
from oracles.tensors import as_outputs, clone_inputs
from ops.catalog import ALL_ARCHS, op
from references.ssm.gdn_verify import replay_equivalence
from suites.certification import arch_marks, machine_device
from references.ssm import gdn_verify_strategy as strategy

pytestmark = arch_marks(ALL_ARCHS)
fla_adapter = pytest.importorskip("suites.ssm.fla_adapter", reason="fla-core is not installed (a test-only extra)")
FLA = {name: getattr(fla_adapter, name) for name in ("gdn_decode", "gdn_verify", "gdn_commit")}


def _draft(state_dtype: str) -> dict:
    recipe = {"B": 1, "H": 1, "group": 2, "Dk": 64, "Dv": 64, "free_slots": 1, "state_dtype": state_dtype,
              "qk_l2norm": True, "scale": "inv_sqrt_dk", "layout": "contiguous", "values": "typical",
              "padding": "none", "slots": "shuffled", "T": 2, "tokens": "full", "seed": 0}
    return strategy.build(recipe, machine_device())


@pytest.mark.parametrize("state_dtype", ["float32", "bfloat16"])
def test_fla_decode_is_inside_the_band(state_dtype):
    entry = op("gdn_decode")
    draft = _draft(state_dtype)
    kwargs = {name: value[:, 0] if name in ("q", "k", "v", "g", "beta") else value
              for name, value in draft.items() if name != "num_tokens"}
    check_band(run_on_copy(FLA["gdn_decode"], kwargs, entry.in_place), run_on_copy(entry.stock, kwargs, entry.in_place),
               as_outputs(entry.truth(**clone_inputs(kwargs))), "fla-core's decode")


def test_fla_verify_replays_decode_bit_for_bit_on_an_fp32_pool():
    replay_equivalence(FLA, _draft("float32"))


def test_fla_verify_keeps_an_fp32_running_state_so_a_bf16_pool_does_not_replay():
    """fla keeps the state in fp32 across the tokens of a call; the contract (and decode, call by call)
    rounds it to the pool's bf16 after every token."""
    with pytest.raises(OracleFailure, match=r"\[stateful\].*token 1"):
        replay_equivalence(FLA, _draft("bfloat16"))


@pytest.mark.skipif(machine_device().type != "cpu", reason="pins the CPU interpreter's finding (the GPU compiles fla)")
def test_replay_detail_separates_signed_zeros_from_value_differences():
    """The CPU finding's minimal recipe parts only in the sign of zero; ``typical`` values in real values."""
    from suites.ssm.fla_replay_detail import replay_detail
    signed_zeros = {"B": 1, "Dk": 64, "Dv": 64, "H": 1, "free_slots": 1, "group": 4, "layout": "contiguous",
                    "padding": "none", "qk_l2norm": True, "scale": "one", "seed": 8625791135861784643,
                    "slots": "shuffled", "state_dtype": "bfloat16", "values": "edges"}
    assert replay_detail(signed_zeros, machine_device())[1].startswith(
        "token 1: 1193 of 16384 state values differ; 1193 only in the sign of zero; the other 0")
    typical = {**signed_zeros, "values": "typical", "seed": 0}
    token_1 = replay_detail(typical, machine_device())[1]
    assert "the other 0 at most" not in token_1, token_1


def test_decode_in_stages_answers_as_the_whole_call():
    """``gdn_decode.stages`` (tools/bench times fla's call apart from the adapter's glue) gives the whole call's o
    and state; fla's call alone, run again on the same prepared arguments, leaves the pool as it was."""
    import torch

    draft = _draft("float32")
    kwargs = {name: value[:, 0] if name in ("q", "k", "v", "g", "beta") else value
              for name, value in draft.items() if name != "num_tokens"}
    whole_inputs, staged_inputs = clone_inputs(kwargs), clone_inputs(kwargs)
    whole = FLA["gdn_decode"](**whole_inputs)
    call, glue = FLA["gdn_decode"].stages(**staged_inputs)
    assert torch.equal(staged_inputs["state"], kwargs["state"])   # prepared and called: nothing written yet
    call()
    assert torch.equal(staged_inputs["state"], kwargs["state"])
    staged = glue()
    assert torch.equal(staged, whole) and torch.equal(staged_inputs["state"], whole_inputs["state"])
    assert not torch.equal(whole_inputs["state"], kwargs["state"])   # the control: the whole call writes the pool
