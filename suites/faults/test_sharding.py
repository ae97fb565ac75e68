"""``--shard I/N`` for certification runs and test lists: N shards hold every id exactly once, the same
way on every machine."""
from __future__ import annotations

import contextlib
import io

import pytest

from ops import catalog
from suites.claims import REPO
from tools import certify_cells
from tools.engine.shards import Shard, parse_shard, partition_problems, select

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("text, says", [("0/4", "1..N"), ("5/4", "1..N"), ("1-4", "expected I/N"),
                                         ("", "expected I/N")])
def test_a_bad_shard_is_refused(text, says):
    with pytest.raises(ValueError, match=says):
        parse_shard(text)


def test_a_shard_is_chosen_by_a_stable_digest():
    """Pinned values: a shard must not move with Python's hash salt, the machine, or the other ids."""
    assert [Shard(i, 3).holds("greedy_argmax", "empty_batch") for i in (1, 2, 3)].count(True) == 1
    assert parse_shard(" 2 / 3 ") == Shard(2, 3)
    assert [i for i in (1, 2, 3) if Shard(i, 3).holds("greedy_argmax", "empty_batch")] == [
        catalog.stable_seed("shard", "greedy_argmax", "empty_batch") % 3 + 1]


def test_the_partition_check_catches_a_lost_and_a_doubled_id():
    ids = ["a", "b", "c", "d"]
    assert partition_problems(ids, 3, lambda shard: select(ids, shard, key=lambda i: (i,))) == []
    lost = partition_problems(ids, 2, lambda shard: select(ids[1:], shard, key=lambda i: (i,)))
    assert lost == ["'a' is in no shard"]
    doubled = partition_problems(ids, 2, lambda shard: ["d", *select(ids, shard, key=lambda i: (i,))])
    assert [problem for problem in doubled if problem.startswith("'d' is in shards ")] == doubled != [], doubled


def _listed_cells(capsys, *words) -> list[str]:
    """The (op, cell) ids listed, one a line (a quarantined cell's line also names its ledger entry)."""
    assert certify_cells.main(["--device", "cpu", "--list", *words]) == 0
    return [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_certification_shards_cover_every_cell_once(capsys, count):
    every = _listed_cells(capsys)
    assert len(every) == sum(len(entry.cells) for entry in catalog.entries().values())
    problems = partition_problems(every, count, lambda shard: _listed_cells(capsys, "--shard", str(shard)))
    assert problems == []


class _Collected:
    """A pytest plugin that keeps the node ids a collection ends with (after --test-list and --shard)."""

    def __init__(self):
        self.ids: list[str] = []

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]


def _collected(*words) -> list[str]:
    """Collected in this process (the interpreter is already warm), the way ``pytest --co`` would."""
    collected = _Collected()
    with contextlib.redirect_stdout(io.StringIO()):
        code = pytest.main(["--co", "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml"),
                            "--rootdir", str(REPO), *words], plugins=[collected])
    assert code == 0, words
    return collected.ids


def test_test_list_shards_run_every_listed_test_once(tmp_path):
    listing = tmp_path / "l0_probe.yml"
    listing.write_text("version: 0.0.1\nl0_probe:\n- condition:\n    terms: {stage: pre_merge, arch: cpu}\n"
                       "  tests:\n  - suites/faults/test_quarantine.py\n  - suites/faults/test_sharding.py\n")
    every = _collected("--test-list", str(listing))
    assert len(every) > 20
    assert partition_problems(every, 2, lambda shard: _collected("--test-list", str(listing), "--shard", str(shard))) \
        == []
