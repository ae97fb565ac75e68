"""tools/gate on a copy of this repository under git: which ops a change touches, which tests it runs,
which certificates it made stale — and the findings it must not miss."""
from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from ops import certificates
from ops.catalog import Arch, entries, kernels
from suites.claims import REPO
from suites.processes import preloaded_run
from suites.tools.git_copies import committed_copy, git
from tools.engine.test_lists import load_lists

pytestmark = pytest.mark.cpu

@pytest.fixture
def repo(tmp_path) -> pathlib.Path:
    return committed_copy(tmp_path)


def gate(root: pathlib.Path, *words: str) -> subprocess.CompletedProcess:
    """tools/gate WORDS in ``root``, a process of its own that finds torch, Triton and the CuTe DSL imported."""
    return preloaded_run(["tools/gate", *words], root)


def verdict(run: subprocess.CompletedProcess) -> dict:
    assert run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout)


def edit(path: pathlib.Path) -> None:
    """A change of meaning (a comment alone would leave the code digest as it was)."""
    path.write_text(path.read_text() + "\nAN_EDIT = 1\n")


def certify_fresh(root: pathlib.Path, entry, arch: Arch = Arch.SM90) -> None:
    """Make ``entry``'s certificate in the copy hold one section, of ``arch``, fresh on the copy's sources
    (which are byte-identical to this tree's, so this tree's digest is the copy's too), whatever sections
    are committed here (a fresh cpu-interp one would be made stale by the test's edit too)."""
    certificate = root / pathlib.Path(certificates.certificate_path(entry)).relative_to(REPO)
    archs = {arch.value: {"source_sha256": certificates.source_digest(entry), "cells": {}}}
    certificate.write_text(json.dumps({"op": entry.name, "archs": archs}))


def test_a_kernel_change_names_its_op_its_tests_and_the_certificate_it_made_stale(repo):
    entry = entries()["greedy_argmax"]
    certificate = repo / pathlib.Path(certificates.certificate_path(entry)).relative_to(REPO)
    # the copy's sources are byte-identical to this tree's, so this digest is the copy's too
    fresh = {"source_sha256": certificates.source_digest(entry), "cells": {}}
    already_stale = {"source_sha256": "0" * 64, "cells": {}}
    certificate.write_text(json.dumps({"op": "greedy_argmax", "archs": {"cpu-interp": fresh, "sm90": already_stale}}))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "certified")
    git(repo, "checkout", "-q", "-b", "change")
    edit(repo / "ops" / "sampling" / "greedy_argmax.py")
    git(repo, "commit", "-q", "-am", "a kernel change")

    run = gate(repo, "--dry-run", "--json")
    found = verdict(run)
    assert run.returncode == 1
    assert "merge base of HEAD with main" in found["base"]["how"]
    assert found["changed_files"] == ["ops/sampling/greedy_argmax.py"]
    assert list(found["ops"]) == ["greedy_argmax"]
    assert found["ops"]["greedy_argmax"]["changed"] == {"ops/sampling/greedy_argmax.py": "kernel, entry and cells"}
    lists = [REPO / "test_lists" / name for name in ("l0_cpu.yml", "l0_cpu_cells.yml")]
    suite_ids = [test.test_id for test in load_lists(lists)
                 if test.test_id.startswith("suites/sampling/test_greedy_argmax.py::")]
    assert "suites/sampling/test_greedy_argmax.py::test_cell" in suite_ids  # its cells, from the cells list
    assert found["tests"] == {"ids": [*suite_ids, "suites/test_claims.py"], "ran": False}
    stale = {s["arch"]: s for s in found["stale_certificates"] if s["op"] == "greedy_argmax"}
    assert stale["cpu-interp"]["made_stale_by_this_change"] and stale["cpu-interp"]["status_at_base"] == "fresh"
    assert not stale["sm90"]["made_stale_by_this_change"] and stale["sm90"]["status_at_base"] == "stale"
    assert stale["sm90"]["command"] == certificates.recertify_command(entry, Arch.SM90)
    assert any("cpu-interp certificate is stale (made stale by this change)" in f and
               "tools/certify-cells --op greedy_argmax --device cpu" in f for f in found["findings"])


def test_shared_modules_strategies_and_uncommitted_files_select_their_ops(repo):
    for name in ("rollback_restore", "rollback_save"):
        certify_fresh(repo, entries()[name])
    git(repo, "commit", "-q", "-am", "certified")
    edit(repo / "ops" / "attention" / "rollback_save.py")             # rollback_restore runs this kernel too
    edit(repo / "references" / "speculative" / "strict_accept_strategy.py")
    edit(repo / "README.md")                                           # touches no op
    (repo / "suites" / "sampling" / "greedy_argmax_impls.py").unlink()  # a removed file is a change too
    found = verdict(gate(repo, "--base", "HEAD", "--dry-run", "--json"))
    assert found["base"]["how"] == "--base HEAD"
    assert sorted(found["ops"]) == ["greedy_argmax", "rollback_restore", "rollback_save", "strict_accept"]
    assert found["ops"]["rollback_restore"]["changed"] == {
        "ops/attention/rollback_save.py": "a module its kernel or reference uses"}
    assert found["ops"]["strict_accept"]["changed"] == {"references/speculative/strict_accept_strategy.py": "strategy"}
    assert found["ops"]["greedy_argmax"]["changed"] == {
        "suites/sampling/greedy_argmax_impls.py": "alternative implementations"}
    assert found["tests"]["ids"][-1] == "suites/test_claims.py"
    # the kernel edit makes the committed sm90 certificates of both ops that run it stale
    assert found["verdict"] == "fail"
    made_stale = [f for f in found["findings"] if "made stale by this change" in f]
    assert [finding.split(":")[0] for finding in made_stale] == ["rollback_restore", "rollback_save"]
    assert all("sm90 certificate is stale (made stale by this change)" in f for f in made_stale)


def test_each_kernel_of_an_op_is_judged_on_its_own_certificate(repo, tmp_path):
    triton, cute = sorted(kernels("rms_norm_gated"), key=lambda entry: entry.backend, reverse=True)
    assert (triton.backend, cute.backend) == ("triton", "cute")
    for entry in (triton, cute):
        certify_fresh(repo, entry)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "both kernels certified")
    edit(repo / "ops" / "norm" / "rms_norm_gated_cute.py")
    junit = tmp_path / "gate.xml"
    found = verdict(gate(repo, "--base", "HEAD", "--dry-run", "--json", "--junit", str(junit)))
    assert found["ops"] == {"rms_norm_gated [cute]": {
        "changed": {"ops/norm/rms_norm_gated_cute.py": "kernel, entry and cells"},
        "tests": found["ops"]["rms_norm_gated [cute]"]["tests"]}}
    # the cute kernel's own suite (its launch-plan tests on the CPU), not the Triton kernel's
    assert found["ops"]["rms_norm_gated [cute]"]["tests"][0].startswith("suites/norm/test_rms_norm_gated_cute.py")
    made_stale = [s for s in found["stale_certificates"] if s["made_stale_by_this_change"]]
    assert [(s["op"], s["arch"]) for s in made_stale] == [("rms_norm_gated [cute]", "sm90")]
    assert "--op rms_norm_gated --device cuda --backend cute" in made_stale[0]["command"]
    # negative control: the Triton kernel's certificate, on sources this change did not touch, stays fresh
    assert not any(s["op"].startswith("rms_norm_gated [triton]") for s in found["stale_certificates"])
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    assert cases["rms_norm_gated [cute][sm90]"].find("failure") is not None
    assert cases["rms_norm_gated [triton][sm90]"].find("failure") is None
    assert found["unavailable_kernels"] == []


def gate_without_cutlass(root: pathlib.Path, *words: str) -> subprocess.CompletedProcess:
    """tools/gate --base HEAD --dry-run --json in a process where importing cutlass fails, as where
    nvidia-cutlass-dsl is not installed (its .pth puts it ahead of PYTHONPATH: it cannot be shadowed there)."""
    argv = ["tools/gate", "--base", "HEAD", "--dry-run", "--json", *words]
    script = f"import runpy, sys; sys.modules['cutlass'] = None; sys.argv = {argv!r}; runpy.run_path('tools/gate', run_name='__main__')"
    return preloaded_run(["-c", script], root)


def test_a_kernel_whose_backend_is_missing_here_is_shown_not_judged_and_its_change_is_a_finding(repo, tmp_path):
    certify_fresh(repo, kernels("rms_norm_gated")[0])  # the cute kernel's
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "cute kernel certified")
    run = gate_without_cutlass(repo, "--junit", str(tmp_path / "gate.xml"))
    found = verdict(run)
    assert [(k["module"], k["kernel_file"], k["certificate_archs"]) for k in found["unavailable_kernels"]] == \
        [("ops.norm.rms_norm_gated_cute", "ops/norm/rms_norm_gated_cute.py", ["sm90"])]
    assert "nvidia-cutlass-dsl is not installed" in found["unavailable_kernels"][0]["why"]
    skipped = {case.get("name"): case.find("skipped") for case in ET.parse(tmp_path / "gate.xml").getroot().iter("testcase")}
    assert "nvidia-cutlass-dsl is not installed" in skipped["ops.norm.rms_norm_gated_cute[sm90]"].get("message")
    assert not any("rms_norm_gated_cute" in f for f in found["findings"])   # unchanged: listed, not a finding
    edit(repo / "ops" / "norm" / "rms_norm_gated_cute.py")
    found = verdict(gate_without_cutlass(repo))
    assert found["verdict"] == "fail"
    assert "ops/norm/rms_norm_gated_cute.py changed, but this machine cannot judge it: nvidia-cutlass-dsl is not " \
           "installed" in "\n".join(found["findings"])


def test_on_main_an_uncommitted_edit_is_judged_against_head_and_a_clean_tree_against_the_last_commit(repo):
    """A fresh clone is on main: one uncommitted kernel edit is the change (not upstream's last commit, which
    touched every op); with a clean tree the last commit is judged, as CI does after a merge."""
    edit(repo / "README.md")  # upstream's last commit: touches no op
    git(repo, "commit", "-q", "-am", "upstream")
    edit(repo / "ops" / "sampling" / "greedy_argmax.py")
    run = gate(repo, "--dry-run")
    head = git(repo, "rev-parse", "HEAD").strip()
    assert f"gate: base {head[:12]}, HEAD (HEAD is on main, and the working tree has uncommitted changes" in run.stdout
    found = verdict(gate(repo, "--dry-run", "--json"))
    assert found["base"]["commit"] == head and found["changed_files"] == ["ops/sampling/greedy_argmax.py"]

    git(repo, "commit", "-q", "-am", "the kernel edit")
    found = verdict(gate(repo, "--dry-run", "--json"))
    assert found["base"]["commit"] == head  # now HEAD~1
    assert found["base"]["how"].startswith("HEAD~1 (HEAD is on main, and the working tree is clean")
    assert found["changed_files"] == ["ops/sampling/greedy_argmax.py"]

    git(repo, "checkout", "-q", "-b", "topic")
    edit(repo / "README.md")
    git(repo, "commit", "-q", "-am", "a branch's commit")
    edit(repo / "references" / "speculative" / "strict_accept_strategy.py")  # and an uncommitted edit
    found = verdict(gate(repo, "--dry-run", "--json"))
    assert found["base"]["how"].startswith("the merge base of HEAD with main")
    assert found["changed_files"] == ["README.md", "references/speculative/strict_accept_strategy.py"]


def test_no_change_in_a_clone_without_history_passes_and_runs_nothing(repo):
    run = gate(repo)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "HEAD (no parent commit here" in run.stdout
    assert "no change against the base: no test to run" in run.stdout and "gate: PASS" in run.stdout


def test_the_tests_it_runs_are_reported_and_a_failure_is_a_finding(repo, tmp_path):
    suite = repo / "suites" / "sampling" / "test_greedy_argmax.py"
    suite.write_text(suite.read_text() + "\n\ndef test_gate_control_passes():\n    pass\n\n\n"
                     "def test_gate_control_fails():\n    assert False, 'the gate must report this'\n")
    listed = repo / "test_lists" / "l0_cpu.yml"
    listed.write_text(listed.read_text() + "".join(
        f"- condition: {{terms: {{stage: pre_merge, arch: cpu}}}}\n"
        f"  tests:\n  - suites/sampling/test_greedy_argmax.py::{name}\n"
        for name in ("test_gate_control_passes", "test_gate_control_fails")))
    junit = tmp_path / "gate.xml"
    run = gate(repo, "--base", "HEAD", "--json", "--junit", str(junit), "--", "-k", "gate_control")
    found = verdict(run)
    assert run.returncode == 1
    assert found["tests"]["ran"] and found["tests"]["returncode"] == 1
    assert found["tests"]["failed"] == ["suites.sampling.test_greedy_argmax::test_gate_control_fails"]
    assert "-k gate_control" in found["tests"]["command"]
    assert "tests failed (pytest exit 1)" in found["findings"][0]
    suites = {suite.get("name"): suite for suite in ET.parse(junit).getroot().iter("testsuite")}
    assert set(suites) == {"gate.certificates", "pytest"}
    cases = {case.get("name"): case for case in suites["pytest"].iter("testcase")}
    assert set(cases) == {"test_gate_control_passes", "test_gate_control_fails"}
    assert cases["test_gate_control_fails"].find("failure") is not None
    assert cases["test_gate_control_passes"].find("failure") is None


@pytest.mark.parametrize("words, reason", [
    (("--base", "no_such_revision"), "--base: unknown revision 'no_such_revision'"),
    (("--workers", "-1"), "--workers: -1 is negative"),
    (("--ab-max-examples", "2"), "--ab-max-examples: 2 needs --bitwise-ab and is at least 0"),
    (("--bitwise-ab", "--ab-max-examples", "-1"), "--ab-max-examples: -1 needs --bitwise-ab and is at least 0"),
])
def test_usage_errors_exit_2_in_one_line(repo, words, reason):
    run = gate(repo, *words)
    assert run.returncode == 2 and run.stderr.strip() == f"error: {reason}", run.stderr


def test_outside_a_git_checkout_is_a_usage_error(repo):
    shutil.rmtree(repo / ".git")
    run = gate(repo)
    assert run.returncode == 2 and "is not a git checkout" in run.stderr and len(run.stderr.splitlines()) == 1


@pytest.mark.parametrize("text", ["", "{not json", '{"schema": 99, "archs": {}}'])
def test_a_corrupt_certificate_stops_the_gate_in_one_line(repo, text):
    """An empty file is what a kill mid-write left before writes were atomic."""
    (repo / "ops" / "sampling" / "greedy_argmax.cert.json").write_text(text)
    run = gate(repo, "--dry-run")
    assert run.returncode == 2 and "greedy_argmax.cert.json" in run.stderr, run.stdout + run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_a_report_that_is_not_the_one_a_section_names_is_a_finding(repo):
    entry = entries()["greedy_argmax"]
    certificate = repo / pathlib.Path(certificates.certificate_path(entry)).relative_to(REPO)
    report = repo / pathlib.Path(certificates.report_path(entry, Arch.SM90)).relative_to(REPO)
    text = json.dumps({"results": []}) + "\n"
    report.write_text(text)
    section = {"source_sha256": certificates.source_digest(entry), "versions": {}, "cells": {},
               "max_examples": certificates.POLICY.examples_on(Arch.SM90), "report_sha256": certificates.report_digest(text)}
    certificate.write_text(json.dumps({"schema": 2, "op": entry.name, "archs": {"sm90": section}}))
    found = verdict(gate(repo, "--base", "HEAD", "--dry-run", "--json"))
    assert not any("greedy_argmax: the sm90 certificate" in f for f in found["findings"]), found["findings"]
    assert any("sections earned under torch None" in line and "greedy_argmax[sm90]" in line
               for line in found["toolchains"]), found["toolchains"]
    report.write_text(text.replace("[]", "[1]"))
    found = verdict(gate(repo, "--base", "HEAD", "--dry-run", "--json"))
    assert any("greedy_argmax: the sm90 certificate: its report" in f and "sha256 differs" in f
               for f in found["findings"]), found["findings"]



def test_a_cell_certified_on_fewer_judged_examples_than_the_policy_asks_is_a_finding(repo):
    """A section drawn at the policy's depth whose cell judged fewer (the rest refused clearly, as a strategy
    that draws layouts the kernel refuses makes it) is not certified there: dispatch does not route that
    cell, so the gate must not pass it as fresh (2026-12-07e: nvfp4_gemv's cells at 163 of 232 drawn)."""
    entry = entries()["greedy_argmax"]
    certificate = repo / pathlib.Path(certificates.certificate_path(entry)).relative_to(REPO)
    committed = json.loads(certificate.read_text())
    section = committed["archs"]["sm90"]
    cell_id, record = next(iter(section["cells"].items()))
    least = certificates.POLICY.examples_on(Arch.SM90)
    assert certificates.arch_status(entry, Arch.SM90, committed) == "fresh" and record["examples"] >= least
    found = verdict(gate(repo, "--base", "HEAD", "--dry-run", "--json"))
    assert not any("greedy_argmax: the sm90 certificate" in f for f in found["findings"]), found["findings"]
    record["examples"], record["refused_examples"] = least - 1, record.get("refused_examples", 0) + 1
    certificate.write_text(json.dumps(committed))
    found = verdict(gate(repo, "--base", "HEAD", "--dry-run", "--json"))
    assert any(f"greedy_argmax: the sm90 certificate's cell {cell_id}, recorded as certified: certified on "
               f"{least - 1} examples, the policy asks {least}" in f for f in found["findings"]), found["findings"]
    assert found["verdict"] != "PASS"
