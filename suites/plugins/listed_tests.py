"""``pytest --test-list FILE [--test-stage STAGE] [--shard I/N]``: run exactly the tests a YAML list names.

An id that selects nothing is an error (a list must not rot silently), as is a list that fails its
schema.  ``--test-stage`` keeps only the blocks whose ``terms.stage`` matches.  ``--shard I/N`` then
keeps shard I of N of the selected tests, by a stable digest of each node id (``tools/engine/shards.py``):
N runners given ``--shard 1/N`` .. ``--shard N/N`` run every selected test exactly once between them.
"""
from __future__ import annotations

import pytest

from tools.engine.shards import parse_shard, select
from tools.engine.test_lists import ListFormatError, load_lists, matches


def pytest_addoption(parser):
    group = parser.getgroup("kernel-parity test lists")
    group.addoption("--test-list", action="append", default=[], metavar="FILE",
                    help="run exactly the tests listed in this YAML test list (repeatable)")
    group.addoption("--test-stage", default=None, metavar="STAGE",
                    help="with --test-list: only the blocks whose terms.stage is STAGE")
    group.addoption("--shard", default=None, metavar="I/N",
                    help="only shard I of N (1-based) of the selected tests, split by a stable digest of node ids")


def pytest_configure(config):
    """A list that does not parse is a usage error before collection starts (never an INTERNALERROR)."""
    _listed(config)


def _listed(config) -> list:
    try:
        return load_lists(config.getoption("test_list"))
    except ListFormatError as error:
        raise pytest.UsageError(f"--test-list: {error}") from None


def listed_items(config, items) -> list:
    """The collected items the --test-list files select (all of them without a list)."""
    paths = config.getoption("test_list")
    if not paths:
        return list(items)
    listed = _listed(config)
    stage = config.getoption("test_stage")
    listed = [test for test in listed if stage is None or test.stage == stage]
    unmatched = [test for test in listed if not any(matches(item.nodeid, test.test_id) for item in items)]
    if unmatched:
        lines = "\n".join(f"  {test.where}: {test.test_id}" for test in unmatched)
        raise pytest.UsageError(f"--test-list: {len(unmatched)} listed ids match no collected test:\n{lines}")
    return [item for item in items if any(matches(item.nodeid, test.test_id) for test in listed)]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    try:
        shard = parse_shard(config.getoption("shard")) if config.getoption("shard") else None
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    selected = select(listed_items(config, items), shard, key=lambda item: (item.nodeid,))
    kept = set(selected)
    deselected = [item for item in items if item not in kept]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = selected
