"""A seed's draws are the same whatever the process imported before (``oracles/draws.py``)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis.internal.conjecture import providers

from suites.claims import REPO

pytestmark = pytest.mark.cpu

# Draws 300 integers under a fixed seed, imports a new local module full of literals in the drawn range
# (written beside the script), and draws again: prints whether the two sequences are the same.
DRAWS = """
import pathlib, sys, tempfile
import hypothesis
from hypothesis import strategies as st
from oracles.draws import draws_from_the_seed_alone

def sample():
    drawn = []

    @hypothesis.settings(max_examples=300, database=None, phases=[hypothesis.Phase.generate], deadline=None)
    @hypothesis.seed(7)
    @hypothesis.given(st.integers(0, 10 ** 6))
    def collect(x):
        drawn.append(x)

    collect()
    return drawn

if sys.argv[1] == "pinned":
    draws_from_the_seed_alone()
before = sample()
folder = tempfile.mkdtemp()
literals = ", ".join(str(100003 + 7919 * i) for i in range(200))
pathlib.Path(folder, "many_literals.py").write_text(f"VALUES = ({literals})\\n")
sys.path.insert(0, folder)
import many_literals
print(before == sample())
"""


def _same_draws_after_an_import(mode: str) -> bool:
    run = subprocess.run([sys.executable, "-c", DRAWS, mode], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().lower())


def test_a_seeds_draws_do_not_follow_what_was_imported_before():
    """Pinned, the draws before and after importing a module of 200 new literals are the same; the control:
    unpinned, on a Hypothesis that draws from local literals, they are not."""
    assert _same_draws_after_an_import("pinned")
    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis draws no local literals: the control has nothing to show")
    assert not _same_draws_after_an_import("unpinned")
