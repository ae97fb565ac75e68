"""A verdict per oracle: no failing oracle hides another, each failure is shrunk on its own, a partial
run is never a certificate, and a result claims only the region its inputs reached."""
from __future__ import annotations

import pytest
import torch

from ops.sampling.greedy_argmax import ENTRY
from oracles.battery import CellResult, Implementation, run_cell
from oracles.selection import parse_oracles
from suites.sampling import greedy_argmax_impls as impls

pytestmark = pytest.mark.cpu
CPU = torch.device("cpu")


def refuses_nothing_and_ties_last(logits):
    """Two bugs: no refusal at all, and ties to the last index."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[1] == 0 or logits.stride(1) != 1 \
            or logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return torch.zeros(0, dtype=torch.int64)
    return impls.last_index_on_ties(logits)


def ties_last_and_scribbles(logits):
    """Two bugs on every example: ties to the last index, and the input zeroed after reading it."""
    answer = impls.last_index_on_ties(logits)
    logits.zero_()
    return answer


def _run(fn, cell="decode_small_batch", **options):
    options.setdefault("max_examples", 2)
    options.setdefault("strategy", ENTRY.strategy_module)
    return run_cell(ENTRY, Implementation(fn.__name__, {ENTRY.name: fn}), ENTRY.cell(cell), CPU, **options)


def test_a_refusal_failure_does_not_stop_the_numerics():
    result = _run(refuses_nothing_and_ties_last, shrink=False)
    assert result.status == "failed" and result.failing() == ["parity", "refusals"]
    assert result.verdicts["refusals"]["rows"] == len(ENTRY.refusals)
    assert result.summary() == f"numerics: parity FAIL; interface: refusals FAIL ({len(ENTRY.refusals)} rows)"
    assert result.verdicts["determinism"] == {"verdict": "pass", "examples": result.examples}
    assert result.verdicts["graph_parity"]["verdict"] == "not applicable"


def test_a_parity_failure_does_not_hide_a_write_guard_failure():
    result = _run(ties_last_and_scribbles, shrink=False)
    assert {"parity", "write_guards"} <= set(result.failing()), result.summary()
    assert result.failure.oracle == "parity"  # the headline: battery order
    record = CellResult.from_record(result.op, result.cell_id, result.record())
    assert record.failing() == result.failing() and record.verdicts == result.verdicts


def test_a_failing_corner_is_shrunk_to_a_smaller_recipe():
    """later_block_wins_ties fails the 4097-column corner; two blocks of 2048 are the least that show it."""
    result = _run(impls.later_block_wins_ties, max_examples=0)
    recipe = result.failures["parity"].recipe
    assert 2048 < recipe["V"] < 4097 and recipe["R"] == 1, recipe


def test_a_partial_run_passes_at_best_and_says_what_it_did_not_ask():
    result = _run(impls.missing_refusal, oracles=parse_oracles("numerics"), max_examples=1)
    assert result.status == "passed" and result.verdicts["refusals"]["verdict"] == "not asked"
    assert result.summary() == "numerics: pass; interface: not judged"
    assert parse_oracles("refusals,parity") == ("parity", "refusals")
    with pytest.raises(ValueError, match="no oracle or group 'parity_'"):
        parse_oracles("parity_")


def test_a_result_records_the_region_it_exercised_and_what_narrowed_it():
    """On the CPU, decode_large_batch's strategy keeps R * V under 2**18: V never passes 1024."""
    record = _run(impls.correct_via_max, cell="decode_large_batch", max_examples=1).record()
    assert record["status"] == "certified"
    assert 256 <= record["exercised"]["R"][0] and record["exercised"]["R"][1] <= 1024
    assert record["exercised"]["V"][1] <= 1024 and record["narrowed_by"] == "cpu interpreter size cap"
    assert record["declared"]["V"] == [1, 262144] and "bfloat16" in record["exercised"]["dtype"]
