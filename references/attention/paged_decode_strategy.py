"""Inputs for ``paged_decode``: recipes inside a cell's bounds, and the paged caches they build.

A recipe: ``{"B", "M", "S", "Hkv", "group", "D", "T", "kv_dtype", "lengths", "holes", "values",
"layout", "sm_scale", "kv_scale", "seed"}``.  Shapes come from the recipe alone; the seed draws every
value *and all the metadata* — which rows are long or empty, where the holes are, which pages are
selected — so graph parity copies new page tables, lengths and selections into the captured buffers.

What ``build`` plants:

- a pool of ``B * M + SPARE_PAGES`` physical pages; each (row, logical page) owns one, in shuffled order;
- lengths (``LENGTHS``): ``mixed`` puts a row of nearly the whole table (the last page ragged) beside
  empty rows, ``ragged`` ends every row inside a page, ``edges`` sits on page and split boundaries,
  ``uniform`` and ``full`` as named;
- ``holes``: ``-1`` pages inside ``seq_len`` (at least one per row with an interior page; never the
  row's last page), and ``-1`` or stale pages past it;
- sparse selections: valid pages, a duplicate of an attended page in every row, ``-1`` padding and
  out-of-range entries (``M``, ``M + 3``, ``-5``, ``2**31 - 1``), shuffled;
- NaN in every cache slot that no row attends: past ``seq_len`` in the last page, the pages that holes
  dropped, unselected and stale pages, spare pages.  A slot another row attends holds that row's data;
- values (``VALUES``): ``normal``, or ``large_scores`` (scores of 100..300: an ``exp`` without max
  subtraction overflows fp32) with tied key magnitudes; a row whose lse would be dwarfed by its scores'
  terms gets its query redrawn (``clear_of_cancellation``: never a large-score row, whose terms agree);
- layouts (``ND_LAYOUTS``): plain tensors; caches and q interleaved with garbage halves (the K half
  of a fused ``[P, 2, S, Hkv, D]`` buffer); with a last-dim stride of 2; or caches and q with a padded last
  dim (rows not 16-byte aligned), beside a page table ``[:, :M]`` of a wider one with real page ids in its padding and
  ``seq_lens[::2]``.  The V cache's layout (``v_layout``) is drawn apart from K's: a kernel that
  addresses V with K's strides reads other slots (a recipe without it has V in K's layout).
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.attention.paged_decode import attended_tokens
from references.bounds import Span, stable_seed
from references.strategies.layouts import ND_LAYOUTS, nd_view
from references.strategies.shapes import production_corners, seeds, sizes

SPARE_PAGES = 3
LENGTHS = ("mixed", "ragged", "edges", "uniform", "full")
VALUES = ("normal", "large_scores")
OUT_OF_RANGE = (0, 3, -5, 2**31 - 1)   # 0 and 3 are offsets past M; the others are absolute
KV_SCALES = {"bfloat16": (1.0, 0.5), "float8_e4m3fn": (0.0625, 0.0173, 1.0)}
LARGE_SCORE = 300.0   # exp(88.7) already overflows fp32

# The interpreter costs milliseconds per tile op: on the CPU, rows of <= 256 positions (two splits of
# 128, two tiles each), B <= 2 and Hkv <= 2 in draws (corners take 3 rows: long, empty and partial), so
# a call launches <= 12 split programs.  GPUs take the cell, within GPU_ELEMENT_BUDGET elements per
# cache (128 MB of bf16), which still allows 131072-token rows at Hkv * D <= 512.
CPU_POSITIONS, CPU_ROWS, CPU_KV_HEADS = 256, 2, 2
GPU_ELEMENT_BUDGET = 2**26


def _on_cpu(device) -> bool:
    return torch.device(device).type == "cpu"


def _caps(cell, device, kv_heads: int, page_size: int, head_dim: int) -> dict:
    """Upper bounds on M, B and T for this device."""
    context_pages = cell.bounds["context"].hi // page_size
    if _on_cpu(device):
        pages = min(context_pages, CPU_POSITIONS // page_size)
        return {"M": pages, "B": CPU_ROWS, "T": CPU_POSITIONS // page_size}
    per_page = page_size * kv_heads * head_dim
    pages = min(context_pages, GPU_ELEMENT_BUDGET // per_page)
    return {"M": pages, "B": None, "T": GPU_ELEMENT_BUDGET // per_page}


def _batch_cap(caps: dict, pages: int, kv_heads: int, page_size: int, head_dim: int, device) -> int | None:
    if _on_cpu(device):
        return caps["B"]
    return max(1, GPU_ELEMENT_BUDGET // max(1, pages * page_size * kv_heads * head_dim))


def _choices(cell, name):
    return list(cell.bounds[name].choices)


def _dtype_name(cell) -> str:
    return str(cell.bounds["kv_dtype"].choices[0]).removeprefix("torch.")


def _sparse(cell) -> bool:
    return isinstance(cell.bounds["T"], Span)


def _recipe(cell, *, B, M, S, Hkv, group, D, T, lengths, holes, values, layout, v_layout, kv_scale, seed,
            sm_factor=1.0):
    return {"B": B, "M": M, "S": S, "Hkv": Hkv, "group": group, "D": D, "T": T if _sparse(cell) else None,
            "kv_dtype": _dtype_name(cell), "lengths": lengths, "holes": holes, "values": values,
            "layout": layout, "v_layout": v_layout, "sm_scale": sm_factor * D ** -0.5, "kv_scale": kv_scale,
            "seed": seed}


def v_layout(recipe: dict) -> str:
    """The V cache's layout: the recipe's own, or K's where the recipe predates it."""
    return recipe.get("v_layout", recipe["layout"])


def recipes(cell, device) -> st.SearchStrategy[dict]:
    device = torch.device(device)

    @st.composite
    def draw_recipe(draw):
        page_size = draw(st.sampled_from(_choices(cell, "S")))
        head_dim = draw(st.sampled_from(_choices(cell, "D")))
        group = draw(sizes(cell.bounds["group"]))
        kv_heads = draw(sizes(cell.bounds["Hkv"], cap=CPU_KV_HEADS if _on_cpu(device) else None))
        caps = _caps(cell, device, kv_heads, page_size, head_dim)
        context = cell.bounds["context"]
        pages = draw(sizes(Span(context.lo // page_size, context.hi // page_size), cap=caps["M"]))
        rows = cell.bounds["B"]  # B = 0 is a corner: draws spend themselves on rows
        batch = draw(sizes(Span(max(rows.lo, 1), rows.hi),
                           cap=_batch_cap(caps, pages, kv_heads, page_size, head_dim, device)))
        entries = None
        if _sparse(cell):
            entry_cap = caps["T"] if _on_cpu(device) else max(1, caps["T"] // max(1, batch))
            entries = draw(sizes(cell.bounds["T"], cap=entry_cap))
        return _recipe(
            cell, B=batch, M=pages, S=page_size, Hkv=kv_heads, group=group, D=head_dim, T=entries,
            lengths=draw(st.sampled_from(LENGTHS)), holes=draw(st.booleans()),
            values=draw(st.sampled_from(VALUES)), layout=draw(st.sampled_from(ND_LAYOUTS)),
            v_layout=draw(st.sampled_from(ND_LAYOUTS)), kv_scale=draw(st.sampled_from(KV_SCALES[_dtype_name(cell)])),
            sm_factor=draw(st.sampled_from((1.0, 0.7))), seed=draw(seeds()))

    return draw_recipe()


def _largest(cell, device, rows: int, kv_heads: int, page_size: int, head_dim: int) -> tuple[int, int | None]:
    """The most pages per row (and selection entries, sparse) that ``rows`` rows may have here."""
    caps = _caps(cell, device, kv_heads, page_size, head_dim)
    share = 1 if _on_cpu(device) else max(rows, 1)
    pages = max(1, min(caps["M"], _batch_cap(caps, 1, kv_heads, page_size, head_dim, device) // share
                       if not _on_cpu(device) else caps["M"]))
    entries = min(cell.bounds["T"].hi, 2 * pages + 3, caps["T"] // share) if _sparse(cell) else None
    return pages, entries


def corners(cell, device) -> list[dict]:
    """Fixed examples: an empty batch and an empty table; long rows beside empty ones with holes and
    GQA; overflow-sized scores; the largest group, head dim and page; a non-power-of-two group on
    ragged edges; a tensor sm_scale.  On the GPU the long rows reach the cell's full context (within the
    budget), and a last corner the cell's most rows."""
    device = torch.device(device)
    scales = KV_SCALES[_dtype_name(cell)]
    page_sizes, head_dims = _choices(cell, "S"), _choices(cell, "D")
    shapes = [
        # (B, Hkv, group, S, D, lengths, holes, values, layout, V's layout)
        (0, 2, 4, page_sizes[0], head_dims[0], "mixed", True, "normal", "contiguous", "contiguous"),
        (3, 2, 4, page_sizes[0], head_dims[0], "mixed", True, "normal", "interleaved", "strided_last"),
        (2, 1, 2, page_sizes[1], head_dims[1], "ragged", False, "large_scores", "contiguous", "interleaved"),
        (2, 1, 16, page_sizes[-1], head_dims[-1], "full", False, "normal", "padded_last", "padded_last"),
        (3, 2, 3, page_sizes[0], head_dims[0], "edges", True, "normal", "padded_last", "contiguous"),
    ]
    found = []
    for i, (rows, kv_heads, group, page_size, head_dim, lengths, holes, values, layout,
            values_layout) in enumerate(shapes):
        pages, entries = _largest(cell, device, rows, kv_heads, page_size, head_dim)
        found.append(_recipe(cell, B=rows, M=pages, S=page_size, Hkv=kv_heads, group=group, D=head_dim, T=entries,
                             lengths=lengths, holes=holes, values=values, layout=layout,
                             v_layout=values_layout, kv_scale=scales[i % len(scales)], seed=cell.seed("corner", i)))
    no_table = found[2]  # a table of no pages: every row empty, whatever the selection says
    found.append({**no_table, "M": 0, "seed": cell.seed("corner", "no table")})
    if _sparse(cell):
        found.append({**found[1], "T": 0, "seed": cell.seed("corner", "no selection")})
    # sm_scale as a one-element tensor: the contract answers it, the kernel refuses it (its own limit)
    found.append({**found[1], "sm_scale_tensor": True, "seed": cell.seed("corner", "tensor sm_scale")})
    if _on_cpu(device):  # the interpreter's budget goes to the corners above; S and the group are drawn there
        return found

    def fit(recipe: dict) -> dict:
        pages, entries = _largest(cell, device, recipe["B"], recipe["Hkv"], recipe["S"], recipe["D"])
        return {**recipe, "M": pages, "T": entries if _sparse(cell) else None}

    # the cell's most rows, at one KV head, the smallest page and head dim: draws of many rows are rare (and short),
    # so the B a run reached, the region it certifies and dispatch routes, fell short of the cell's top by chance
    # (docs/draws.md)
    most_rows = fit(_recipe(cell, B=cell.bounds["B"].hi, M=1, S=page_sizes[0], Hkv=1, group=1, D=head_dims[0], T=1,
                            lengths="uniform", holes=False, values="normal", layout="contiguous",
                            v_layout="contiguous", kv_scale=scales[0], seed=cell.seed("corner", "most rows")))
    return found + production_corners(found[1:5], cell, {"S": ("page_size",), "group": ("gqa_group",),
                                                         "D": ("head_dim",)}, fit) + [most_rows]


# -- build ----------------------------------------------------------------------------------------
def _lengths(mode: str, rows: int, capacity: int, page_size: int, generator, device) -> torch.Tensor:
    def uniform(lo, hi):  # integers in lo..hi, one per row
        return lo + (torch.rand(rows, generator=generator, device=device) * (hi - lo + 1)).long().clamp(max=hi - lo)

    if rows == 0 or capacity == 0 or mode == "full":
        return torch.full((rows,), capacity, device=device, dtype=torch.long)
    ragged_end = uniform(1, max(1, page_size - 1))                       # slots short of a page's end
    if mode == "uniform":
        return uniform(0, capacity)
    if mode == "ragged":
        return (uniform(0, (capacity - 1) // page_size) * page_size + ragged_end.clamp(max=page_size - 1)).clamp(
            1, capacity)
    if mode == "edges":
        marks = torch.tensor([0, 1, page_size - 1, page_size, page_size + 1, 2 * page_size, 127, 128, 129,
                              511, 512, 513, capacity - 1, capacity], device=device).clamp(0, capacity)
        return marks[torch.randint(0, marks.numel(), (rows,), generator=generator, device=device)]
    # mixed: a long row (the whole table but a ragged last page) beside an empty one, the rest any kind
    long = (capacity - ragged_end).clamp(min=1) if capacity > page_size else torch.full_like(ragged_end, capacity)
    kind = torch.randint(0, 3, (rows,), generator=generator, device=device)
    order = torch.randperm(rows, generator=generator, device=device)
    kind[order[0]] = 1
    if rows > 1:
        kind[order[1]] = 0
    return torch.where(kind == 0, 0, torch.where(kind == 1, long, uniform(0, capacity)))


def _page_table(recipe: dict, seq_lens: torch.Tensor, generator, device) -> torch.Tensor:
    rows, pages, page_size = recipe["B"], recipe["M"], recipe["S"]
    physical = torch.randperm(rows * pages + SPARE_PAGES, generator=generator, device=device)
    table = physical[:rows * pages].view(rows, pages)
    if not recipe["holes"] or pages == 0:
        return table
    page_start = torch.arange(pages, device=device) * page_size
    last_page = ((seq_lens - 1).clamp(min=0) // page_size)[:, None]
    interior = (page_start[None, :] < seq_lens[:, None]) & (torch.arange(pages, device=device)[None, :] < last_page)
    chance = torch.rand(rows, pages, generator=generator, device=device)
    forced = (chance * interior).argmax(dim=1, keepdim=True)                # one interior page per row
    hole = interior & ((chance < 0.25) | (torch.arange(pages, device=device)[None, :] == forced))
    beyond = (page_start[None, :] >= seq_lens[:, None]) & (torch.rand(rows, pages, generator=generator,
                                                                      device=device) < 0.5)
    return torch.where(hole | beyond, -1, table)


def _selection(recipe: dict, table: torch.Tensor, seq_lens: torch.Tensor, generator, device) -> torch.Tensor:
    rows, pages, entries, page_size = recipe["B"], recipe["M"], recipe["T"], recipe["S"]
    if entries == 0:
        return torch.zeros(rows, 0, dtype=torch.long, device=device)
    span = max(pages, 1)
    chosen = torch.randint(0, span, (rows, entries), generator=generator, device=device)
    kind = torch.rand(rows, entries, generator=generator, device=device)
    out_of_range = torch.tensor(OUT_OF_RANGE, device=device)
    out_of_range = torch.where(out_of_range >= 0, out_of_range + pages, out_of_range)
    out_of_range[-1] = 2**31 - 1
    wild = out_of_range[torch.randint(0, out_of_range.numel(), (rows, entries), generator=generator, device=device)]
    picked = torch.where(kind < 0.15, -1, torch.where(kind < 0.25, wild, chosen))
    if pages:
        # entry 0 is an attended page where the row has one, and entry 1 repeats it: a duplicate that counts
        attended = (torch.arange(pages, device=device)[None, :] * page_size < seq_lens[:, None]) & (table >= 0)
        score = torch.rand(rows, pages, generator=generator, device=device) + attended
        picked[:, 0] = score.argmax(dim=1)
        if entries > 1:
            picked[:, 1] = picked[:, 0]
    shuffle = torch.rand(rows, entries, generator=generator, device=device).argsort(dim=1)
    return picked.gather(1, shuffle)


def _values(shape, cache_dtype, generator, device, scale=1.0) -> torch.Tensor:
    x = torch.randn(shape, generator=generator, device=device) * scale
    return x.clamp(-448, 448) if cache_dtype == torch.float8_e4m3fn else x


def _keys_and_query(recipe, pool_shape, cache_dtype, generator, device):
    """Raw cache keys and the query, per value mode."""
    rows, kv_heads, group, head_dim = recipe["B"], recipe["Hkv"], recipe["group"], recipe["D"]
    raw_scale = 8.0 if cache_dtype == torch.float8_e4m3fn else 1.0   # use e4m3's range; kv_scale rescales
    if recipe["values"] == "normal":
        keys = _values(pool_shape, cache_dtype, generator, device, raw_scale)
        query = torch.randn(rows, kv_heads * group, head_dim, generator=generator, device=device)
        return keys, query
    # large_scores: keys are c * w for a +-4 pattern w per KV head and c in {0.5 .. 1.5} (exact in bf16
    # and e4m3, so scores tie), and the query points along w with a length that puts c = 1.5 at 300.
    pattern = torch.randint(0, 2, (kv_heads, head_dim), generator=generator, device=device) * 8.0 - 4.0
    levels = torch.tensor([0.5, 0.75, 1.0, 1.25, 1.5], device=device)
    level = levels[torch.randint(0, 5, pool_shape[:3], generator=generator, device=device)]
    keys = level[..., None] * pattern
    length = LARGE_SCORE / (recipe["sm_scale"] * recipe["kv_scale"] * 1.5 * 4 * head_dim)
    noise = torch.randn(rows, kv_heads, group, head_dim, generator=generator, device=device) * 0.02
    query = (length * (pattern.sign()[None, :, None, :] + noise)).reshape(rows, kv_heads * group, head_dim)
    return keys, query


# A row's lse is measured in ULPs of its largest |lse| (CONTRACTS.md), but a score is an fp32 dot whose
# rounding scales with its terms sum_d |q_d k_d|: where every head of a row has |lse| below 1/8 of the
# row's largest term sum (one attended token scoring near 0, say), fp32 implementations reading the
# contract literally (K scaled element by element, then the dot) are 20+ ULP off and the band is vacuous
# (issue 24: 21 ULP on a one-token row, lse -0.83).  Such rows are not drawn: the query is redrawn.
CANCELLATION_RATIO = 8
QUERY_REDRAWS = 16


def clear_of_cancellation(query: torch.Tensor, keys: torch.Tensor, metadata: dict, sm_scale: float,
                          seed: int) -> torch.Tensor:
    """``query`` (bf16 ``[B, Hq, D]``) with each row whose heads' |lse| all fall below 1 / CANCELLATION_RATIO
    of its largest ``sm_scale * sum_d |q_d k_d|`` redrawn from a normal distribution (up to QUERY_REDRAWS
    times, from a generator of its own: no other value of the recipe moves).  ``keys``: the cache's element values
    ``[P, S, Hkv, D]`` (kv_scale or the NVFP4 decode applied); ``metadata``: the page table, lengths and
    selection."""
    batch, query_heads, head_dim = query.shape
    _, page_size, kv_heads, _ = keys.shape
    attended = attended_tokens(metadata["page_table"], metadata["seq_lens"], page_size, metadata["page_select"])
    generator = torch.Generator(device=query.device).manual_seed(stable_seed(seed, "query clear of cancellation"))
    query = query.clone()
    for row in range(batch):
        token = attended[row].nonzero()[:, 0]
        if token.numel() == 0:
            continue
        k = keys[metadata["page_table"][row, token // page_size].long(), token % page_size].double()
        for _ in range(QUERY_REDRAWS):
            q = query[row].double().view(kv_heads, query_heads // kv_heads, head_dim)
            lse = (torch.einsum("kgd,nkd->kgn", q, k) * sm_scale).logsumexp(dim=-1)
            terms = torch.einsum("kgd,nkd->kgn", q.abs(), k.abs()) * sm_scale
            if CANCELLATION_RATIO * lse.abs().max() >= terms.max():
                break
            query[row] = torch.randn(query_heads, head_dim, generator=generator, device=query.device).to(query.dtype)
    return query


def build(recipe: dict, device) -> dict:
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(recipe["seed"])
    rows, pages, page_size = recipe["B"], recipe["M"], recipe["S"]
    kv_heads, head_dim = recipe["Hkv"], recipe["D"]
    cache_dtype = getattr(torch, recipe["kv_dtype"])
    num_pages = rows * pages + SPARE_PAGES

    seq_lens = _lengths(recipe["lengths"], rows, pages * page_size, page_size, generator, device)
    table = _page_table(recipe, seq_lens, generator, device)
    selection = None if recipe["T"] is None else _selection(recipe, table, seq_lens, generator, device)
    as_int32 = {"page_table": table.to(torch.int32), "seq_lens": seq_lens.to(torch.int32),
                "page_select": None if selection is None else selection.to(torch.int32)}

    # every slot some row attends gets a value; all others NaN
    attended = attended_tokens(as_int32["page_table"], as_int32["seq_lens"], page_size, as_int32["page_select"])
    row_of, token = attended.nonzero(as_tuple=True)
    live = torch.zeros(num_pages, page_size, dtype=torch.bool, device=device)
    live[table[row_of, token // page_size], token % page_size] = True
    pool_shape = (num_pages, page_size, kv_heads, head_dim)
    keys, query = _keys_and_query(recipe, pool_shape, cache_dtype, generator, device)
    values = _values(pool_shape, cache_dtype, generator, device, 8.0 if cache_dtype == torch.float8_e4m3fn else 1.0)
    nan = torch.tensor(float("nan"), device=device)
    keys = torch.where(live[..., None, None], keys, nan).to(cache_dtype)
    values = torch.where(live[..., None, None], values, nan).to(cache_dtype)
    query = clear_of_cancellation(query.to(torch.bfloat16), keys.float() * recipe["kv_scale"], as_int32,
                                  recipe["sm_scale"], recipe["seed"])
    return {**_laid_out(recipe["layout"], v_layout(recipe), keys, values, query, as_int32, num_pages, generator),
            "sm_scale": (torch.tensor(recipe["sm_scale"], device=device) if recipe.get("sm_scale_tensor")
                         else recipe["sm_scale"]),
            "kv_scale": recipe["kv_scale"]}


def _laid_out(layout: str, values_layout: str, keys, values, query, metadata: dict, num_pages: int,
              generator) -> dict:
    """K and the query in ``layout``, V in ``values_layout`` (``references/strategies/layouts.nd_view``); with
    ``padded_last`` the metadata are views too: the table ``[:, :M]`` of a wider one whose padding holds real page ids,
    ``seq_lens[::2]``, and the selection ``[:, :T]`` of a wider one whose padding holds real logical pages."""
    out = {**metadata}
    for name, tensor, its_layout in (("k_cache", keys, layout), ("v_cache", values, values_layout),
                                     ("q", query, layout)):
        out[name] = nd_view(tuple(tensor.shape), tensor.dtype, its_layout, tensor.device)
        out[name].copy_(tensor)
    if layout == "padded_last":
        table = metadata["page_table"]
        rows, pages = table.shape
        out["page_table"] = _in_wider(table, num_pages, generator)
        lengths = torch.full((2 * rows,), 2**30, dtype=torch.int32, device=table.device)
        lengths[::2] = metadata["seq_lens"]
        out["seq_lens"] = lengths[::2]
        if metadata["page_select"] is not None:
            out["page_select"] = _in_wider(metadata["page_select"], max(pages, 1), generator)
    return out


def _in_wider(ids: torch.Tensor, bound: int, generator) -> torch.Tensor:
    """int32 ``ids [R, n]`` as ``[:, :n]`` of a table 3 wider whose padding holds ids drawn below ``bound``."""
    rows, width = ids.shape
    wide = torch.randint(0, bound, (rows, width + 3), generator=generator, device=ids.device).to(torch.int32)
    wide[:, :width] = ids
    return wide[:, :width]
