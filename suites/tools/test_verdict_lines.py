"""Verdict lines say what was judged (issue 25.5): a run the CPU's size budget narrowed says so in its
verdict, never a bare PASSED for the whole cell."""
from __future__ import annotations

import sys

import pytest
import torch

from oracles.battery import Implementation
from ops.catalog import op
from suites.certification import certify_cell, judged
from tools.engine.certify import describe

pytestmark = pytest.mark.cpu
ENTRY = op("greedy_argmax")


def wrong_above_the_cpu_budget(logits):
    """Right wherever the CPU draws (R·V <= 2**18), the contract's refusals included; the last index of each
    row above it."""
    ENTRY.validate(logits)
    if logits.shape[0] * logits.shape[1] > 2**18:
        return torch.full((logits.shape[0],), logits.shape[1] - 1, dtype=torch.int64)
    return torch.argmax(logits, dim=-1)


def _line(cell_id: str, device: str = "cpu") -> str:
    impl = judged(ENTRY, sys.modules[__name__], "wrong_above_the_cpu_budget")
    result = certify_cell(ENTRY, ENTRY.cell(cell_id), impl, max_examples=1)
    assert result.status == "certified", describe(result, "cpu", impl.label)
    return describe(result, device, impl.label).splitlines()[0]


def test_a_pass_on_the_cpus_narrowed_region_names_the_narrowing():
    line = _line("decode_small_batch")
    assert "CERTIFIED on R·V <= 2^18 only: CPU interpreter cap; not judged above after" in line, line


def test_a_cell_the_budget_holds_whole_gets_a_bare_verdict():
    """The control: empty_batch (R = 0) fits the budget, so its verdict claims the whole cell."""
    line = _line("empty_batch")
    assert " after " in line and " only" not in line, line


# -- the other ops the CPU's budget narrows: an implementation wrong only above it passes there, and its
# verdict names the region judged (the budget's words where they are a product of dimensions) ----------
PAGED, ACCEPT, DECODE, COMMIT, SAVE = (op(name) for name in
                                       ("paged_decode", "strict_accept", "gdn_decode", "gdn_commit", "rollback_save"))


def paged_wrong_above_two_kv_heads(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale=1.0,
                                   page_select=None):
    out, lse = PAGED.reference(q, k_cache, v_cache, page_table, seq_lens, sm_scale, kv_scale, page_select)
    return (torch.full_like(out, float("nan")), lse) if k_cache.shape[2] > 2 else (out, lse)


def accept_wrong_above_256_rows(draft_tokens, target_tokens, num_drafts):
    tokens, accepted = ACCEPT.reference(draft_tokens, target_tokens, num_drafts)
    return (tokens, torch.zeros_like(accepted)) if draft_tokens.shape[0] > 256 else (tokens, accepted)


def decode_wrong_above_four_head_rows(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    o = DECODE.reference(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    return torch.full_like(o, float("nan")) if q.shape[0] * v.shape[1] > 4 else o


def commit_wrong_above_32_head_rows(state, slots, checkpoints, num_accepted):
    """Commits nothing where B·HV > 32."""
    COMMIT.validate(state, slots, checkpoints, num_accepted)
    if checkpoints.shape[0] * state.shape[1] <= 32:
        COMMIT.reference(state, slots, checkpoints, num_accepted)


def save_wrong_above_the_cpus_plane(plane, page_table, positions):
    saved = SAVE.reference(plane, page_table, positions)
    return torch.zeros_like(saved) if plane.numel() * plane.element_size() > 2**17 else saved


@pytest.mark.parametrize("name, entry, cell_id, region", [
    pytest.param("paged_wrong_above_two_kv_heads", PAGED, "dense_bf16_kv", "Hkv 1..2 of 1..16", id="paged_decode"),
    pytest.param("accept_wrong_above_256_rows", ACCEPT, "large_batch", "B 65..256 of 65..4096", id="strict_accept"),
    pytest.param("decode_wrong_above_four_head_rows", DECODE, "fp32_state", "B·H·group <= 4", id="gdn_decode"),
    pytest.param("commit_wrong_above_32_head_rows", COMMIT, "bf16_state", "B·HV <= 32", id="gdn_commit"),
    pytest.param("save_wrong_above_the_cpus_plane", SAVE, "row_slots", "plane bytes <= 2^17", id="rollback_save"),
])
def test_a_pass_below_the_cpus_budget_names_what_it_judged(name, entry, cell_id, region):
    """On the corners alone, parity alone asked (a partial run, PASSED at best: a pass and its wording are
    what is tested; the recurrences' and attention's other oracles cost seconds per input here), beside
    the contract's references of the op's siblings."""
    siblings = {sibling: op(sibling).reference for sibling in entry.siblings}
    impl = Implementation(f"{__name__}:{name}", {**siblings, entry.name: globals()[name]})
    result = certify_cell(entry, entry.cell(cell_id), impl, max_examples=0, oracles=("parity",))
    assert result.status == "passed", describe(result, "cpu", impl.label)
    line = describe(result, "cpu", impl.label).splitlines()[0]
    judged_words, _, rest = line.partition(" only: ")
    assert judged_words.startswith(f"{entry.name}/{cell_id}: PASSED on ") and region in judged_words, line
    assert "not judged above" in rest, line


def test_a_written_section_says_what_dispatch_will_not_route():
    """The line naming a written section says when the policy does not count it (a depth under it, or cells
    judged on fewer examples than it asks, the rest refused clearly), where the run's cells all said
    CERTIFIED: 2026-12-07e's nvfp4_gemv section, 163 judged of 232 drawn, read as routable."""
    import copy
    import json

    from ops import certificates
    from ops.catalog import Arch
    from tools.engine.certify import below_policy

    least = certificates.POLICY.examples_on(Arch.SM90)
    section = json.loads(certificates.certificate_path(ENTRY).read_text())["archs"]["sm90"]
    assert section["max_examples"] >= least and below_policy(ENTRY, Arch.SM90, section) == ""
    short = copy.deepcopy(section)
    cell_id = next(iter(short["cells"]))
    short["cells"][cell_id].update(examples=least - 1, refused_examples=1)
    assert below_policy(ENTRY, Arch.SM90, short) == (
        f"; below the policy, dispatch does not route {cell_id} (certified on {least - 1} examples, the policy "
        f"asks {least} on sm90): draw more (--max-examples)")
    shallow = {**section, "max_examples": least - 1}
    assert below_policy(ENTRY, Arch.SM90, shallow) == (
        f"; below the policy (drew {least - 1} examples per cell, the policy asks {least} on sm90): dispatch routes "
        "none of it")
