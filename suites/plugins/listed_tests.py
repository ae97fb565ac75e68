"""``pytest --test-list FILE [--test-stage STAGE]``: run exactly the tests a YAML list names.

An id that selects nothing is an error (a list must not rot silently), as is a list that fails its
schema.  ``--test-stage`` keeps only the blocks whose ``terms.stage`` matches.
"""
from __future__ import annotations

import pytest

from tools.test_lists import ListFormatError, load_lists, matches


def pytest_addoption(parser):
    group = parser.getgroup("kernel-parity test lists")
    group.addoption("--test-list", action="append", default=[], metavar="FILE",
                    help="run exactly the tests listed in this YAML test list (repeatable)")
    group.addoption("--test-stage", default=None, metavar="STAGE",
                    help="with --test-list: only the blocks whose terms.stage is STAGE")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    paths = config.getoption("test_list")
    if not paths:
        return
    try:
        listed = load_lists(paths)
    except ListFormatError as error:
        raise pytest.UsageError(f"--test-list: {error}") from None
    stage = config.getoption("test_stage")
    listed = [test for test in listed if stage is None or test.stage == stage]
    unmatched = [test for test in listed if not any(matches(item.nodeid, test.test_id) for item in items)]
    if unmatched:
        lines = "\n".join(f"  {test.where}: {test.test_id}" for test in unmatched)
        raise pytest.UsageError(f"--test-list: {len(unmatched)} listed ids match no collected test:\n{lines}")
    selected = [item for item in items if any(matches(item.nodeid, test.test_id) for test in listed)]
    deselected = [item for item in items if item not in selected]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = selected
