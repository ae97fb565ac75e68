"""Draws that follow from their seed alone.

Hypothesis (6.131 and later) sometimes draws an integer or a float from the literals it finds in the
source of the *local* modules the process has imported (every module outside site-packages and the
standard library), re-read whenever ``sys.modules`` grows.  For a judge that makes a cell's draws under a
fixed seed depend on what the process imported before: the same cell and seed drew other shapes after
the kernel's own certification in the same process than in a fresh one (greedy_argmax decode_mid_batch:
draws 2 to 10 differed), so a negative control passed alone and failed after its file's other tests, and
a certificate's draws could not be made again from its seed.  It also lets a suite's wrong
implementation teach the judge its own bug (the literals 1000 and 4000 of a kernel wrong only between
them).  The pool of local literals is pinned empty; Hypothesis' own constants (its built-in list of
awkward values) stay.
"""
from __future__ import annotations

_PINNED: list[bool] = []


def draws_from_the_seed_alone() -> None:
    """Pin Hypothesis' pool of literals from local source to empty, in this process (idempotent; a
    Hypothesis without the pool is left as it is)."""
    if _PINNED:
        return
    from hypothesis.internal.conjecture import providers

    if hasattr(providers, "_get_local_constants"):
        empty = providers.Constants()
        providers._get_local_constants = lambda: empty
        providers.CONSTANTS_CACHE.cache.clear()   # permitted values computed from the old pool
    _PINNED.append(True)
