"""Speculative steps on a paged plane, for ``rollback_save`` and ``rollback_restore`` (their strategy
modules take the arguments each op needs from one step).

A recipe: ``{"B", "T", "M", "S", "E", "dtype", "plane_layout", "saved_layout", "table_layout", "mask_layout",
"mask", "seed"}`` — sizes inside the cell (edges favoured; the plane kept inside a per-device byte budget),
layouts, and a mask mode.  Shapes never depend on the seed; everything else is drawn from it on the
device:

- positions, per row: a run of T consecutive positions from a random start (crossing page boundaries,
  possibly past the table); a shorter run padded with -1 (fewer drafts than T); no drafts at all (every
  entry -1); a tree of T distinct positions scattered over a window of T + S.  Two rows are runs inside
  the table (as far as it reaches) on allocated pages, so a step with a table has two live entries or
  more whenever B * T >= 2.  Other
  rows get planted -1, INT32_MIN, -S, ``M*S`` (the first position past the table), ``M*S + r`` and
  INT32_MAX entries.
- the page table: the pages the live positions touch are distinct (live entries never share a slot),
  the rest random (never dereferenced); a quarter of the entries outside the two pinned rows are holes
  (-1), and a few hold other negative ids.  P = B * min(M, T) + 2 pages, so some are never touched.
- the plane and ``saved``: random bits (NaN payloads, -0.0, every e4m3 code), in legal N-D layouts whose
  garbage the op must not read or write.
- ``rejected`` (``mask``): ``mixed`` — random, with at least one rejected and one kept live entry;
  ``suffix`` — each row rejects a suffix of its entries (how verification rejects), with the same
  guarantee; ``all_rejected`` and ``all_kept``.  Dead entries are rejected at random (all in
  ``all_rejected``), so an op that ignores liveness writes through a -1 position or a -1 page.
- row layouts (``references/strategies/layouts.LAYOUTS``): the table and positions in ``table_layout``, the
  mask in ``mask_layout`` (a kernel reading the mask with the positions' strides reads other entries).
"""
from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from references.attention.paged_slots import bits, live_slots
from references.bounds import Span
from references.strategies.layouts import LAYOUTS, ND_LAYOUTS, nd_view, rows_in_layout
from references.strategies.shapes import budget_cap, largest, production_corners, seeds, sizes
from references.strategies.values import random_bits

MASKS = ("mixed", "suffix", "all_rejected", "all_kept")
SPARE_PAGES = 2
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
MAX_HEADS = 16
# Per device: the plane's bytes (the battery copies it a few dozen times per example), and on the CPU,
# where the interpreter costs about 3 ms per program, small batches and tables too.
PLANE_BYTES = {"cpu": 2**17, "cuda": 2**26}
CPU_CAPS = {"B": 8, "M": 24}
# CONTRACTS.md, "Production shapes are corners": pages of a KV cache's sizes, a speculative step's depths
# as its positions per row, a head's dim as a plane's last trailing dim (a KV plane [P, S, Hkv, D])
PRODUCTION_DIMS = {"S": ("page_size",), "T": ("speculative_depth",), "E": ("head_dim",)}
PRODUCTION_HEADS = 8   # the KV heads in front of a head dim, where the cell's E has two dims


def pages_for(batch: int, pages_per_row: int, steps: int) -> int:
    """Physical pages of a step's plane: one per logical page its live entries can touch, and spares."""
    return batch * min(pages_per_row, steps) + SPARE_PAGES


def cpu_cap(cell) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it): the plane's bytes (B and M,
    capped on their own, show in the exercised region)."""
    bounds = cell.bounds
    most = pages_for(largest(bounds["B"]), largest(bounds["M"]), largest(bounds["T"])) * largest(bounds["S"]) * \
        largest(bounds["E"]) * max(dtype.itemsize for dtype in bounds["dtype"].choices)
    return budget_cap("plane bytes", most, PLANE_BYTES["cpu"])


def _cap(device: torch.device, name: str) -> int | None:
    return CPU_CAPS.get(name) if device.type == "cpu" else None


def _dtype_names(cell) -> list[str]:
    return [str(dtype).removeprefix("torch.") for dtype in cell.bounds["dtype"].choices]


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)
    budget = PLANE_BYTES[device.type]

    @st.composite
    def draw_recipe(draw):
        batch = draw(sizes(cell.bounds["B"], cap=_cap(device, "B")))
        steps = draw(sizes(cell.bounds["T"]))
        pages_per_row = draw(sizes(cell.bounds["M"], cap=_cap(device, "M")))
        dtype = draw(st.sampled_from(_dtype_names(cell)))
        pages = pages_for(batch, pages_per_row, steps)
        itemsize = getattr(torch, dtype).itemsize
        slots = draw(sizes(cell.bounds["S"], cap=budget // (pages * itemsize)))
        elements_cap = max(1, budget // (pages * slots * itemsize))
        trailing_dims = draw(st.sampled_from(cell.bounds["E_dims"].choices))
        element_span = cell.bounds["E"]
        if trailing_dims == 1:
            trailing = [draw(sizes(element_span, cap=elements_cap))]
        else:
            heads = draw(st.integers(1, MAX_HEADS))
            head_span = Span(min(element_span.lo, element_span.hi // heads), element_span.hi // heads)
            trailing = [heads, draw(sizes(head_span, cap=max(1, elements_cap // heads)))]
        return {"B": batch, "T": steps, "M": pages_per_row, "S": slots, "E": trailing, "dtype": dtype,
                "plane_layout": draw(st.sampled_from(ND_LAYOUTS)), "saved_layout": draw(st.sampled_from(ND_LAYOUTS)),
                "table_layout": draw(st.sampled_from(LAYOUTS)), "mask_layout": draw(st.sampled_from(LAYOUTS)),
                "mask": draw(st.sampled_from(MASKS + ("mixed", "suffix") * 2)),   # both kinds of live entry
                "seed": draw(seeds())}

    return draw_recipe()


def corners(cell, device) -> list[dict]:
    """Fixed steps: the bounds of B and T, no table (M = 0), one-slot pages, the widest slots, each mask;
    then the production sizes the cell holds (``production_corners``, a page size, a depth and a head dim
    together on each: a step costs seconds on the CPU): page sizes as S, speculative depths as T, head dims
    as the last trailing dim (behind 8 heads where E has two dims), on the first fixed step with entries
    and a table whose plane the device's budget takes with them."""
    device = torch.device(device)
    budget = PLANE_BYTES[device.type]
    spans = {name: cell.bounds[name] for name in ("B", "T", "M", "S", "E")}
    caps = {name: _cap(device, name) for name in spans}
    lo = {name: span.lo for name, span in spans.items()}
    hi = {name: span.hi if caps[name] is None else max(span.lo, min(span.hi, caps[name]))
          for name, span in spans.items()}
    dtypes = _dtype_names(cell)
    shapes = [
        # (B, T, M, S, mask)
        (hi["B"], hi["T"], hi["M"], 16, "mixed"),
        (hi["B"], hi["T"], 2, 1, "all_rejected"),        # one-slot pages: every entry its own page
        (lo["B"], hi["T"], 1, hi["S"], "suffix"),
        (hi["B"], lo["T"], hi["M"], 64, "all_rejected"),  # no entries
        (hi["B"], hi["T"], lo["M"], 16, "all_rejected"),  # no table: nothing is live
        (hi["B"], 1, 3, 64, "all_kept"),
    ]
    recipes = []
    for i, (batch, steps, pages_per_row, slots, mask) in enumerate(shapes):
        dtype = dtypes[i % len(dtypes)]
        itemsize = getattr(torch, dtype).itemsize
        pages = pages_for(batch, pages_per_row, steps)
        slots = max(spans["S"].lo, min(slots, spans["S"].hi, budget // (pages * itemsize)))
        elements = max(lo["E"], min(hi["E"], budget // (pages * slots * itemsize)))
        trailing_dims = cell.bounds["E_dims"].choices[i % len(cell.bounds["E_dims"].choices)]
        trailing = [elements] if trailing_dims == 1 else [min(8, elements), max(1, elements // 8)]
        recipes.append({"B": batch, "T": steps, "M": pages_per_row, "S": slots, "E": trailing, "dtype": dtype,
                        "plane_layout": ND_LAYOUTS[i % len(ND_LAYOUTS)],
                        "saved_layout": ND_LAYOUTS[(i + 1) % len(ND_LAYOUTS)],
                        "table_layout": LAYOUTS[i % len(LAYOUTS)], "mask_layout": LAYOUTS[(i + 2) % len(LAYOUTS)],
                        "mask": mask, "seed": cell.seed("corner", i)})

    def fit(recipe: dict) -> dict | None:
        if not isinstance(recipe["E"], list):   # a head dim: the last of the cell's trailing dims
            head_dim, trailing_dims = recipe["E"], max(cell.bounds["E_dims"].choices)
            heads = min(PRODUCTION_HEADS, spans["E"].hi // head_dim)
            recipe = {**recipe, "E": [head_dim] if trailing_dims == 1 else [heads, head_dim]}
        elements = math.prod(recipe["E"])
        plane = pages_for(recipe["B"], recipe["M"], recipe["T"]) * recipe["S"] * elements
        fits = elements in spans["E"] and plane * getattr(torch, recipe["dtype"]).itemsize <= budget
        return recipe if fits else None

    live = [recipe for recipe in recipes if recipe["T"] and recipe["M"]]   # steps with entries and a table
    return recipes + production_corners(live, cell, PRODUCTION_DIMS, fit, size_of=production_size, together=True)


def production_size(recipe: dict, name: str) -> int:
    """The size a recipe gives a dimension of :data:`PRODUCTION_DIMS` (E: its last trailing dim)."""
    return recipe["E"][-1] if name == "E" else recipe[name]


# -- building a step --------------------------------------------------------------------------------
def _positions(batch, steps, pages_per_row, slots, generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions int64[B, T], pinned bool[B])``; the live positions of a row are distinct."""
    table_end = pages_per_row * slots
    step = torch.arange(steps, device=device)
    kind = torch.randint(0, 4, (batch,), generator=generator, device=device)
    pinned = torch.zeros(batch, dtype=torch.bool, device=device)
    pinned[torch.randperm(batch, generator=generator, device=device)[:2]] = True
    start = torch.randint(0, table_end + slots, (batch,), generator=generator, device=device)
    inside = torch.randint(0, max(table_end - steps, 0) + 1, (batch,), generator=generator, device=device)
    start = torch.where(pinned, inside, start)
    run = start[:, None] + step
    drafted = torch.randint(0, steps + 1, (batch, 1), generator=generator, device=device)
    padded_run = torch.where(step < drafted, run, -1)
    window = torch.rand(batch, steps + slots, generator=generator, device=device).argsort(dim=1)[:, :steps]
    unused = torch.rand(batch, steps, generator=generator, device=device) < 0.2
    tree = torch.where(unused, -1, start[:, None] + window)
    kind = torch.where(pinned, 0, kind)
    every_kind = torch.stack([run, padded_run, torch.full_like(run, -1), tree])
    positions = every_kind[kind, torch.arange(batch, device=device)]
    # plant dead entries outside the pinned rows: negative ones, the first position past the table, and
    # (the extra pick) one a few pages past it
    dead = torch.tensor([-1, -1, INT32_MIN, -slots, table_end, table_end, INT32_MAX], device=device)
    planted = (torch.rand(batch, steps, generator=generator, device=device) < 0.15) & ~pinned[:, None]
    pick = torch.randint(0, dead.numel() + 1, (batch, steps), generator=generator, device=device)
    beyond = table_end + torch.randint(0, 4 * slots, (batch, steps), generator=generator, device=device)
    dead_value = torch.where(pick == dead.numel(), beyond, dead[pick.clamp(max=dead.numel() - 1)])
    return torch.where(planted, dead_value, positions), pinned


def _page_table(positions, pinned, pages_per_row, slots, pages, generator, device) -> torch.Tensor:
    batch = positions.shape[0]
    table = torch.randint(0, pages, (batch, pages_per_row), generator=generator, device=device)
    if pages_per_row == 0:
        return table
    logical = torch.div(positions, slots, rounding_mode="floor")
    touched = (positions >= 0) & (logical < pages_per_row)
    row = torch.arange(batch, device=device)[:, None].expand_as(positions)
    keys = (row * pages_per_row + logical)[touched].unique()
    table.view(-1)[keys] = torch.randperm(pages, generator=generator, device=device)[:keys.numel()]
    holes = (torch.rand(batch, pages_per_row, generator=generator, device=device) < 0.25) & ~pinned[:, None]
    other_negative = torch.rand(batch, pages_per_row, generator=generator, device=device) < 0.1
    table = torch.where(holes, torch.where(other_negative, torch.tensor(INT32_MIN, device=device),
                                           torch.tensor(-1, device=device)), table)
    return table


def _rejected(mode, live, generator, device) -> torch.Tensor:
    batch, steps = live.shape
    if mode == "all_rejected":
        return torch.ones(batch, steps, dtype=torch.bool, device=device)
    if mode == "all_kept":
        return torch.zeros(batch, steps, dtype=torch.bool, device=device)
    rejected = torch.rand(batch, steps, generator=generator, device=device) < 0.5
    if mode == "suffix":
        accepted = torch.randint(0, steps + 1, (batch, 1), generator=generator, device=device)
        rejected = torch.where(live, torch.arange(steps, device=device) >= accepted, rejected)
    live_entries = live.view(-1).nonzero()[:, 0]
    if live_entries.numel() >= 2:   # the first live entry kept, the last rejected: both kinds, always
        rejected.view(-1)[live_entries[0]] = False
        rejected.view(-1)[live_entries[-1]] = True
    return rejected


def _in_layout(values: torch.Tensor, layout: str) -> torch.Tensor:
    view = nd_view(tuple(values.shape), values.dtype, layout, values.device)
    bits(view).copy_(bits(values))
    return view


def build_step(recipe: dict, device) -> dict:
    """All five arguments of a save -> step -> restore: plane, page_table, positions, saved, rejected."""
    device = torch.device(device)
    batch, steps, pages_per_row, slots = recipe["B"], recipe["T"], recipe["M"], recipe["S"]
    dtype = getattr(torch, recipe["dtype"])
    generator = torch.Generator(device=device).manual_seed(recipe["seed"])
    pages = pages_for(batch, pages_per_row, steps)
    positions, pinned = _positions(batch, steps, pages_per_row, slots, generator, device)
    page_table = _page_table(positions, pinned, pages_per_row, slots, pages, generator, device)
    live, _, _ = live_slots(page_table, positions, slots)
    plane = random_bits((pages, slots, *recipe["E"]), dtype, generator, device)
    saved = random_bits((batch, steps, *recipe["E"]), dtype, generator, device)
    return {
        "plane": _in_layout(plane, recipe["plane_layout"]),
        "page_table": rows_in_layout(page_table.to(torch.int32), recipe["table_layout"]),
        "positions": rows_in_layout(positions.to(torch.int32), recipe["table_layout"]),
        "saved": _in_layout(saved, recipe["saved_layout"]),
        # the mask in a row layout of its own (the table's where a recipe predates it): a kernel that reads it
        # with the positions' strides reads other entries
        "rejected": rows_in_layout(_rejected(recipe["mask"], live, generator, device),
                                   recipe.get("mask_layout", recipe["table_layout"])),
    }
