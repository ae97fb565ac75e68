"""gdn_verify: every cell through the battery (replay equivalence with gdn_decode + gdn_commit included),
and the battery against wrong verifies."""
from __future__ import annotations

import functools

import pytest
import torch

from oracles.band import check_band
from oracles.determinism import run_on_copy
from oracles.failures import OracleFailure
from oracles.tensors import as_outputs, clone_inputs
from ops.catalog import op
from ops.ssm.gdn_verify import ENTRY
from references.ssm.gdn_verify import replay_equivalence
from references.ssm import gdn_verify_strategy as strategy
from suites.certification import arch_marks, assert_rejected, certify_cell, machine_device
from suites.op_suite import OpSuite
from suites.ssm.gdn_impls import judged

pytestmark = arch_marks(ENTRY.archs)


WRONG = [
    ("verify_writes_the_pool", "fp32_state", "write_guards"),
    ("garbage_past_count", "fp32_state", "parity"),
    ("num_tokens_read_as_dense", "fp32_state", "parity"),
]
SUITE = OpSuite(ENTRY, functools.partial(judged, op="gdn_verify"), wrong=WRONG, correct="gdn_verify")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test(max_examples=4)
test_battery_accepts_another_correct_implementation = SUITE.accepts_test(max_examples=1)


def test_battery_rejects_an_fp32_running_state():
    """Rejected through parity or replay, whichever sees it first: against a truth that rounds the state
    between tokens (as the contract does), the fp32 running state drifts out of the band on about half
    of the 3- and 4-token drafts tried (2 ulp against a 1-ulp band) and stays inside on most 2-token
    ones (the next test); replay equivalence catches it on every draft where a row commits 2 tokens."""
    impl = judged("fp32_running_state", op="gdn_verify")
    result = certify_cell(ENTRY, ENTRY.cell("bf16_state"), impl, max_examples=4, shrink=False)
    assert_rejected(result, ("parity", "stateful"), impl.label)


def _typical_bf16_draft(tokens: int, seed: int = 0) -> dict:
    recipe = {"B": 2, "H": 1, "group": 1, "Dk": 64, "Dv": 64, "free_slots": 1, "state_dtype": "bfloat16",
              "qk_l2norm": False, "scale": "inv_sqrt_dk", "layout": "contiguous", "values": "typical",
              "padding": "none", "slots": "shuffled", "T": tokens, "tokens": "full", "seed": seed}
    return strategy.build(recipe, machine_device())


def test_an_fp32_running_state_is_caught_by_replay_not_by_the_band():
    """Keeping the running state in fp32 across drafted tokens (the pool is bf16) stays inside the band
    on this 2-token draft, while decode, which rounds between tokens, parts from it at token 1."""
    kwargs = _typical_bf16_draft(tokens=2)
    impl = judged("fp32_running_state", op="gdn_verify")
    check_band(run_on_copy(impl["gdn_verify"], kwargs, ()), run_on_copy(ENTRY.stock, kwargs, ()),
               as_outputs(ENTRY.truth(**clone_inputs(kwargs))), "a verify with an fp32 running state")
    with pytest.raises(OracleFailure, match=r"\[stateful\].*token 1"):
        replay_equivalence(impl, kwargs)


def test_replay_holds_for_the_kernels_on_every_prefix():
    """Our three kernels on a 4-token bf16 draft: every checkpoint is the pool after that many decodes."""
    kwargs = _typical_bf16_draft(tokens=4)
    replay_equivalence({name: op(name).kernel for name in ("gdn_decode", "gdn_verify", "gdn_commit")}, kwargs)


def test_token_counts_outside_the_contract_are_clamped():
    """num_tokens 0 gives a row of zeros, T + 3 runs all T tokens (no device value is checked)."""
    kwargs = _typical_bf16_draft(tokens=2)
    kwargs["num_tokens"] = torch.tensor([0, 5], dtype=torch.int32, device=machine_device())
    o, checkpoints = ENTRY.kernel(**clone_inputs(kwargs))
    expected_o, expected_checkpoints = ENTRY.reference(**clone_inputs(kwargs))
    assert not o[0].any() and not checkpoints[0].any() and checkpoints[1].all()
    check_band((o, checkpoints), ENTRY.stock(**clone_inputs(kwargs)), as_outputs(ENTRY.truth(**clone_inputs(kwargs))),
               "gdn_verify with token counts 0 and T + 3")
    assert torch.equal(expected_checkpoints[0], checkpoints[0])
