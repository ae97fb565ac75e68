"""tools/check-test-lists: every listed id collects, and every collected test is listed for its arch.

Both directions, with ``file:line``:
- schema: each list parses as a test-db list (see tools/engine/test_lists.py);
- duplicates: an id listed twice in one file;
- stale ids: a listed id that selects no collected test;
- wrong arch: a listed id whose tests do not carry the list's arch marker;
- unlisted: a collected test that no list of an arch it claims selects;
- not in CPU CI: a test that claims ``cpu`` which only lists of other archs select (CPU CI, which runs every
  commit, runs the cpu lists alone).
Exit 0 clean, 1 findings, 2 usage error or a list that does not parse (schema, duplicate keys, bad ranges,
not UTF-8: one line with file:line).
"""
from __future__ import annotations

import collections
import contextlib
import io
import json
import pathlib
import sys

from tools.cli import ArgumentParser, UsageError, run_tool

# the lists' loader reaches the ops package, which imports torch: it is imported by the functions that use
# it, so --help and a bad flag need neither.
REPO = pathlib.Path(__file__).resolve().parent.parent


class _Collector:
    """A pytest plugin that records each collected test's node id and arch markers."""

    def __init__(self):
        self.tests: dict[str, set[str]] = {}
        self.errors: list[str] = []

    def pytest_collection_modifyitems(self, session, config, items):
        from tools.engine.test_lists import ARCH_MARKERS

        for item in items:
            self.tests[item.nodeid] = {m.name for m in item.iter_markers() if m.name in ARCH_MARKERS}

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"{report.nodeid or 'collection'}: {report.longreprtext.strip().splitlines()[-1]}")


def collect_tests() -> tuple[dict[str, set[str]], list[str]]:
    """Every test under suites/ with its arch markers (collected in-process, nothing run)."""
    import pytest

    collector = _Collector()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        pytest.main(["--collect-only", "-q", "--assert=plain", "-p", "no:cacheprovider",
                     "-p", "no:suites.plugins.arch_markers", "--rootdir", str(REPO),
                     "-c", str(REPO / "pyproject.toml"), str(REPO / "suites")],
                    plugins=[collector])
    return collector.tests, collector.errors


def check(paths) -> list[str]:
    from tools.engine.test_lists import ListFormatError, load_list, matches

    findings = []
    listed = []
    for path in paths:
        try:
            tests = load_list(path)
        except ListFormatError as error:
            raise UsageError(f"schema: {error}") from None
        seen = {}
        for test in tests:
            if test.test_id in seen:
                findings.append(f"duplicate: {test.where}: {test.test_id} (also at line {seen[test.test_id]})")
            seen.setdefault(test.test_id, test.line)
        listed += tests
    collected, errors = collect_tests()
    findings += [f"collection error: {error}" for error in errors]
    covered = collections.defaultdict(set)
    for test in listed:
        selected = [nodeid for nodeid in collected if matches(nodeid, test.test_id)]
        if not selected:
            findings.append(f"stale: {test.where}: {test.test_id} selects no collected test")
            continue
        wrong_arch = [nodeid for nodeid in selected if test.arch not in collected[nodeid]]
        if wrong_arch:
            findings.append(f"wrong arch: {test.where}: {test.test_id} is listed for {test.arch} but "
                            f"{wrong_arch[0]} claims {sorted(collected[wrong_arch[0]]) or 'no arch'}")
        for nodeid in selected:
            covered[nodeid].add(test.arch)
    for nodeid, archs in sorted(collected.items()):
        if not archs:
            findings.append(f"no arch marker: {nodeid}")
        elif not archs & covered[nodeid]:
            findings.append(f"unlisted: {nodeid} (claims {', '.join(sorted(archs))}) is in no list of those archs")
        elif "cpu" in archs and "cpu" not in covered[nodeid]:
            findings.append(f"not in CPU CI: {nodeid} claims cpu, only lists of "
                            f"{', '.join(sorted(covered[nodeid]))} select it")
    return findings


def main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/check-test-lists", description=__doc__.split("\n\n")[0])
    parser.add_argument("lists", nargs="*", metavar="FILE", help="lists to check (default: test_lists/*.yml)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    from tools.engine.test_lists import all_list_paths

    paths = [pathlib.Path(p) for p in args.lists] or all_list_paths()
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such test list: {', '.join(missing)}")
    findings = check(paths)
    if args.json:
        print(json.dumps({"lists": [str(p) for p in paths], "findings": findings}, indent=2))
    else:
        for finding in findings:
            print(finding)
        print(f"check-test-lists: {len(findings)} findings in {len(paths)} lists", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    run_tool(main)
