"""Certificates (issue 16.4, 17.3): atomic and locked writes, corrupt files read as "not certified", one
certification policy, the run's report beside the certificate, and a code digest keyed to meaning."""
from __future__ import annotations

import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import tokenize
import warnings

import pytest
import torch

from ops import certificates
from ops.catalog import FALLBACKS, Arch, op
from suites.certification import routable_section, write_routable
from suites.claims import REPO

pytestmark = pytest.mark.cpu
ENTRY = op("greedy_argmax")
CELL = "decode_small_batch"


@pytest.fixture
def certificate(tmp_path, monkeypatch) -> pathlib.Path:
    """The entry's certificate and reports, moved to a temporary folder for the test."""
    path = tmp_path / "greedy_argmax.cert.json"
    monkeypatch.setattr(certificates, "certificate_path", lambda entry: path)
    monkeypatch.setattr(certificates, "report_path", lambda entry, arch: tmp_path / f"greedy_argmax.{arch.value}.report.json")
    certificates.forget_cached()
    FALLBACKS.clear()
    yield path
    certificates.forget_cached()


def _routes() -> bool:
    FALLBACKS.clear()
    ENTRY(torch.randn(2, 300).to(torch.bfloat16))
    return not FALLBACKS


# -- atomic, locked writes -------------------------------------------------------------------------
def test_a_write_killed_before_the_rename_leaves_the_old_certificate_whole(certificate):
    certificates.write_section(ENTRY, Arch.SM90, routable_section(ENTRY, {CELL: {}}))
    before = certificate.read_bytes()
    # a child process writes another section and is killed (SIGKILL) while its new file is not yet renamed
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        from ops import certificates
        from ops.catalog import Arch, op
        certificates.certificate_path = lambda entry: __import__("pathlib").Path({str(certificate)!r})
        def stalled(*args):
            print("writing", flush=True)
            time.sleep(60)
        os.replace = stalled
        certificates.write_section(op("greedy_argmax"), Arch.CPU_INTERP, {{"source_sha256": "x", "cells": {{}}}})
        """)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert certificate.read_bytes() == before
    assert list(certificates.read_certificate(certificate)["archs"]) == ["sm90"]


def test_an_interrupted_write_leaves_no_temporary_file(certificate, monkeypatch):
    certificates.write_section(ENTRY, Arch.SM90, routable_section(ENTRY, {CELL: {}}))

    def interrupted(handle):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        certificates.write_section(ENTRY, Arch.CPU_INTERP, routable_section(ENTRY, {CELL: {}}))
    assert sorted(p.name for p in certificate.parent.iterdir() if not p.name.endswith(".lock")) == [certificate.name]
    assert list(certificates.read_certificate(certificate)["archs"]) == ["sm90"]


def test_concurrent_writers_lose_no_update(certificate):
    archs = list(Arch)
    errors = []

    def writer(arch):
        try:
            for round_ in range(5):
                certificates.write_section(ENTRY, arch, {**routable_section(ENTRY, {CELL: {}}), "round": round_})
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(arch,)) for arch in archs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    written = certificates.read_certificate(certificate)["archs"]
    assert sorted(written) == sorted(arch.value for arch in archs)
    assert all(section["round"] == 4 for section in written.values())


class _Cycle:
    """Garbage in a reference cycle with a finalizer: the collector runs Python code wherever it strikes,
    which lets another thread in (how ``ast.parse`` races on CPython 3.11)."""

    def __init__(self):
        self.me = self

    def __del__(self):
        sum(range(50))


def _in_threads(work, threads: int = 8) -> list[BaseException]:
    """``work(i)`` in ``threads`` threads at once, each from a different stack depth, among cyclic garbage;
    the exceptions they raised."""
    errors, start = [], threading.Barrier(threads)

    def run(index, depth):
        if depth:
            return run(index, depth - 1)
        start.wait()
        try:
            work(index)
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            errors.append(error)

    pool = [threading.Thread(target=run, args=(i, 3 * i)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return errors


def _parse_fresh_sources(parse, index: int) -> None:
    source = (REPO / "ops" / "certificates.py").read_text()
    for round_ in range(25):
        for _ in range(40):
            _Cycle()
        parse(f"{source}\n# thread {index} round {round_}\n")  # a new source each time: no cache answers


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the race is CPython 3.11's (3.12 made the counter per thread)")
def test_the_stress_harness_meets_the_race_in_a_bare_ast_parse():
    """The negative control of the next test: without a lock, this harness makes ast.parse fail.  In a
    process of its own: the race leaves CPython's parser state corrupt, and every later parse of the
    process that met it (this test worker's code digests) would be wrong."""
    child = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import ast
        from suites.test_certificates import _in_threads, _parse_fresh_sources
        errors = _in_threads(lambda index: _parse_fresh_sources(ast.parse, index))
        print(any(isinstance(e, SystemError) and "recursion depth mismatch" in str(e) for e in errors))
        """)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert child.stdout.strip().splitlines()[-1:] == ["True"], child.stdout + child.stderr


def test_code_digests_from_many_threads_at_once_never_fail():
    for _ in range(2):
        assert _in_threads(lambda index: _parse_fresh_sources(certificates.code_of, index)) == []
    assert certificates.code_of("x = 1  # a comment\n") == certificates.code_of("x = 1\n")


def test_concurrent_writers_and_readers_threads_and_processes(certificate):
    """Writers in threads and in processes, readers of digests and routes in threads, all at once: every
    update lands, no reader fails, the certificate is whole throughout."""
    archs = [arch for arch in Arch if arch is not Arch.CPU_INTERP]
    children = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import pathlib
        from ops import certificates
        from ops.catalog import Arch, op
        from suites.certification import routable_section
        path = pathlib.Path({str(certificate)!r})
        certificates.certificate_path = lambda entry: path
        certificates.report_path = lambda entry, arch: path.with_name(f"child{index}.{{arch.value}}.report.json")
        for round_ in range(5):
            section = routable_section(op("greedy_argmax"), {{{CELL!r}: {{}}}})
            certificates.write_section(op("greedy_argmax"), Arch.CPU_INTERP, {{**section, "round": round_,
                                                                              "child": {index}}})
        """)], cwd=REPO) for index in range(2)]

    def work(index):
        if index < len(archs):
            for round_ in range(5):
                certificates.write_section(ENTRY, archs[index], {**routable_section(ENTRY, {CELL: {}}),
                                                                 "round": round_})
        else:
            for round_ in range(5):
                for _ in range(40):
                    _Cycle()
                certificates.forget_cached()
                assert certificates.source_digest(ENTRY) == expected
                if certificate.exists():
                    certificates.read_certificate(certificate)
                certificates.why_not_certified(ENTRY, Arch.SM90, CELL)

    expected = certificates.source_digest(ENTRY)
    errors = _in_threads(work, threads=len(archs) + 4)
    assert [child.wait() for child in children] == [0, 0]
    assert errors == []
    written = certificates.read_certificate(certificate)["archs"]
    assert sorted(written) == sorted(arch.value for arch in Arch)
    assert all(section["round"] == 4 for section in written.values())


def test_the_report_of_the_run_is_written_beside_with_its_digest_in_the_section(certificate):
    certificates.write_section(ENTRY, Arch.SM90, routable_section(ENTRY, {CELL: {}}), report={"results": []})
    section = certificates.load(ENTRY)["archs"]["sm90"]
    assert certificates.report_problem(ENTRY, Arch.SM90, section) is None
    report = certificates.report_path(ENTRY, Arch.SM90)
    report.write_text(report.read_text().replace("[]", '[{"status": "certified"}]'))
    assert "sha256 differs" in certificates.report_problem(ENTRY, Arch.SM90, section)
    report.unlink()
    assert "cannot be read" in certificates.report_problem(ENTRY, Arch.SM90, section)


# -- corrupt certificates ---------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", '{"op": "greedy_argmax", "archs": {"sm90": {"cells"', "not json",
                                  '{"schema": 99, "archs": {}}', "[1, 2]"])
def test_a_corrupt_certificate_falls_back_to_the_stock_op_with_one_warning(certificate, text):
    certificate.write_text(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not _routes() and not _routes()
    assert len(caught) == 1 and str(certificate) in str(caught[0].message), [str(w.message) for w in caught]
    assert any("certificate unreadable" in reason for _, reason in FALLBACKS)


# -- one policy -------------------------------------------------------------------------------------
def test_each_arch_has_its_own_minimum_and_a_section_below_it_never_routes():
    """The policy's depth is per architecture (the measured one, docs/draws.md); one draw short of an arch's
    minimum is below the policy there, for the section and for a cell."""
    section = routable_section(ENTRY, {CELL: {}})
    digest = certificates.source_digest(ENTRY)
    for arch in Arch:
        least = certificates.POLICY.examples_on(arch)
        enough = {**section, "max_examples": least}
        assert certificates.POLICY.section_problem(enough, digest, arch=arch) is None
        short = certificates.POLICY.section_problem({**enough, "max_examples": least - 1}, digest, arch=arch)
        assert short and f"the policy asks {least} on {arch.value}" in short
        record = {**section["cells"][CELL], "examples": least - 1}
        assert "the policy asks" in certificates.POLICY.cell_problem(record, arch=arch)
    assert certificates.POLICY.examples_on(Arch.CPU_INTERP) == 24   # docs/draws.md's CPU measurement


@pytest.mark.parametrize("change, says", [
    ({}, None),
    ({"max_examples": 0}, "drew 0 examples"),
    ({"versions": {"torch": "0.0.1"}}, "earned under torch 0.0.1"),
    ({"report_sha256": None}, "no digest of the report"),
    ({"cells": {CELL: {"status": "certified", "examples": 2, "oracles": ["parity"], "skipped": {},
                       "exercised": {}}}}, "examples"),
    ({"cells": {CELL: {"status": "certified", "examples": 99, "oracles": ["parity"], "skipped": {},
                       "exercised": {}}}}, "oracle"),
    ({"cells": {CELL: {"status": "certified", "examples": 99, "oracles": list(certificates.POLICY.oracles),
                       "skipped": {}}}}, "region its examples exercised"),
])
def test_dispatch_routes_only_to_sections_that_meet_the_policy(certificate, change, says):
    if "report_sha256" in change:  # a report written beside it would name its own digest
        certificates.write_section(ENTRY, Arch.CPU_INTERP, {**routable_section(ENTRY, {CELL: {}}), **change})
    else:
        write_routable(ENTRY, Arch.CPU_INTERP, {CELL: {}}, change=change)
    assert _routes() == (says is None), FALLBACKS
    if says:
        assert any(says in reason for _, reason in FALLBACKS), FALLBACKS


def test_an_oracle_declared_not_applicable_with_a_reason_meets_the_policy(certificate):
    oracles = [o for o in certificates.POLICY.oracles if o != "graph_parity"]
    cell = {"oracles": oracles, "skipped": {"graph_parity": "no CUDA graphs on cpu"}}
    write_routable(ENTRY, Arch.CPU_INTERP, {CELL: cell})
    assert _routes()
    cell = {"oracles": oracles, "skipped": {"graph_parity": " "}}
    write_routable(ENTRY, Arch.CPU_INTERP, {CELL: cell})
    assert not _routes()


# -- a digest keyed to meaning ----------------------------------------------------------------------
def _first_number_plus_one(text: str) -> str:
    """One token changed: the first number literal of the module, plus one."""
    lines = text.splitlines(keepends=True)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NUMBER:
            (row, start), (_, end) = token.start, token.end
            line = lines[row - 1]
            lines[row - 1] = line[:start] + str(int(eval(token.string)) + 1) + line[end:]
            return "".join(lines)
    raise AssertionError("no number literal")


def _cosmetic(text: str) -> str:
    """Comments, a docstring and formatting changed; nothing else."""
    edited = text.replace('"""', '"""Edited docstring. ', 1).replace("\n\n\n", "\n\n\n\n")
    edited = edited.replace("):\n", "):  # a new comment\n", 1)
    return "# a comment at the top\n" + edited + "\n# and one at the end\n"


def _digest_with(path: pathlib.Path, text: str) -> str:
    return certificates.source_digest(
        ENTRY, read_bytes=lambda p: text.encode() if p.resolve() == path.resolve() else p.read_bytes())


def _roles():
    helper = next(p for p in certificates.used_sources(ENTRY) if p.name == "validation.py")
    return {"kernel": pathlib.Path(ENTRY.kernel_file), "reference": pathlib.Path(ENTRY.reference_file),
            "shared helper": helper}


@pytest.mark.parametrize("role", ["kernel", "reference", "shared helper"])
def test_comments_docstrings_and_formatting_keep_a_certificate_fresh(role):
    path = _roles()[role]
    assert _cosmetic(path.read_text()) != path.read_text()
    assert _digest_with(path, _cosmetic(path.read_text())) == certificates.source_digest(ENTRY)


@pytest.mark.parametrize("role", ["kernel", "reference", "shared helper"])
def test_a_one_token_change_of_meaning_stales_a_certificate(role):
    path = _roles()[role]
    assert _digest_with(path, _first_number_plus_one(path.read_text())) != certificates.source_digest(ENTRY)


def test_a_section_of_another_toolchain_does_not_route(certificate, monkeypatch):
    write_routable(ENTRY, Arch.CPU_INTERP, {CELL: {}})
    assert _routes()
    elsewhere = {**certificates.toolchain(), "triton": "0.0.0"}
    monkeypatch.setattr(certificates, "toolchain", lambda: elsewhere)
    certificates.forget_cached()
    assert not _routes()
    assert any("earned under triton" in reason for _, reason in FALLBACKS), FALLBACKS


def test_a_run_without_a_count_draws_what_the_policy_asks_of_its_arch(monkeypatch):
    """The plain command certifies: with no --max-examples a run draws the policy's depth for its arch (the
    deepest of every arch where no GPU is here to say which), never a fixed count the policy has outgrown (on
    cuda 100 stayed the default after the policy asked 220, and the plain command exited 2)."""
    from tools.engine import certify

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert certify.RunOptions(device="cpu").examples == certificates.POLICY.examples_on(Arch.CPU_INTERP)
    assert certify.RunOptions(device="cuda").examples == certificates.POLICY.examples_on_every_arch()
    assert certify.RunOptions(device="cuda").examples >= certificates.POLICY.examples_on(Arch.SM90)
    assert certify.RunOptions(device="cuda", max_examples=7).examples == 7
    certify.check_policy(certify.RunOptions(device="cuda"))   # the default passes its own policy check


def test_a_certifying_run_writes_a_section_that_meets_the_policy_and_its_report(certificate, monkeypatch):
    from tools import certify_cells
    from tools.engine import certify

    assert certify.RunOptions(device="cpu").examples == certificates.POLICY.examples_on(Arch.CPU_INTERP)   # no flag
    monkeypatch.setattr(ENTRY, "cells", (ENTRY.cell("empty_batch"),))  # the quickest cell stands for all
    assert certify_cells.main(["--op", "greedy_argmax", "--device", "cpu", "--no-shrink", "--json"]) == 0
    section = certificates.load(ENTRY)["archs"]["cpu-interp"]
    assert certificates.POLICY.section_problem(section, certificates.source_digest(ENTRY),
                                               certificates.toolchain(), arch=Arch.CPU_INTERP) is None
    assert certificates.report_problem(ENTRY, Arch.CPU_INTERP, section) is None
    assert all(certificates.POLICY.cell_problem(record, arch=Arch.CPU_INTERP) is None
               for record in section["cells"].values()), section
    FALLBACKS.clear()
    ENTRY(torch.randn(0, 300).to(torch.bfloat16))
    assert not FALLBACKS, FALLBACKS


# -- one digest on every Python ---------------------------------------------------------------------
def test_the_code_digest_reads_a_function_as_python_3_12_does_on_any_version():
    """The GPU image runs 3.12 and CI 3.11: their ``ast.dump`` differ (``type_params``), the digest must not."""
    text = certificates.code_of("def f(x):\n    'a docstring'\n    return x\n")
    assert text.endswith("decorator_list=[], type_params=[])], type_ignores=[])"), text
    assert "docstring" not in text and "returns" not in text   # an optional field that is None is left out


def test_the_canonical_dump_is_ast_dump_where_the_version_already_writes_type_params():
    import ast
    import sys

    tree = ast.parse("class C:\n    async def g(self, *a, **k) -> int:\n        return {1: None, **k}\n")
    expected = ast.dump(tree, include_attributes=False) if sys.version_info[:2] == (3, 12) else None
    canonical = certificates.canonical_dump(tree)
    assert canonical.count("type_params=[]") == 2
    if expected is not None:
        assert canonical == expected


# -- one digest whatever the process did before -------------------------------------------------------
def test_a_kernel_launch_under_the_interpreter_leaves_every_code_digest_as_it_was():
    """At a kernel's first launch Triton's interpreter copies its module globals, the judge's patch of it
    among them, into the kernel's module: every digest must read the same before and after (a pytest worker
    that had launched a kernel once read every certificate stale).  In a process of its own, from a clean
    start; the launch is real for greedy_argmax and done as the interpreter does it for every other kernel
    module.  The control: that copy does bind a function of the patch (``oracles.triton_interpreter``) in
    the launched kernel's module, so a digest that followed it would move."""
    child = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        import torch
        from ops import certificates
        from ops.catalog import entries, kernels
        every = [entry for name in entries() for entry in kernels(name)]
        before = [certificates.source_digest(entry) for entry in every]
        launched = entries()["greedy_argmax"]
        launched.kernel(torch.randn(2, 300).to(torch.bfloat16))
        import triton.runtime.interpreter as interpreter
        for entry in every:
            module = vars(sys.modules[entry.kernel.__module__])
            for name, value in vars(interpreter).items():
                module.setdefault(name, value)
        after = [certificates.source_digest(entry) for entry in every]
        followed = certificates.modules_used({launched.kernel.__module__}, certificates._CODE_PREFIXES)
        print(json.dumps({"moved": [entry.name for entry, a, b in zip(every, before, after) if a != b],
                          "control": "oracles.triton_interpreter" in followed}))
        """)], cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert child.returncode == 0, child.stderr[-2000:]
    assert json.loads(child.stdout.strip().splitlines()[-1]) == {"moved": [], "control": True}, child.stdout
