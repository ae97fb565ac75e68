"""Claims gates: what the catalog claims must be backed by files, tests and fresh certificates.

Each check returns findings (strings naming what is wrong and what to run); ``test_claims.py``
asserts there are none for the real catalog, and feeds the checks broken inputs to show they fail.
"""
from __future__ import annotations

import fcntl
import functools
import json
import os
import pathlib
import subprocess
import sys

from ops import certificates
from ops.catalog import Arch

REPO = pathlib.Path(__file__).resolve().parent.parent
STRATEGY_FUNCTIONS = ("recipes", "corners", "build")  # what the battery calls


def nested_pytest_environment(**extra: str) -> dict[str, str]:
    """The environment of a pytest run a test starts: this one's, without the user's PYTEST_ADDOPTS (``-rs``
    or ``-x`` there change what the nested run prints and does, which the test reads)."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, **extra}


SUITES = REPO / "suites"


_shared_folder: list[pathlib.Path] = []   # where this pytest run's processes keep one collection (share_collection_in)


def share_collection_in(folder: pathlib.Path) -> None:
    """Let :func:`collection` keep the collection in ``folder`` for the other processes of this pytest run
    (xdist's workers, whose temporary folders share a parent): the first to need it makes it, the others wait
    for it and read it, where each would make its own (12 CPU-s, docs/ci.md)."""
    _shared_folder[:] = [folder]


@functools.lru_cache(maxsize=1)
def collection() -> tuple[dict[str, set[str]], list[str]]:
    """Every test under suites/ with its arch markers, and the collection errors, as ``tools/check-test-lists``
    collects them (its ``collect_tests``), in a fresh interpreter once per process (or once per run:
    :func:`share_collection_in`): a collection imports every suite, so one serves every claim that reads it."""
    if not _shared_folder:
        found = _collected()
    else:
        with open(_shared_folder[0] / "suites-collection.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)   # released as the file closes
            kept = _shared_folder[0] / "suites-collection.json"
            if not kept.exists():
                kept.write_text(_collected())
            found = kept.read_text()
    found = json.loads(found)
    return {nodeid: set(marks) for nodeid, marks in found["tests"].items()}, found["errors"]


def _collected() -> str:
    script = ("import json; from tools.check_test_lists import collect_tests; tests, errors = collect_tests(); "
              "print(json.dumps({'tests': {k: sorted(v) for k, v in tests.items()}, 'errors': errors}))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=SUITES.parent,
                         env=nested_pytest_environment())
    if run.returncode != 0:
        raise RuntimeError(f"collecting suites/ failed (exit {run.returncode}): {run.stderr[-2000:]}")
    return run.stdout.splitlines()[-1]


def collected_ids(path: pathlib.Path) -> list[str]:
    """The ids pytest collects from the test file ``path``: for a file of these suites, read from
    :func:`collection`; another (a test's stand-in) is collected in a process of its own."""
    if path.resolve().is_relative_to(SUITES):
        prefix = path.resolve().relative_to(SUITES.parent).as_posix() + "::"
        return [nodeid for nodeid in collection()[0] if nodeid.startswith(prefix)]
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          str(path)], capture_output=True, text=True, cwd=REPO, env=nested_pytest_environment())
    return [line.strip() for line in run.stdout.splitlines() if "::" in line]


def entry_findings(entry) -> list[str]:
    """Reference, cells, strategy and a suite that drives every cell through the battery (the files
    ``entry.files`` names: an op's second kernel, ``rms_norm_gated_cute.py``, has its own suite)."""
    findings = []
    if not entry.cells:
        findings.append(f"{entry.name}: declares no cells")
    if not pathlib.Path(entry.reference_file).is_relative_to(REPO / "references"):
        findings.append(f"{entry.name}: its reference {entry.reference_file} is not under references/")
    try:
        missing = [name for name in STRATEGY_FUNCTIONS if not callable(getattr(entry.strategy_module, name, None))]
        if missing:
            findings.append(f"{entry.name}: its strategy module {entry.strategy_module_name} lacks {', '.join(missing)}")
    except ImportError as error:
        findings.append(f"{entry.name}: no strategy module {entry.strategy_module_name} ({error})")
    suite = entry.files.suite
    if not suite.exists():
        return findings + [f"{entry.name}: no suite {suite.relative_to(REPO)}"]
    ids = collected_ids(suite)
    for cell in entry.cells:
        if not any(f"test_cell[{cell.id}]" in nodeid for nodeid in ids):
            findings.append(f"{entry.name}: {suite.relative_to(REPO)} does not drive cell {cell.id} (no test_cell[{cell.id}])")
    return findings


def certificate_findings(entry) -> list[str]:
    """Every certificate section present must be fresh (its code unchanged since it was earned)."""
    try:
        certificate = certificates.load(entry)
    except certificates.CertificateError as error:
        return [f"{entry.name}: {error}"]
    findings = []
    for arch_name in certificate["archs"]:
        arch = Arch(arch_name)
        if certificates.arch_status(entry, arch, certificate) == "stale":
            findings.append(f"{entry.name}: the {arch.value} certificate is stale (the code of its kernel, reference or "
                            f"a module they use changed since it was earned); re-certify: {certificates.recertify_command(entry, arch)}")
    return findings
