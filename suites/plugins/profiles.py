"""Loads the project's Hypothesis profiles; ``ci`` unless ``--hypothesis-profile`` names another."""
from __future__ import annotations

from references.strategies.profiles import load_profile


def pytest_configure(config):
    if not config.getoption("hypothesis_profile", None):
        load_profile()
