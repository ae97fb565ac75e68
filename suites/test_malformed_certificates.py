"""Certified dispatch fed malformed and forged certificates (issue 25.6): it never crashes the caller's op
call and never routes on a forged or empty record.  Every malformed certificate means the stock op and one
warning; the project's files that are not regular files (a FIFO) are refused without hanging."""
from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ops import certificates, quarantine
from ops.catalog import FALLBACKS, Arch, op
from suites.certification import routable_section
from tools.engine.test_lists import ListFormatError, load_list

pytestmark = pytest.mark.cpu
ENTRY = op("greedy_argmax")
CELL = "decode_small_batch"
DIGEST = "d" * 64  # the code digest, fixed: hundreds of examples need not parse the sources each


@pytest.fixture
def forge(tmp_path, monkeypatch):
    """Writes a certificate document (a dict, or raw text) and the report beside it, as dispatch reads them;
    returns a writer ``forge(document, report=...)``."""
    path = tmp_path / "greedy_argmax.cert.json"
    monkeypatch.setattr(certificates, "certificate_path", lambda entry: path)
    monkeypatch.setattr(certificates, "source_digest", lambda entry, *rest: DIGEST)

    def write(document, report: str | None = "{}\n"):
        certificates.forget_cached()
        certificates._WARNED.clear()
        path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")
        report_file = certificates.report_path(ENTRY, Arch.CPU_INTERP)
        if report is None:
            report_file.unlink(missing_ok=True)
        else:
            report_file.write_text(report, encoding="utf-8")
        return path

    yield write
    certificates.forget_cached()


def _valid() -> dict:
    """A certificate that routes ``decode_small_batch`` on this machine, its report being ``{}\\n``."""
    section = routable_section(ENTRY, {CELL: {}}, DIGEST)
    section["report_sha256"] = certificates.report_digest("{}\n")
    return {"schema": certificates.SCHEMA, "op": ENTRY.name, "archs": {Arch.CPU_INTERP.value: section}}


def _calls(logits=None) -> tuple[bool, list[str]]:
    """Two op calls: whether either ran the stock op, and the warnings both gave.  Each must return the
    contract's answer (the kernel's and the stock op's agree) and raise nothing."""
    logits = torch.randn(2, 300).to(torch.bfloat16) if logits is None else logits
    FALLBACKS.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert torch.equal(ENTRY(logits), torch.argmax(logits, dim=-1))
    return bool(FALLBACKS), [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def _stock_with_one_warning(logits=None) -> None:
    fell_back, warned = _calls(logits)
    assert fell_back, "routed on a malformed certificate"
    assert len(warned) == 1, warned


def test_the_valid_document_routes_without_a_warning(forge):
    """The control of every case below: only the malformation differs."""
    forge(_valid())
    assert _calls() == (False, [])


def _at(document: dict, *keys):
    node = document["archs"][Arch.CPU_INTERP.value]
    for key in keys:
        node = node[key]
    return node


def _set(value, *keys):
    document = _valid()
    *parents, last = keys
    _at(document, *parents)[last] = value
    return document


_DEEP = "[" * 100_000 + "]" * 100_000
_CASES = {
    "nested 100000 deep": _DEEP,
    "nested 100000 deep in a cell": json.dumps(_valid()).replace('"exercised"', f'"deep": {_DEEP}, "exercised"'),
    "[1, Infinity]": json.dumps(_set([1, float("inf")], "cells", CELL, "exercised", "V")),
    "NaN examples": json.dumps(_set(float("nan"), "cells", CELL, "examples")),
    "5000-digit int": json.dumps(_set(0, "cells", CELL, "examples")).replace('"examples": 0', '"examples": ' + "9" * 5000),
    "cell record a list": _set([], "cells", CELL),
    "skipped a list": _set(["graph_parity"], "cells", CELL, "skipped"),
    "oracles a string": _set("parity determinism", "cells", CELL, "oracles"),
    "versions a list": _set(["torch"], "versions"),
    "max_examples a bool": _set(True, "max_examples"),
    "exercised bound with no element": _set([], "cells", CELL, "exercised", "V"),
    "exercised bound with one element": _set([1], "cells", CELL, "exercised", "V"),
    "exercised bound with three elements": _set([1, 2, 3], "cells", CELL, "exercised", "V"),
    "exercised bound of floats": _set([1.0, 300.5], "cells", CELL, "exercised", "V"),
    "exercised bound reversed": _set([300, 1], "cells", CELL, "exercised", "V"),
    "exercised {}": _set({}, "cells", CELL, "exercised"),
    "exercised without V": _set({"R": [1, 16], "dtype": ["bfloat16"]}, "cells", CELL, "exercised"),
    "exercised beyond the cell": _set([1, 10**6], "cells", CELL, "exercised", "V"),
    "exercised dtype not a choice": _set(["bfloat16", "int8"], "cells", CELL, "exercised", "dtype"),
    "schema a float": {**_valid(), "schema": 2.0},
}


@pytest.mark.parametrize("case", list(_CASES))
def test_each_malformation_is_the_stock_op_and_one_warning(forge, case):
    forge(_CASES[case])
    _stock_with_one_warning()


def test_an_exercised_bound_given_as_a_string_is_no_substring_match(forge):
    """``"1024"`` once matched R = 4 as a substring."""
    forge(_set("1024", "cells", CELL, "exercised", "R"))
    _stock_with_one_warning(torch.randn(4, 300).to(torch.bfloat16))


@pytest.mark.parametrize("report", [None, "{}", '{"results": []}\n'], ids=["missing", "another", "forged"])
def test_a_section_whose_report_is_missing_or_not_the_one_it_names_never_routes(forge, report):
    forge(_valid(), report=report)
    fell_back, _ = _calls()
    assert fell_back
    assert any("report" in reason for _, reason in FALLBACKS), FALLBACKS


def test_a_forged_all_zero_report_digest_never_routes(forge):
    forge(_set("0" * 64, "report_sha256"), report=None)
    assert _calls()[0]


# -- fuzzing ----------------------------------------------------------------------------------------
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                     st.text(max_size=8), st.sampled_from(["1024", "bfloat16", "certified", "0" * 64]))
_JSON = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                     max_leaves=12)
# Where a malformation goes, each with the values that are malformed there (any of them must keep dispatch
# on the stock op and warn once): the fields dispatch reads, their wrong types and degenerate regions.
_NOT_STR, _NOT_INT = _JSON.filter(lambda v: v is not None and not isinstance(v, str)), \
    _JSON.filter(lambda v: type(v) is not int)
_PLACES = [
    (("report_sha256",), _NOT_STR),
    (("max_examples",), _NOT_INT.filter(lambda v: v is not None)),
    (("versions",), _JSON.filter(lambda v: v is not None and not isinstance(v, dict))),
    (("cells", CELL), _JSON.filter(lambda v: not isinstance(v, dict))),
    (("cells", CELL, "examples"), _NOT_INT),
    (("cells", CELL, "oracles"), _JSON.filter(lambda v: v is not None and not (
        isinstance(v, list) and all(isinstance(x, str) for x in v) and set(certificates.POLICY.oracles) <= set(v)))),
    (("cells", CELL, "skipped"), _JSON.filter(lambda v: bool(v) and not isinstance(v, dict))),
    (("cells", CELL, "exercised"), _JSON.filter(lambda v: not isinstance(v, dict) or v == {} or set(v) < {"R", "V"})),
    (("cells", CELL, "exercised", "R"), _JSON.filter(lambda v: not (isinstance(v, list) and len(v) == 2 and all(
        type(x) is int and 1 <= x <= 16 for x in v) and v[0] <= v[1]))),
    (("cells", CELL, "exercised", "V"), _JSON.filter(lambda v: not (isinstance(v, list) and len(v) == 2 and all(
        type(x) is int and 1 <= x <= 262144 for x in v) and v[0] <= 300 <= v[1]))),
    (("cells", CELL, "exercised", "dtype"), _JSON.filter(lambda v: not (
        isinstance(v, list) and all(isinstance(x, str) for x in v) and "bfloat16" in v
        and set(v) <= {"bfloat16", "float16", "float32"}))),
]


# Names an extra key must not take: the fields dispatch reads and the cell's dimensions.
_EXTRA_KEYS = st.text(min_size=1, max_size=6).filter(lambda key: key not in {
    "R", "V", "dtype", "status", "examples", "oracles", "skipped", "exercised", "cells", "report_sha256",
    "source_sha256", "versions", "max_examples"})


@st.composite
def malformed_documents(draw):
    """A routable certificate with one field dispatch reads replaced by a malformed value, or deleted (the
    fields whose absence is a malformation), and extra keys added anywhere (which must change nothing)."""
    document = _valid()
    for keys in draw(st.lists(st.sampled_from([(), ("cells", CELL), ("cells", CELL, "exercised")]), max_size=2)):
        _at(document, *keys)[draw(_EXTRA_KEYS)] = draw(_JSON)
    if draw(st.booleans()):
        keys, values = draw(st.sampled_from(_PLACES))
        *parents, last = keys
        _at(document, *parents)[last] = draw(values)
    else:
        keys = draw(st.sampled_from([("report_sha256",), ("versions",), ("cells", CELL, "examples"),
                                     ("cells", CELL, "oracles"), ("cells", CELL, "exercised"),
                                     ("cells", CELL, "exercised", "V")]))
        *parents, last = keys
        del _at(document, *parents)[last]
    return document


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(document=malformed_documents())
def test_fuzzed_malformed_certificates_never_crash_and_never_route(forge, document):
    forge(copy.deepcopy(document))
    fell_back, warned = _calls()
    assert fell_back, json.dumps(document)[:400]
    assert len(warned) <= 1, warned


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(extra=st.dictionaries(_EXTRA_KEYS, _JSON, min_size=1, max_size=3),
       seen=st.dictionaries(_EXTRA_KEYS, st.lists(st.text(max_size=8), min_size=1, max_size=3), max_size=2))
def test_extra_keys_change_nothing(forge, extra, seen):
    """The negative control of the fuzzing: a valid certificate with unknown keys added still routes (in the
    exercised region, what a recipe names besides the cell's dimensions: layouts, value modes)."""
    document = _valid()
    _at(document).update(extra)
    _at(document, "cells", CELL).update(extra)
    _at(document, "cells", CELL, "exercised").update(seen)
    forge(document)
    assert _calls() == (False, [])


# -- files that are not regular files -----------------------------------------------------------------
@contextlib.contextmanager
def _no_hang(seconds: int = 20):
    """A hang becomes a failure of the test instead of a stuck run."""
    def hung(*_):
        raise AssertionError(f"blocked for {seconds}s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_certificate_that_is_a_fifo_is_the_stock_op(forge):
    path = forge(_valid())
    path.unlink()
    os.mkfifo(path)
    with _no_hang():
        _stock_with_one_warning()


def test_a_report_that_is_a_fifo_never_routes(forge):
    forge(_valid(), report=None)
    os.mkfifo(certificates.report_path(ENTRY, Arch.CPU_INTERP))
    with _no_hang():
        assert _calls()[0]


def test_a_quarantine_ledger_that_is_a_fifo_is_refused(tmp_path):
    ledger = tmp_path / "quarantine.yml"
    os.mkfifo(ledger)
    with _no_hang(), pytest.raises(quarantine.QuarantineError, match="a FIFO, not a regular file"):
        quarantine.load(ledger)


def test_a_test_list_that_is_a_fifo_or_a_folder_is_refused(tmp_path):
    fifo = tmp_path / "l0_cpu.yml"
    os.mkfifo(fifo)
    with _no_hang(), pytest.raises(ListFormatError, match="a FIFO, not a regular file"):
        load_list(fifo)
    (tmp_path / "l0_gpu.yml").mkdir()
    with pytest.raises(ListFormatError, match="a directory, not a regular file"):
        load_list(tmp_path / "l0_gpu.yml")
