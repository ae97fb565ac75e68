"""Draws that follow from their seed alone.

Hypothesis (6.131 and later) sometimes draws an integer or a float from the literals it finds in the
source of the *local* modules the process has imported (every module outside site-packages and the
standard library), re-read whenever ``sys.modules`` grows.  For a judge that makes a cell's draws under a
fixed seed depend on what the process imported before (a negative control passed alone and failed after
its file's other tests), and lets a suite's wrong implementation lend the judge its own bug's constants
(docs/draws.md).  The pool of local literals is pinned empty; Hypothesis' own constants (its built-in list
of awkward values) stay.
"""
from __future__ import annotations

import functools


def draws_from_the_seed_alone() -> None:
    """Pin Hypothesis' pool of literals from local source to empty, in this process (idempotent; a
    Hypothesis without the pool is left as it is)."""
    from hypothesis.internal.conjecture import providers

    if hasattr(providers, "_get_local_constants") and providers._get_local_constants is not _no_local_constants:
        providers._get_local_constants = _no_local_constants
        providers.CONSTANTS_CACHE.cache.clear()   # permitted values computed from the old pool


@functools.cache
def _no_local_constants():
    from hypothesis.internal.conjecture import providers

    return providers.Constants()


def over_cell_draws(strategy, cell, device, examples: int, seed: int, phases=None, **settings):
    """Decorator: the function, given one recipe, runs on each of the cell's Hypothesis draws — the judge's
    draws, made here once: the pool above pinned, the cell's own seed (``cell.seed(seed)``, ``seed`` the
    run's salt), no database, no deadline, every health check off, and ``phases`` (default: generation
    only, no shrinking).  ``settings`` adds Hypothesis settings that do not change what is drawn
    (verbosity, reporting)."""
    import hypothesis
    from hypothesis import HealthCheck

    draws_from_the_seed_alone()
    phases = [hypothesis.Phase.generate] if phases is None else phases

    def decorate(body):
        drawn = hypothesis.seed(cell.seed(seed))(hypothesis.given(strategy.recipes(cell, device))(body))
        return hypothesis.settings(max_examples=examples, deadline=None, database=None, phases=phases,
                                   suppress_health_check=list(HealthCheck), **settings)(drawn)

    return decorate


def cell_draws(strategy, cell, device, examples: int, seed: int) -> list[dict]:
    """The first ``examples`` recipes the cell's draws give (``over_cell_draws``)."""
    import hypothesis

    drawn: list[dict] = []
    if examples <= 0:
        return drawn

    @over_cell_draws(strategy, cell, device, examples, seed, verbosity=hypothesis.Verbosity.quiet)
    def collect(recipe):
        drawn.append(recipe)

    collect()
    return drawn[:examples]
