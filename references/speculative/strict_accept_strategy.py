"""Inputs for ``strict_accept``: recipes inside a cell's bounds, and the verification steps they build.

A recipe: ``{"B", "K", "layout", "rows", "vocab", "seed"}``.  ``rows`` picks how rows end:
- ``mixed``: each row is one of — every proposed draft accepted; rejected at a random proposed column
  (0 included); zero drafts (``num_drafts`` 0 or negative, down to INT32_MIN); more drafts than K (up
  to INT32_MAX, clamped) — with at least one zero-draft row beside at least one fully accepted row;
- ``all_accepted``: every row accepts all it proposed; ``all_rejected``: every row disagrees at its
  first proposed draft.
In every mode the draft entries at ``i >= n_b`` are planted equal to the target, so an implementation
that reads past a row's draft count accepts them.  ``vocab`` ``small`` draws tokens from 0..3 (chance
agreements everywhere), ``wide`` from the whole int64 range (negative ids, -1 and 2**63-1 included).
Token tensors take a legal row layout with garbage between rows; ``num_drafts`` is strided with them.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.strategies.layouts import LAYOUTS, row_view
from references.strategies.shapes import production_corners, seeds, sizes

ROW_MODES = ("mixed", "all_accepted", "all_rejected")
VOCABS = ("small", "wide")
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
# The interpreter costs about 3 ms per program and plans up to 32 rows per program: on the CPU keep
# B <= 256 (16 programs a call).  GPUs take the full cell.
CPU_MAX_BATCH = 256


def _batch_cap(device: torch.device) -> int | None:
    return CPU_MAX_BATCH if device.type == "cpu" else None


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)
    return st.fixed_dictionaries({
        "B": sizes(cell.bounds["B"], cap=_batch_cap(device)),
        "K": sizes(cell.bounds["K"]),
        "layout": st.sampled_from(LAYOUTS),
        "rows": st.sampled_from(ROW_MODES + ("mixed",) * 4),   # mixed steps are the ones that break kernels
        "vocab": st.sampled_from(VOCABS),
        "seed": seeds(),
    })


def corners(cell, device) -> list[dict]:
    """Both bounds of B (capped on the CPU) against K of 0, 1, 15 and 16, in every row mode; and the
    speculative depths of real deployments (3, 7: ``production_corners``) at the smallest B."""
    device = torch.device(device)
    batch_span, draft_span = cell.bounds["B"], cell.bounds["K"]
    cap = _batch_cap(device)
    widest = batch_span.hi if cap is None else max(batch_span.lo, min(batch_span.hi, cap))
    shapes = [(batch, drafts) for batch in dict.fromkeys((batch_span.lo, widest))
              for drafts in dict.fromkeys((draft_span.lo, 1, draft_span.hi - 1, draft_span.hi))
              if drafts in draft_span]
    fixed = [
        {"B": batch, "K": drafts, "layout": LAYOUTS[i % len(LAYOUTS)], "rows": ROW_MODES[i % len(ROW_MODES)],
         "vocab": VOCABS[i % len(VOCABS)], "seed": cell.seed("corner", i)}
        for i, (batch, drafts) in enumerate(shapes)
    ]
    fewest = [corner for corner in fixed if corner["B"] == batch_span.lo]
    return fixed + production_corners(fewest, cell, {"K": ("speculative_depth",)}, lambda recipe: recipe)


def _tokens(shape, vocab: str, generator, device) -> torch.Tensor:
    if vocab == "small":
        return torch.randint(0, 4, shape, generator=generator, device=device)
    tokens = torch.randint(-2**63, 2**63 - 1, shape, generator=generator, device=device)
    special = torch.tensor([-1, 0, 2**63 - 1, -2**63], device=device)
    planted = torch.randint(0, 8, shape, generator=generator, device=device)
    return torch.where(planted < special.numel(), special[planted.clamp(max=special.numel() - 1)], tokens)


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    batch, drafts = recipe["B"], recipe["K"]
    generator = torch.Generator(device=device).manual_seed(recipe["seed"])
    target = _tokens((batch, drafts + 1), recipe["vocab"], generator, device)
    column = torch.arange(drafts, device=device)

    # how many drafts each row proposes, and the column at which it is first rejected (None: never)
    kind = torch.randint(0, 4, (batch,), generator=generator, device=device)
    if recipe["rows"] == "all_accepted":
        kind.fill_(0)
    elif recipe["rows"] == "all_rejected":
        kind.fill_(1)
    elif batch >= 2:
        pinned = torch.randperm(batch, generator=generator, device=device)[:2]
        kind[pinned[0]], kind[pinned[1]] = 0, 2    # a fully accepted row beside a zero-draft row
    proposed = torch.randint(1, drafts + 1, (batch,), generator=generator, device=device) if drafts else \
        torch.zeros(batch, dtype=torch.int64, device=device)
    zero = torch.where(torch.rand(batch, generator=generator, device=device) < 0.5, 0,
                       torch.randint(INT32_MIN, 0, (batch,), generator=generator, device=device))
    over = torch.randint(drafts + 1, INT32_MAX, (batch,), generator=generator, device=device)
    num_drafts = torch.where(kind == 2, zero, torch.where(kind == 3, over, proposed))
    counted = num_drafts.clamp(0, drafts)
    reject_at = torch.where(kind == 1, 0, drafts + 1)
    if recipe["rows"] == "mixed":
        random_column = (torch.rand(batch, generator=generator, device=device) * counted).long()
        reject_at = torch.where(kind == 1, random_column, reject_at)

    draft = torch.where(column < counted[:, None], _tokens((batch, drafts), recipe["vocab"], generator, device),
                        target[:, :drafts])                   # beyond n_b: planted equal to the target
    agrees = column < reject_at[:, None]
    draft = torch.where(agrees & (column < counted[:, None]), target[:, :drafts], draft)
    at_rejection = column == reject_at[:, None]
    draft = torch.where(at_rejection, target[:, :drafts] ^ 1, draft)   # a certain disagreement

    draft_view = row_view(batch, drafts, torch.int64, recipe["layout"], device)
    target_view = row_view(batch, drafts + 1, torch.int64, recipe["layout"], device)
    draft_view.copy_(draft)
    target_view.copy_(target)
    stride = 2 if recipe["layout"] == "every_other_row" else 1
    counts = torch.full((batch * stride,), INT32_MIN, dtype=torch.int32, device=device)[::stride]
    counts.copy_(num_drafts)
    return {"draft_tokens": draft_view, "target_tokens": target_view, "num_drafts": counts}


def explain(inputs: dict, position: int, index: tuple, got, expected) -> str:
    """A differing row's deciding values (``oracles/findings.py``): its ``num_drafts`` and the ``n_b`` the
    contract clamps it to, and its first draft/target mismatch, within the counted drafts and beyond."""
    row = index[0]
    drafts = inputs["draft_tokens"].shape[1]
    asked = int(inputs["num_drafts"][row])
    counted = min(max(asked, 0), drafts)
    differs = (inputs["draft_tokens"][row] != inputs["target_tokens"][row, :drafts]).nonzero().flatten().tolist()
    inside = [i for i in differs if i < counted]
    return (f"row {row}: num_drafts {asked} (n_b = {counted} of K = {drafts}); first mismatch within the "
            f"counted drafts: {inside[0] if inside else 'none'}"
            + (f", first beyond them: {differs[len(inside)]}" if len(differs) > len(inside) else ""))
