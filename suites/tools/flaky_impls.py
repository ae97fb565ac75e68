"""The nightly run's negative control: a ``greedy_argmax`` that is right on most calls and wrong on a
random subset of them, as a kernel with a race is.  ``tools/nightly`` must report it as FLAKY.

Every tenth call fails, counted across the process: replaying the same example lands on other calls,
so it sometimes passes and sometimes fails (as a race does), yet the whole test is deterministic.
"""
from __future__ import annotations

import itertools

from references.sampling.greedy_argmax import greedy_argmax as reference
from references.sampling.greedy_argmax import validate

# An example calls the implementation about seven times (parity, determinism, batch invariance, two
# write-guard runs), so one call in ten fails about half the examples: often enough to be caught in
# every run, rarely enough that a replayed example also passes.
FAILING_CALL_PERIOD = 10
_CALLS = itertools.count(1)


def greedy_argmax(logits):
    validate(logits)
    token_ids = reference(logits)
    if token_ids.numel() and next(_CALLS) % FAILING_CALL_PERIOD == 0:
        token_ids = token_ids.clone()
        token_ids[0] = (token_ids[0] + 1) % logits.shape[1]
    return token_ids
