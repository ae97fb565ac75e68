"""tools/gate: the CI gate on every kernel change.

From the git diff against a base revision it finds the kernels whose kernel module, reference (or a module of
``ops/`` or ``references/`` they use), entry and cells (in the kernel module), strategy, suite,
alternative implementations, or the test machinery their suite imports (``oracles/``, ``suites/``,
``tools/``) changed; runs those ops' CPU tests — the ids of ``test_lists/l0_cpu.yml`` and
``l0_cpu_cells.yml`` in their suite files — and the claims gates (``suites/test_claims.py``); and lists
every certificate section that is stale now, saying whether this change made it stale (fresh at the
base, judged on the sources as they were there), with the command that re-certifies it on its
architecture.

Every kernel of an op is judged on its own (an op may have a Triton and a CuTe DSL kernel, each with its
certificate): it is named ``op [backend]`` where its op has several kernels, the op's name alone where it
has one. A kernel module the catalog leaves out on this machine (its backend's package is missing,
``catalog.UNAVAILABLE``) cannot be judged here: it is listed (``unavailable_kernels``; each section of its
certificate a skipped JUnit testcase), and a change to that module is a finding, since nothing here
checked it.

The base revision (``--base REV``; by default the first that applies, printed with its reason):

1. on a branch (HEAD is not on ``main``, else ``origin/main``): the merge base of HEAD with it — a branch is
   judged on everything it changed since it left main, its uncommitted changes included;
2. on main with uncommitted changes (tracked edits, or untracked files that are not ignored): ``HEAD`` —
   a kernel engineer's edit in a fresh clone is judged on that edit alone, not on upstream's last commit;
3. on main with a clean tree: ``HEAD~1`` — the last commit is judged (what CI does after a merge);
4. ``HEAD`` when HEAD has no parent here (a shallow or single-commit clone): only uncommitted changes.

The diff is the working tree against the base: uncommitted and untracked (not ignored) files count.
When nothing changed, no test runs; stale certificates are findings all the same, and so is a fresh
section below ``ops.certificates.POLICY``: drawn too few examples a cell, or a cell recorded as certified on
fewer judged examples than the policy asks (dispatch does not route such a cell).

``--bitwise-ab`` is for a change declared performance-only: each kernel it touches is run at the base and
in the working tree on the same drawn inputs (``tools/ab``) and must be bitwise identical; a difference, or
a kernel with nothing to compare at the base, is a finding.

Exit status: 0 clean; 1 a finding (a failed test, a stale certificate or one below the policy, a catalog
that does not import); 2 a usage error (an unknown revision, not a git checkout, a tree holding bytecode that is not
its source's: ``tools/engine/bytecode.py``), in one line.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

from tools import imports
from tools.engine import bytecode, junit
from tools.cli import ArgumentParser, UsageError, run_tool

# ops (torch) is imported in the functions that use it: --help and usage errors need no torch, and a catalog
# that does not import is a finding of the gate, not a traceback.

REPO = pathlib.Path(__file__).resolve().parent.parent
# the CPU tests, and the CPU judgement of every cell (the pytest face of tools/certify-cells)
CPU_LISTS = (REPO / "test_lists" / "l0_cpu.yml", REPO / "test_lists" / "l0_cpu_cells.yml")
CLAIMS_GATES = "suites/test_claims.py"
MAIN_REFS = ("main", "origin/main")


def parse_args(argv):
    parser = ArgumentParser(
        prog="tools/gate",
        description="Run the CPU tests of the ops a change touches, the claims gates, and list the certificates "
                    "it made stale.",
        epilog="Base revision by default (printed with its reason): on a branch, its merge base with main; on "
               "main, HEAD when the tree has uncommitted changes, else HEAD~1 (the last commit); HEAD in a clone "
               "without a parent commit. Arguments after -- go to pytest, e.g. tools/gate -- -x")
    parser.add_argument("--base", metavar="REV", help="judge the change from REV to the working tree")
    parser.add_argument("-n", "--workers", type=int, default=0, metavar="N",
                        help="pytest-xdist workers for the tests (default 0: in this process)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the changed ops and the tests they need without running them "
                             "(certificates are still checked)")
    parser.add_argument("--bitwise-ab", action="store_true",
                        help="a change declared performance-only: every kernel it touches must be bitwise identical "
                             "to the base's on the same drawn inputs (tools/ab, on the CPU interpreter; run by "
                             "--dry-run too)")
    parser.add_argument("--ab-max-examples", type=int, metavar="N",
                        help="--bitwise-ab: draws per cell besides its corners (default: tools/ab's)")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout")
    parser.add_argument("--junit", metavar="PATH",
                        help="write JUnit XML: the tests pytest ran, and one testcase per certificate section")
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed on to pytest")
    args = parser.parse_args(argv)
    if args.workers < 0:
        raise UsageError(f"--workers: {args.workers} is negative")
    if args.ab_max_examples is not None and (args.ab_max_examples < 0 or not args.bitwise_ab):
        raise UsageError(f"--ab-max-examples: {args.ab_max_examples} needs --bitwise-ab and is at least 0")
    return args


# -- git ----------------------------------------------------------------------------------------------
def git(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *words], cwd=REPO, capture_output=True)


def commit_of(rev: str) -> str | None:
    run = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return run.stdout.decode().strip() if run.returncode == 0 else None


@dataclasses.dataclass
class Base:
    commit: str
    how: str  # why this revision, in words


def resolve_base(requested: str | None) -> Base:
    if git("rev-parse", "--is-inside-work-tree").returncode != 0:
        raise UsageError(f"{REPO} is not a git checkout: the gate judges a change, and needs its history")
    head = commit_of("HEAD")
    if head is None:
        raise UsageError("HEAD names no commit yet: commit something, or pass --base")
    if requested is not None:
        commit = commit_of(requested)
        if commit is None:
            raise UsageError(f"--base: unknown revision {requested!r}")
        return Base(commit, f"--base {requested}")
    for ref in MAIN_REFS:
        main = commit_of(ref)
        run = git("merge-base", "HEAD", main) if main else None
        if run is None or run.returncode != 0:
            continue  # no such ref, or a shallow clone that lacks the common history
        merge_base = run.stdout.decode().strip()
        if merge_base != head:
            return Base(merge_base, f"the merge base of HEAD with {ref} (a branch: everything it changed since it "
                                    f"left {ref}, uncommitted changes included)")
        where = f"HEAD is on {ref}"
        break
    else:
        where = "no merge base with main here"
    if uncommitted_changes():
        return Base(head, f"HEAD ({where}, and the working tree has uncommitted changes: they are the change)")
    parent = commit_of("HEAD~1")
    if parent:
        return Base(parent, f"HEAD~1 ({where}, and the working tree is clean: the last commit is judged)")
    return Base(head, "HEAD (no parent commit here, a shallow or single-commit clone: only uncommitted "
                      "changes are judged)")


def uncommitted_changes() -> bool:
    """Whether the working tree differs from HEAD: tracked edits, or untracked files git does not ignore."""
    run = git("status", "--porcelain", "--untracked-files=normal")
    if run.returncode != 0:
        raise UsageError(f"git status: {run.stderr.decode().strip().splitlines()[-1]}")
    return bool(run.stdout.strip())


def changed_files(base: Base) -> list[str]:
    """Paths (relative to the repo) that differ between the base and the working tree."""
    tracked = git("diff", "--name-only", "--no-renames", "--relative", base.commit, "--")
    untracked = git("ls-files", "--others", "--exclude-standard")
    for run in (tracked, untracked):
        if run.returncode != 0:
            raise UsageError(f"git: {run.stderr.decode().strip().splitlines()[-1]}")
    return sorted({line for run in (tracked, untracked) for line in run.stdout.decode().splitlines() if line})


def read_at(base: Base, path: pathlib.Path) -> bytes:
    """A file as it was at the base; FileNotFoundError when it did not exist there."""
    found = _blob_at(base.commit, relative(path))
    if found is None:
        raise FileNotFoundError(relative(path))
    return found


@functools.lru_cache(maxsize=None)
def _blob_at(commit: str, path: str) -> bytes | None:
    """``git show COMMIT:./PATH`` once per file (the ops' digests share most of their modules), None where
    the file did not exist."""
    run = git("show", f"{commit}:./{path}")
    return run.stdout if run.returncode == 0 else None


def relative(path) -> str:
    return pathlib.Path(os.path.relpath(path, REPO)).as_posix()


# -- which ops a change touches ---------------------------------------------------------------------
def op_files(entry, graph: dict[str, set[str]]) -> dict[str, str]:
    """Every file whose change touches ``entry``, relative to the repo -> its role for the op; ``graph``:
    the project's import graph (``tools.imports.import_graph``), read from the sources, not imported."""
    from ops import certificates

    found = entry.files
    files = {relative(found.kernel): "kernel, entry and cells", relative(found.reference): "reference"}
    for path in certificates.used_sources(entry):
        files.setdefault(relative(path), "a module its kernel or reference uses")
    roles = (("strategy", found.strategy), ("suite", found.suite), ("alternative implementations", found.implementations))
    for role, path in roles:
        files.setdefault(relative(path), role)  # listed even when absent: adding one is a change
    modules = imports.module_files(REPO)
    by_file = {path.resolve(): name for name, path in modules.items()}
    for name in sorted(imports.reachable(graph, [by_file[path.resolve()] for _, path in roles
                                                 if path.resolve() in by_file])):
        files.setdefault(relative(modules[name]), "test machinery its suite uses")
    return files


def listed_cpu_tests(suite_files: set[str]) -> list[str]:
    from tools.engine.test_lists import ListFormatError, load_lists

    try:
        listed = load_lists(CPU_LISTS)
    except ListFormatError as error:  # it names the list's file and line
        raise UsageError(f"test list: {error}") from None
    return list(dict.fromkeys(test.test_id for test in listed if test.test_id.split("::")[0] in suite_files))


# -- certificates -------------------------------------------------------------------------------------
def stale_certificates(entry, base: Base) -> list[dict]:
    """Every arch section of ``entry``'s certificate (one kernel's) that is stale now, with its state at the base.

    At the base, the certificate and the sources are read as they were there (the modules the kernel
    uses are those it uses now)."""
    from ops import certificates
    from ops.catalog import Arch, kernel_label

    now = certificates.load(entry)
    digest_now = certificates.source_digest(entry)
    try:
        path = certificates.certificate_path(entry)
        then = certificates.read_certificate(path, read_at(base, path).decode("utf-8", errors="replace"))
        digest_then = certificates.source_digest(entry, read_bytes=lambda path: read_at(base, path))
    except (FileNotFoundError, SyntaxError, certificates.CertificateError):  # unreadable at the base: unknown there
        then, digest_then = {"archs": {}}, None
    found = []
    for arch_name in now["archs"]:
        arch = Arch(arch_name)
        if certificates.arch_status(entry, arch, now, digest_now) != "stale":
            continue
        status_then = "unknown" if digest_then is None else certificates.arch_status(entry, arch, then, digest_then)
        found.append({"op": kernel_label(entry), "arch": arch.value, "status_at_base": status_then,
                      "made_stale_by_this_change": status_then == "fresh",
                      "command": certificates.recertify_command(entry, arch)})
    return found


def readable_certificates(kernels) -> list[dict]:
    """Every certificate read once before any work (a corrupt one is a usage error naming the file, exit 2);
    returns the kernels the catalog left out here (``catalog.unjudged_kernels``)."""
    if not kernels:
        return []
    from ops import catalog, certificates

    try:
        for entry in kernels:
            certificates.load(entry)
        return catalog.unjudged_kernels()
    except certificates.CertificateError as error:
        raise UsageError(str(error)) from None


def policy_problems(entry) -> list[str]:
    """Findings on ``entry``'s fresh sections: below ``ops.certificates.POLICY`` (the toolchain is not compared
    here, a CPU machine judges sections of every GPU), a committed report that is not the one they name, or a
    cell recorded as certified that the policy does not count as one (dispatch would not route it: examples
    the implementation refused clearly are drawn but not judged, and a cell judged on fewer than the policy
    asks is not certified however many it drew)."""
    from ops import certificates
    from ops.catalog import Arch, kernel_label

    digest, found = certificates.source_digest(entry), []
    for arch_name, section in certificates.load(entry)["archs"].items():
        arch = Arch(arch_name)
        if certificates.arch_status(entry, arch, digest=digest) != "fresh":
            continue  # a stale section is a finding of its own
        again = f"re-certify on that device: {certificates.recertify_command(entry, arch)}"
        problem = certificates.POLICY.section_problem(section, digest, arch=arch) or \
            certificates.report_problem(entry, arch, section)
        if problem:
            found.append(f"{kernel_label(entry)}: the {arch_name} certificate: {problem}; {again}")
            continue
        for cell_id, problem in certificates.POLICY.certified_cells_below(entry, section, arch=arch):
            found.append(f"{kernel_label(entry)}: the {arch_name} certificate's cell {cell_id}, recorded as "
                         f"certified: {problem}; {again}")
    return found


def toolchain_lines(kernels) -> list[str]:
    """The toolchains the certificate sections were earned under, each with the sections earned under it."""
    from ops import certificates
    from ops.catalog import kernel_label

    earned = {}
    for entry in kernels:
        for arch_name, section in certificates.load(entry)["archs"].items():
            versions = section.get("versions") or {}
            key = ", ".join(f"{package} {versions.get(package)}" for package in certificates.TOOLCHAIN_PACKAGES)
            earned.setdefault(key, []).append(f"{kernel_label(entry)}[{arch_name}]")
    return [f"sections earned under {key}: {', '.join(labels)}" for key, labels in sorted(earned.items())]


def certificate_cases(kernels, stale: list[dict], unjudged: list[dict]) -> list:
    """One JUnit testcase per certificate section present now, per kernel: fresh passes, stale fails; a
    section of a kernel the catalog left out here is skipped, saying why."""
    if not kernels:
        return []  # the catalog did not import: that is the finding
    from ops import certificates
    from ops.catalog import kernel_label

    stale_at = {(s["op"], s["arch"]): s for s in stale}
    cases = []
    for entry in kernels:
        for arch_name in certificates.load(entry)["archs"]:
            found = stale_at.get((kernel_label(entry), arch_name))
            failure = None if found is None else (
                f"stale ({'made stale by this change' if found['made_stale_by_this_change'] else 'already stale at the base'})",
                f"re-certify: {found['command']}")
            cases.append(junit.testcase("certificates", f"{kernel_label(entry)}[{arch_name}]", failure=failure))
    for left_out in unjudged:
        for arch_name in left_out["certificate_archs"]:
            cases.append(junit.testcase("certificates", f"{left_out['module']}[{arch_name}]",
                                        skipped=f"not judged on this machine: {left_out['why']}"))
    return cases


# -- bitwise A/B ----------------------------------------------------------------------------------
def bitwise_ab(entries, base: Base, findings: list[str], max_examples: int | None) -> dict:
    """``--bitwise-ab``: each touched kernel against itself at the base (``tools/ab``); a difference, or a
    kernel that cannot be compared (new since the base, not runnable here), is a finding."""
    from ops.catalog import kernel_label
    from tools import ab

    found = {}
    for entry in entries:
        label = kernel_label(entry)
        try:
            found[label] = ab.run(entry.name, base.commit, backend=entry.backend, max_examples=max_examples,
                                  quiet=True)
        except UsageError as error:
            findings.append(f"{label}: no bitwise A/B against the base: {error}")
            continue
        print("\n".join(ab.lines(found[label])), file=sys.stderr, flush=True)  # stdout: the verdict
        kernel = found[label]["kernels"][label]
        if "skipped" in kernel:
            findings.append(f"{label}: no bitwise A/B against the base: {kernel['skipped']}")
        elif found[label]["verdict"] != "bitwise":
            differing = [f"{c['cell']} ({c['differing_inputs']} of {c['inputs']} inputs, at most {c['max_ulp']:g} "
                         f"ULP)" for c in kernel["cells"] if not c["bitwise"]]
            findings.append(f"{label}: not bitwise identical to the base, for a change declared performance-only: "
                            + ", ".join(differing))
    return found


# -- the tests ------------------------------------------------------------------------------------
def run_tests(ids: list[str], args, junit_path: str) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ids]
    if args.workers:
        command += ["-n", str(args.workers)]
    command += args.pytest_args
    shown = "python -m pytest " + shlex.join(command[3:])
    print(f"gate: $ {shown}", file=sys.stderr, flush=True)
    # pytest's report goes to stderr: stdout is the gate's verdict (JSON with --json)
    returncode = subprocess.run([*command, f"--junitxml={junit_path}"], cwd=REPO, stdout=2).returncode
    failed = []
    if os.path.exists(junit_path):
        for suite in junit.read_suites(junit_path):
            failed += [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
                       if case.find("failure") is not None or case.find("error") is not None]
    return {"command": shown, "returncode": returncode, "failed": failed}


def main(argv=None) -> int:
    args = parse_args(argv)
    bytecode.refuse_planted(REPO)
    base = resolve_base(args.base)
    changed = changed_files(base)
    findings = []
    try:
        from ops import catalog

        kernels = catalog.every_kernel()
    except Exception as error:  # noqa: BLE001 - a catalog that does not import is this change's finding
        findings.append(f"the catalog does not import: {type(error).__name__}: {error}")
        kernels = ()
    unjudged = readable_certificates(kernels)
    graph = imports.import_graph(REPO)
    ops, suites = {}, {}  # by kernel: "op", or "op [backend]" for an op of several kernels
    for entry in kernels:
        touched = {path: role for path, role in op_files(entry, graph).items() if path in changed}
        if touched:
            label = catalog.kernel_label(entry)
            suite = relative(entry.files.suite)
            ops[label] = {"changed": touched, "tests": listed_cpu_tests({suite})}
            suites[label] = suite
    touched_kernels = [entry for entry in kernels if catalog.kernel_label(entry) in ops]
    ab_results = bitwise_ab(touched_kernels, base, findings, args.ab_max_examples) if args.bitwise_ab else {}
    ids = list(dict.fromkeys(test for op in ops.values() for test in op["tests"]))
    if changed:
        ids.append(CLAIMS_GATES)
    stale = [found for entry in kernels for found in stale_certificates(entry, base)]
    findings += [problem for entry in kernels for problem in policy_problems(entry)]
    for left_out in unjudged:
        if left_out["kernel_file"] in changed:
            findings.append(f"{left_out['kernel_file']} changed, but this machine cannot judge it: {left_out['why']}")

    if not args.json:
        print(f"gate: base {base.commit[:12]}, {base.how}; {len(changed)} changed files")
        for name, op in ops.items():
            print(f"  {name}: " + ", ".join(f"{path} ({role})" for path, role in op["changed"].items()))
            if not op["tests"]:
                print(f"  {name}: no test of {suites[name]} is listed in "
                      f"{' or '.join(relative(path) for path in CPU_LISTS)}")
        for left_out in unjudged:
            print(f"gate: {left_out['module']} not judged here (certificate sections: "
                  f"{', '.join(left_out['certificate_archs']) or 'none'}): {left_out['why']}")
        if not changed:
            print("gate: no change against the base: no test to run")
        for line in toolchain_lines(kernels):
            print(f"gate: {line}")

    tests = {"ids": ids, "ran": False}
    with tempfile.TemporaryDirectory() as scratch:
        pytest_junit = os.path.join(scratch, "pytest.xml")
        if ids and args.dry_run:
            if not args.json:
                print("gate: would run: python -m pytest " + shlex.join(ids))
        elif ids:
            tests = {**tests, "ran": True, **run_tests(ids, args, pytest_junit)}
            if tests["returncode"] != 0:
                findings.append(f"tests failed (pytest exit {tests['returncode']}): "
                                + (", ".join(tests["failed"]) or "see pytest's report above"))
        for found in stale:
            why = "made stale by this change" if found["made_stale_by_this_change"] else \
                f"{found['status_at_base']} at the base"
            findings.append(f"{found['op']}: the {found['arch']} certificate is stale ({why}); "
                            f"re-certify on that device: {found['command']}")
        if args.junit:
            suites = [junit.testsuite("gate.certificates", certificate_cases(kernels, stale, unjudged))]
            if not kernels:
                suites.append(junit.testsuite("gate.catalog", [junit.testcase("catalog", "imports",
                                                                              failure=(findings[0], findings[0]))]))
            if tests["ran"] and os.path.exists(pytest_junit):
                suites += junit.read_suites(pytest_junit)
            junit.write(args.junit, suites)

    verdict = "fail" if findings else "pass"
    if args.json:
        print(json.dumps({"base": dataclasses.asdict(base), "changed_files": changed, "ops": ops, "bitwise_ab": ab_results,
                          "tests": tests, "toolchains": toolchain_lines(kernels),
                          "stale_certificates": stale, "unavailable_kernels": unjudged, "findings": findings, "verdict": verdict}, indent=2))
    else:
        for finding in findings:
            print(f"FINDING: {finding}")
        print(f"gate: {verdict.upper()}" + (f" ({len(findings)} findings)" if findings else ""))
    return 1 if findings else 0


if __name__ == "__main__":
    run_tool(main)
