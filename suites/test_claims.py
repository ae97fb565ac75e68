"""Claims gates (no GPU needed): entries backed by suites, certificates fresh, test lists complete,
README's quick start is what CI runs.  Each gate also meets a broken input it must reject."""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from ops import certificates
from ops.catalog import Arch, entries, kernels
from suites import claims
from suites.claims import REPO, certificate_findings, collection, entry_findings
from tools import check_test_lists

pytestmark = pytest.mark.cpu
# every kernel of every op, named by its module (greedy_argmax, rms_norm_gated, rms_norm_gated_cute)
KERNELS = [pytest.param(entry, id=pathlib.Path(entry.kernel_file).stem)
           for name in entries() for entry in kernels(name)]


@pytest.fixture(autouse=True, scope="module")
def _one_collection_a_run(tmp_path_factory):
    """xdist's workers of this run read the collection of suites/ the first of them makes."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        claims.share_collection_in(tmp_path_factory.getbasetemp().parent)


def test_the_first_process_of_a_run_makes_the_collection_and_the_others_read_it(tmp_path, monkeypatch):
    made = []

    def collect():
        made.append(True)
        return json.dumps({"tests": {"suites/test_made.py::test_it": ["cpu"]}, "errors": []})

    monkeypatch.setattr(claims, "_collected", collect)
    monkeypatch.setattr(claims, "_shared_folder", [tmp_path])
    first, second = collection.__wrapped__(), collection.__wrapped__()
    assert first == second == ({"suites/test_made.py::test_it": {"cpu"}}, []) and len(made) == 1
    monkeypatch.setattr(claims, "_shared_folder", [])   # the control: unshared, each call makes its own
    collection.__wrapped__()
    assert len(made) == 2


@pytest.mark.parametrize("entry", KERNELS)
def test_entry_has_reference_cells_strategy_and_a_suite_driving_every_cell(entry):
    assert entry_findings(entry) == []


@pytest.mark.parametrize("entry", KERNELS)
def test_certificates_are_fresh(entry):
    assert certificate_findings(entry) == []


def test_a_changed_kernel_makes_its_certificate_stale(tmp_path):
    entry = entries()["greedy_argmax"]
    kernel_copy = tmp_path / "greedy_argmax.py"
    shutil.copy(entry.kernel_file, kernel_copy)
    copy = dataclasses.replace(entry)
    copy.__class__ = type("CopiedEntry", (type(entry),), {"kernel_file": property(lambda self: str(kernel_copy))})
    certificates.write_section(copy, Arch.CPU_INTERP, {"source_sha256": certificates.source_digest(copy), "cells": {}})
    assert certificate_findings(copy) == []
    kernel_copy.write_text(kernel_copy.read_text() + "\nAN_EDIT = 1\n")  # a comment would not do (code digest)
    findings = certificate_findings(copy)
    assert len(findings) == 1 and "stale" in findings[0] and "tools/certify-cells --op greedy_argmax" in findings[0]


def test_a_digest_follows_a_triton_kernel_to_the_module_it_was_written_in(monkeypatch):
    """Under the interpreter a kernel's wrapper says it comes from Triton, on a GPU from its own module:
    the digest followed the wrapper, so the sm90 certificate of a kernel calling another module's
    @triton.jit helpers was stale on every CPU (rms_norm_gated, H200 run of 2026-11-30)."""
    import types

    from ops import triton_backend

    wrapper = type("InterpretedFunction", (), {"__module__": "triton.runtime.interpreter"})()
    wrapper.fn = triton_backend.interpreting
    kernel = types.ModuleType("ops.digest_probe")
    kernel.helper = wrapper
    monkeypatch.setitem(sys.modules, "ops.digest_probe", kernel)
    assert certificates.modules_used({"ops.digest_probe"}, ("ops.",)) >= {"ops.triton_backend"}
    wrapper.fn = None  # an object with a plain attribute called fn is taken for itself
    assert "ops.triton_backend" not in certificates.modules_used({"ops.digest_probe"}, ("ops.",))


def test_a_suite_missing_a_cell_is_a_finding(tmp_path, monkeypatch):
    entry = entries()["greedy_argmax"]
    suite = tmp_path / "suites" / "sampling" / "test_greedy_argmax.py"
    suite.parent.mkdir(parents=True)
    suite.write_text("import pytest\npytestmark = pytest.mark.cpu\n"
                     "@pytest.mark.parametrize('cell', ['decode_small_batch'])\ndef test_cell(cell):\n    pass\n")
    monkeypatch.setattr("suites.claims.REPO", tmp_path)
    copy = dataclasses.replace(entry)
    copy.__class__ = type("SuiteElsewhere", (type(entry),),
                          {"files": property(lambda self: dataclasses.replace(entry.files, suite=suite))})
    findings = entry_findings(copy)
    assert any("does not drive cell empty_batch" in f for f in findings), findings


def _check_lists(monkeypatch, capsys, *paths) -> tuple[int, list[str]]:
    """``tools/check-test-lists --json PATHS`` (its main, here) on the collection of suites/ it makes, made once
    per process in a fresh interpreter (suites/claims.py: the entry checks above read the same one)."""
    monkeypatch.setattr(check_test_lists, "collect_tests", collection)
    status = check_test_lists.main(["--json", *map(str, paths)])
    return status, json.loads(capsys.readouterr().out)["findings"]


def test_test_lists_pass_check_test_lists(monkeypatch, capsys):
    status, findings = _check_lists(monkeypatch, capsys)
    assert status == 0, findings


def test_an_unlisted_test_and_a_stale_id_fail_check_test_lists(tmp_path, monkeypatch, capsys):
    partial = tmp_path / "l0_partial.yml"
    partial.write_text("version: 0.0.1\nl0_partial:\n- condition:\n    terms: {stage: pre_merge, arch: cpu}\n"
                       "  tests:\n  - suites/test_claims.py\n  - suites/no_such_test.py\n  - suites/test_claims.py\n")
    status, findings = _check_lists(monkeypatch, capsys, partial)
    assert status == 1
    assert any(f.startswith("unlisted: suites/oracles/") for f in findings)
    assert any(f.startswith("stale: l0_partial.yml:7") for f in findings)
    assert any(f.startswith("duplicate: l0_partial.yml:8") for f in findings)


def test_a_cpu_test_listed_for_a_gpu_alone_fails_check_test_lists(tmp_path, monkeypatch, capsys):
    """A test that claims cpu and sm90, its id taken out of the cpu list while the H200's list still selects its
    file, never runs in CPU CI: a finding, though a list of an arch it claims selects it."""
    node = "suites/gemm/test_nvfp4_gemv.py::test_arithmetic_decode_is_exact_for_every_byte_and_scale"
    cpu = (REPO / "test_lists" / "l0_cpu.yml").read_text()
    assert f"  - {node}\n" in cpu
    (tmp_path / "l0_cpu.yml").write_text(cpu.replace(f"  - {node}\n", ""))
    others = [path for path in sorted((REPO / "test_lists").glob("*.yml")) if path.name != "l0_cpu.yml"]
    status, findings = _check_lists(monkeypatch, capsys, *others, tmp_path / "l0_cpu.yml")
    assert status == 1
    missed = [f for f in findings if f.startswith("not in CPU CI: ")]
    assert missed and all(f.startswith(f"not in CPU CI: {node}[") and "claims cpu, only lists of " in f
                          and "sm90" in f for f in missed), findings
    assert not any(f.startswith("unlisted: ") for f in findings), findings


def test_a_malformed_list_names_its_line(tmp_path):
    bad = tmp_path / "l0_bad.yml"
    bad.write_text("version: 0.0.1\nl0_bad:\n- condition:\n    terms: {stage: pre_merge, arch: sm42}\n  tests: []\n")
    run = subprocess.run([sys.executable, "tools/check-test-lists", "--json", str(bad)], capture_output=True, text=True,
                         cwd=REPO)
    # a list that does not meet the schema is bad input: exit 2, one line naming file:line (not a finding)
    assert run.returncode == 2 and "l0_bad.yml:3" in run.stderr and "sm42" in run.stderr


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    command = next(line.strip() for line in ci.splitlines() if line.strip().startswith("python -m pytest"))
    assert command in readme, f"README.md does not show the test command CI runs: {command}"
