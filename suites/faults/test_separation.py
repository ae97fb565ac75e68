"""The implementation host holds nothing of the judge, and the judge checks what crosses from its own side.

``tools/engine/impl_host.py`` runs the implementation under judgement; ``tools/engine/impl_executor.py`` is the judge's
side.  A probe implementation (plain torch, written here) reports what it can see of its process.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import sys

import pytest
import torch
from multiprocessing.reduction import ForkingPickler

from oracles.calls import call_each
from oracles.determinism import check_determinism, run_on_copies, run_on_copy
from oracles.failures import OracleFailure
from suites.claims import REPO
from tools.engine import activity
from tools.engine.impl_executor import ImplementationHost, _Unpickler

pytestmark = pytest.mark.cpu

JUDGE_PACKAGES = ("oracles", "references", "ops", "suites", "tools", "hypothesis", "pytest", "_pytest")
HARNESS_WORDS = ("pytest", "hypothesis", "certify", "judge", "test")

PROBE = '''
import json, os, sys, time
import torch

def probe(x):
    with open({facts!r}, "w") as out:
        json.dump({{"modules": sorted(sys.modules), "argv": sys.argv, "env": dict(os.environ),
                   "cmdline": open("/proc/self/cmdline").read().split("\\0")}}, out)
    return x.clone()

def add_one_in_place(x):
    x.add_(1)

def sleeps(x):
    time.sleep(3600)

def killed(x):
    os.kill(os.getpid(), 9)

def refuses(x):
    raise ValueError("x: not this one")

_by_address = {{}}

def cached_by_address(x):
    # a new answer per input address, served from the cache ever after: stands for a kernel whose
    # nondeterminism a cache keyed on the address hides
    if x.data_ptr() not in _by_address:
        _by_address[x.data_ptr()] = x + len(_by_address)
    return _by_address[x.data_ptr()].clone()
'''


def _started(folder) -> ImplementationHost:
    facts = folder / "facts.json"
    (folder / "probe_impl.py").write_text(PROBE.format(facts=str(facts)))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KPARITY_REQUIRE_CERTIFIED", "1")
        env.setenv("HYPOTHESIS_PROFILE", "ci")
        served = ImplementationHost("cpu", call_limit_s=20)
    served.load([str(folder)], {name: ("probe_impl", name) for name in ("probe", "add_one_in_place", "sleeps",
                                                                       "killed", "refuses", "cached_by_address")})
    served.facts = facts
    return served


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """One host for the tests that leave it serving (starting one costs an interpreter and torch)."""
    served = _started(tmp_path_factory.mktemp("probe"))
    yield served
    served.close()


@pytest.fixture
def doomed_host(tmp_path):
    served = _started(tmp_path)
    yield served
    served.close()


def test_the_host_holds_nothing_of_the_judge_and_looks_like_serving(host):
    host.function("probe")(x=torch.ones(3))
    facts = json.loads(host.facts.read_text())
    loaded = [name for name in facts["modules"] if name.split(".")[0] in JUDGE_PACKAGES]
    assert not loaded, f"the host imported the judge's {loaded}"
    (script,) = facts["argv"]   # a plain script outside the tree, not ``-c``
    assert not script.startswith(str(REPO)) and os.path.basename(script) == "main.py"
    words = " ".join(facts["cmdline"][:-1] + [os.path.basename(facts["cmdline"][-1])]).lower()
    assert not [w for w in HARNESS_WORDS if w in words], facts["cmdline"]
    platform = [name for name in facts["env"] if name.upper().startswith(("KPARITY", "PYTEST", "HYPOTHESIS"))]
    assert not platform, platform
    assert "PYTEST_CURRENT_TEST" in os.environ  # the judge's harness is there, on the judge's side


def test_in_place_writes_land_in_the_judges_tensor_views_and_padding_kept(host):
    storage = torch.full((2, 8), float("nan"))
    view = storage[:, 1:4]
    view.zero_()
    host.function("add_one_in_place")(x=view)
    assert torch.equal(view, torch.ones(2, 3))
    assert storage[:, 4:].isnan().all() and storage[:, 0].isnan().all()  # the padding, as it was


def test_a_cache_keyed_on_input_addresses_never_looks_right(host):
    """Determinism's two calls see their inputs at two addresses (private copies, both alive while the
    message runs), so a cache keyed on the address cannot hide a second answer; a later call lands on an
    address the cache saw (stale contents: parity's finding) or on a new one (a new answer: determinism's),
    never on the right answer."""
    cached, kwargs = host.function("cached_by_address"), {"x": torch.zeros(5000)}
    with pytest.raises(OracleFailure, match="second call on the same input"):   # one message each
        check_determinism(cached, kwargs, (), first=run_on_copy(cached, kwargs, ()))
    first, second = run_on_copies(cached, kwargs, (), 2)                        # both in one message
    with pytest.raises(OracleFailure, match="second call on the same input"):
        check_determinism(cached, kwargs, (), first=first, second=second)
    later = cached(x=torch.full((5000,), 100.0))
    assert not torch.equal(later, torch.full((5000,), 100.0)), "a cache keyed on the address answered right"


def test_several_calls_in_one_message_stop_at_the_first_that_raises(host):
    """``call_many`` runs the calls in order and answers as the calls one by one would (``call_each``)."""
    x = torch.arange(4.0)
    for fn in (host.function("refuses"), host.function("probe")):
        hosted = call_each(fn, [{"x": x}, {"x": x + 1}])
        assert len(hosted) == (1 if fn.name == "refuses" else 2)
    results = host.function("probe").call_many([{"x": x}, {"x": x + 1}])
    assert [r.tolist() for r in results] == [x.tolist(), (x + 1).tolist()]
    (raised,) = host.function("refuses").call_many([{"x": x}, {"x": x}])
    assert isinstance(raised, ValueError) and "x: not this one" in str(raised)


def test_the_workers_record_keeps_whether_the_call_returned_or_raised(host):
    """The implementation's error ends its call by an exception in the worker's activity record, as its
    host's failure does (below): a call returned only where its host answered with the outputs."""
    with pytest.raises(ValueError, match="x: not this one"):
        host.function("refuses")(x=torch.ones(1))
    assert (host.activity.ended, host.activity.raised) == (activity.RAISED, b"ValueError")
    host.function("probe")(x=torch.ones(1))
    assert host.activity.ended == activity.RETURNED


def test_a_host_that_hangs_fails_the_call_and_every_later_one(doomed_host):
    host = doomed_host
    host.watch("determinism", {"seed": 7})
    host.call_limit_s = 2
    with pytest.raises(OracleFailure) as hang:
        host.function("sleeps")(x=torch.ones(1))
    assert hang.value.oracle == "determinism" and "no answer within 2s" in hang.value.message
    assert "{'seed': 7}" in hang.value.message
    with pytest.raises(OracleFailure):
        host.function("probe")(x=torch.ones(1))
    assert host.fault.kind == "hang"


def test_a_killed_host_is_a_crash(doomed_host):
    host = doomed_host
    with pytest.raises(OracleFailure, match="SIGKILL"):
        host.function("killed")(x=torch.ones(1))
    assert host.fault.kind == "crash" and host.activity.ended == activity.HOST_FAILED


class _Lying(torch.Tensor):
    pass


def test_the_judge_rebuilds_no_class_of_the_implementations():
    sent = bytes(ForkingPickler.dumps(torch.zeros(2).as_subclass(_Lying)))
    with pytest.raises(pickle.UnpicklingError, match="does not rebuild"):
        _Unpickler(io.BytesIO(sent)).load()
    plain = _Unpickler(io.BytesIO(bytes(ForkingPickler.dumps((torch.arange(3), torch.bfloat16))))).load()
    assert type(plain[0]) is torch.Tensor and plain[1] is torch.bfloat16
    assert sys.modules[__name__]  # nothing of this module was imported to read it
