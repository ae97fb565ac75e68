"""Inputs for ``rollback_restore``: a speculative step's plane, page table, positions, saved slots and
rejection mask (``references/attention/rollback_steps.py`` builds the step and says what it plants)."""
from __future__ import annotations

from references.attention.rollback_steps import build_step, corners, cpu_cap, production_size, recipes

__all__ = ["build", "corners", "cpu_cap", "production_size", "recipes"]


def build(recipe: dict, device) -> dict:
    return build_step(recipe, device)
