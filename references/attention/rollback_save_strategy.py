"""Inputs for ``rollback_save``: the plane, page table and positions of a speculative step
(``references/attention/rollback_steps.py`` builds the step and says what it plants)."""
from __future__ import annotations

from references.attention.rollback_steps import build_step, corners, cpu_cap, production_size, recipes

__all__ = ["build", "corners", "cpu_cap", "production_size", "recipes"]


def build(recipe: dict, device) -> dict:
    step = build_step(recipe, device)
    return {name: step[name] for name in ("plane", "page_table", "positions")}
