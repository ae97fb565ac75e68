"""Sizes inside a cell's bounds, biased toward the values that break kernels.

Besides uniform draws, a size is drawn from the *edges* of its span: both bounds, one inside each
bound, and every block edge (a multiple of a power-of-two block, and one either side of it), so
"not a multiple of any block" and "exactly one block" both come up early.
"""
from __future__ import annotations

import math

from hypothesis import strategies as st

from references.bounds import Span

BLOCKS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

# CONTRACTS.md, "Production shapes are corners": the sizes of real models, by what a dimension is.  A bug at
# one of them must not hide between span edges that random draws rarely land on.
PRODUCTION_SIZES = {
    "vocabulary": (32000, 32064, 50257, 128256, 151936, 152064, 202048, 262144),
    "hidden": (2048, 2560, 4096, 5120, 7168, 8192),
    "head_dim": (64, 128, 256),
    "gqa_group": (1, 4, 8, 16),
    "page_size": (16, 32, 64, 128),
    "speculative_depth": (1, 3, 7),
}


def edge_sizes(span: Span, cap: int | None = None) -> list[int]:
    hi = span.hi if cap is None else min(span.hi, cap)
    candidates = {span.lo, span.lo + 1, hi, hi - 1}
    for block in BLOCKS:
        for multiple in (block, 2 * block, 3 * block):
            candidates.update({multiple - 1, multiple, multiple + 1})
    return sorted(v for v in candidates if span.lo <= v <= hi)


def sizes(span: Span, cap: int | None = None) -> st.SearchStrategy[int]:
    """A size in ``span`` (and <= ``cap``, a per-device budget), half the time on an edge."""
    hi = span.hi if cap is None else max(span.lo, min(span.hi, cap))
    return st.one_of(st.sampled_from(edge_sizes(span, cap)), st.integers(span.lo, hi))


def multiples(span: Span, step: int, cap: int | None = None) -> st.SearchStrategy[int]:
    """A multiple of ``step`` in ``span`` (and <= ``cap``), half the time on an edge.

    For sizes whose granularity a format fixes (NVFP4's K is a multiple of 16). The edges are both
    bounds, one step inside each, and every block edge one step either side, so sizes that are not a
    multiple of a 64-wide tile (``64 + 16``, ``3 * 64 - 16``) come up early.
    """
    lo = -(-span.lo // step) * step
    hi = (span.hi if cap is None else max(span.lo, min(span.hi, cap))) // step * step
    if lo > hi:
        raise ValueError(f"span: no multiple of {step} in {span.lo}..{hi}")
    candidates = {lo, lo + step, hi, hi - step}
    for block in BLOCKS:
        for multiple in (block, 2 * block, 3 * block):
            candidates.update({multiple - step, multiple, multiple + step})
    edges = sorted(v for v in candidates if lo <= v <= hi and v % step == 0)
    return st.one_of(st.sampled_from(edges), st.integers(lo // step, hi // step).map(lambda k: k * step))


def production_corners(corners: list[dict], cell, dims: dict[str, tuple[str, ...]], fit, size_of=None,
                       together: bool = False) -> list[dict]:
    """Extra corners for the production sizes ``cell`` holds: for each dimension ``name`` of ``dims`` (name ->
    kinds of :data:`PRODUCTION_SIZES`) and each size of those kinds that the cell's bound on it holds and no
    corner has yet, a template of ``corners`` (taken in turn, so dtypes, layouts and value modes vary) with
    ``name`` set to that size, passed to ``fit`` (the strategy's: the recipe made consistent with the size,
    or None where the device's budget cannot take it, and the next template is tried; a size no template
    fits is left out: on the CPU it narrows onto the widest corner the budget allows, there already).
    ``size_of(recipe, name)``: the size a recipe gives ``name`` where its field is not that size itself.
    ``together``: the i-th missing size of every dimension on one corner (fewer corners, for a strategy whose
    corners cost seconds each), each on its own where no template fits them together."""
    missing = {}
    for name, kinds in dims.items():
        bound = cell.bounds.get(name)
        present = {recipe.get(name) if size_of is None else size_of(recipe, name) for recipe in corners}
        missing[name] = list(dict.fromkeys(size for kind in kinds for size in PRODUCTION_SIZES[kind]
                                           if bound is not None and size in bound and size not in present))
    if together:
        most = max(map(len, missing.values()), default=0)
        groups = [(i, {name: sizes[i] for name, sizes in missing.items() if i < len(sizes)}) for i in range(most)]
    else:
        groups = [(i, {name: size}) for name, sizes in missing.items() for i, size in enumerate(sizes)]
    extra = []
    for i, sizes in groups:
        recipe = _first_fit(corners, cell, sizes, fit, i)
        if recipe is not None:
            extra.append(recipe)
        elif len(sizes) > 1:
            extra += [found for name, size in sizes.items()
                      if (found := _first_fit(corners, cell, {name: size}, fit, i)) is not None]
    return extra


def _first_fit(corners: list[dict], cell, sizes: dict, fit, start: int) -> dict | None:
    """The first template, from the ``start``-th on, whose other sizes let ``sizes`` fit the budget."""
    seed = cell.seed("production", *(part for item in sizes.items() for part in item))
    tried = (fit({**corners[(start + j) % len(corners)], **sizes, "seed": seed}) for j in range(len(corners)))
    return next((found for found in tried if found is not None), None)


def product_cap(cell, dims: tuple[str, ...], budget: int) -> str | None:
    """A CPU budget on the product of some of ``cell``'s dimensions in words (``"R·V <= 2^18"``), or None where
    the cell's largest product fits it: what a CPU run judges of the cell, for its verdict line."""
    return budget_cap("·".join(dims), math.prod(largest(cell.bounds[name]) for name in dims), budget)


def budget_cap(what: str, most: int, budget: int) -> str | None:
    """``what <= budget`` in words (a large power of two as ``2^k``), or None where the cell's ``most`` fits."""
    if most <= budget:
        return None
    written = f"2^{budget.bit_length() - 1}" if budget >= 1024 and budget & (budget - 1) == 0 else str(budget)
    return f"{what} <= {written}"


def largest(bound) -> int:
    """The largest size a cell's bound on one dimension holds (a span's upper end, or the largest choice)."""
    return bound.hi if isinstance(bound, Span) else max(bound.choices)


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**31 - 1)
