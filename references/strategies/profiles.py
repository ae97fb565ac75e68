"""Hypothesis profiles.  Select with ``--hypothesis-profile NAME`` (pytest) or ``HYPOTHESIS_PROFILE``.

- ``ci``: derandomized (the same examples every run), no deadline, no example database; the CPU
  interpreter is slow, so few draws per cell (the cells' fixed corners always run besides).
- ``dev``: a few more draws, random, with the local database so failures come back first.
- ``gpu``: many draws per cell, what ``--device cuda`` certification uses.
- ``nightly``: fresh seeds and many draws; flaky examples are reported as failures.
- ``smoke``: one draw per cell besides its corners: .ci/run's second toolchain, which checks that every
  kernel still runs there, not again what the pinned run proved.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)

settings.register_profile("ci", max_examples=6, derandomize=True, database=None, **_COMMON)
settings.register_profile("dev", max_examples=12, **_COMMON)
settings.register_profile("gpu", max_examples=100, database=None, **_COMMON)
settings.register_profile("nightly", max_examples=400, database=None, **_COMMON)
settings.register_profile("smoke", max_examples=1, derandomize=True, database=None, **_COMMON)

DEFAULT_PROFILE = "ci"


def load_profile(name: str | None = None) -> settings:
    name = name or os.environ.get("HYPOTHESIS_PROFILE", DEFAULT_PROFILE)
    settings.load_profile(name)
    return settings.get_profile(name)
