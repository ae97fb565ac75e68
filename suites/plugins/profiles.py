"""Loads the project's Hypothesis profiles (``ci`` unless ``--hypothesis-profile`` names another), and
makes every test's draws follow from its seed alone, not from what the tests before it imported
(``oracles/draws.py``)."""
from __future__ import annotations

from oracles.draws import draws_from_the_seed_alone
from references.strategies.profiles import load_profile


def pytest_configure(config):
    draws_from_the_seed_alone()
    if not config.getoption("hypothesis_profile", None):
        load_profile()
