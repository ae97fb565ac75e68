"""The nightly run's negative control: a ``greedy_argmax`` that is right on most calls and wrong on a
random subset of them, as a kernel with a race is.  ``tools/nightly`` must report it as FLAKY.

Which calls fail is drawn from the operating system's entropy, never from a seed the battery controls:
replaying the same example must sometimes pass and sometimes fail.
"""
from __future__ import annotations

import random

from references.sampling.greedy_argmax import greedy_argmax as reference
from references.sampling.greedy_argmax import validate

# An example calls the implementation about seven times (parity, determinism, batch invariance, two
# write-guard runs), so one call in ten fails about half the examples: often enough to be caught in
# every run, rarely enough that a replayed example also passes.
FAILURE_RATE = 0.1
_CHANCE = random.SystemRandom()


def greedy_argmax(logits):
    validate(logits)
    token_ids = reference(logits)
    if token_ids.numel() and _CHANCE.random() < FAILURE_RATE:
        token_ids = token_ids.clone()
        token_ids[0] = (token_ids[0] + 1) % logits.shape[1]
    return token_ids
