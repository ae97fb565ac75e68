"""A kernel's own limits are the kernel's (issue #15.2, CONTRACTS.md's refusal rule).

An input the contract answers but a kernel does not take (column-strided ``q`` for gdn, a plane with
three trailing dims for rollback, a tensor ``sm_scale``) is refused by the kernel's host wrapper with a
``ValueError`` naming the argument; certified dispatch sends it to the stock op and counts the
fallback, even where the input's cell is certified; ``KPARITY_REQUIRE_CERTIFIED=1`` makes that an
error.  The battery counts a clear refusal of a drawn input as ``refused_examples``, never a failure,
and an unclear one (another error class, or no argument named) stays a finding.
"""
from __future__ import annotations

import pytest
import torch

from oracles.battery import Implementation, run_cell
from oracles.refusals import is_clear_refusal
from ops import catalog, certificates
from ops.catalog import FALLBACKS, Arch, FallbackRefused, op
from references.attention import paged_decode as paged_contract
from references.attention.paged_slots import refusal_plane, refusal_positions, refusal_table
from references.ssm.gdn_decode import make_inputs
from suites.certification import write_routable

pytestmark = pytest.mark.cpu
GDN = op("gdn_decode")


def _column_strided_q(**options) -> dict:
    kwargs = make_inputs(torch.device("cpu"), **options)
    kwargs["q"] = torch.cat([kwargs["q"], kwargs["q"]], -1)[..., ::2]
    return kwargs


@pytest.fixture
def certified_gdn(tmp_path, monkeypatch):
    """gdn_decode's fp32_state cell certified here, in a temporary certificate."""
    monkeypatch.setattr(certificates, "certificate_path",
                        lambda entry: tmp_path / f"{entry.name}-{entry.backend}.cert.json")
    certificates.forget_cached()
    write_routable(GDN, Arch.CPU_INTERP, {"fp32_state": {}})
    FALLBACKS.clear()
    yield
    certificates.forget_cached()


def test_the_kernel_refuses_an_input_beyond_its_limits_naming_the_argument():
    with pytest.raises(ValueError, match=r"^q: stride\(-1\) = 2"):
        GDN.kernel(**_column_strided_q())


def test_the_reference_answers_it():
    kwargs = _column_strided_q()
    assert GDN.reference(**kwargs).shape == (2, 4, 64)


def test_dispatch_routes_it_to_the_stock_op_and_counts_the_fallback(certified_gdn):
    assert GDN.cell_of(**_column_strided_q()).id == "fp32_state"
    kwargs = _column_strided_q()
    GDN(**kwargs)
    [(name, reason)] = FALLBACKS
    assert name == "gdn_decode" and "beyond the kernel's limits (q: stride(-1) = 2" in reason


def test_an_input_within_the_limits_of_a_certified_cell_runs_the_kernel(certified_gdn):
    GDN(**make_inputs(torch.device("cpu")))
    assert not FALLBACKS


def test_require_certified_turns_the_limit_fallback_into_an_error(certified_gdn, monkeypatch):
    monkeypatch.setenv(catalog.REQUIRE_CERTIFIED_ENV, "1")
    with pytest.raises(FallbackRefused, match="beyond the kernel's limits"):
        GDN(**_column_strided_q())


@pytest.mark.parametrize("op_name, kwargs, argument", [
    ("rollback_save", {"plane": refusal_plane(torch.device("cpu"), shape=(4, 16, 2, 2, 2)),
                       "page_table": refusal_table(torch.device("cpu")),
                       "positions": refusal_positions(torch.device("cpu"))}, "plane"),
    ("paged_decode", {**paged_contract._call(torch.device("cpu")), "sm_scale": torch.tensor(0.125)}, "sm_scale"),
])
def test_other_kernels_declare_and_refuse_their_limits(op_name, kwargs, argument):
    entry = op(op_name)
    reason = entry.beyond_limits(entry.bind(**kwargs))
    assert reason is not None and reason.startswith(f"{argument}: ")
    with pytest.raises(ValueError, match=f"^{argument}: "):
        entry.kernel(**kwargs)
    entry.reference(**kwargs)   # the contract answers it


# -- the battery: a clear refusal of a drawn input passes, counted ---------------------------------------
def test_clear_refusals_name_an_argument_of_the_call():
    names = ("q", "k", "state")
    assert is_clear_refusal(ValueError("q: stride(-1) = 2"), names)
    assert is_clear_refusal(TypeError("unsupported strides of state"), names)
    assert not is_clear_refusal(RuntimeError("q: stride(-1) = 2"), names)     # not the contract's error classes
    assert not is_clear_refusal(ValueError("sequence too long"), names)       # "q" only inside a word
    assert not is_clear_refusal(AssertionError(), names)


def _refusing_strided_q(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    GDN.validate(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    if q.stride(-1) != 1:
        raise ValueError("q must be contiguous along its head dim")
    return GDN.reference(q, k, v, g, beta, state, slots, scale, qk_l2norm)


def _asserting_strided_q(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    GDN.validate(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    assert q.stride(-1) == 1
    return GDN.reference(q, k, v, g, beta, state, slots, scale, qk_l2norm)


class _OneStridedRecipe:
    """A strategy of two recipes: gdn_decode's small inputs with a column-strided q, and the same with a
    contiguous q (a cell where every input was refused is not passed: something must be answered)."""

    @staticmethod
    def corners(cell, device):
        return [{"seed": 0, "strided": True}, {"seed": 0, "strided": False}]

    @staticmethod
    def build(recipe, device):
        # two v heads over one q/k head: inputs whose band the stock op leaves within gdn_decode's limit (the
        # default shape's random state puts the stock op 7 ULP off: a vacuous band, which is no refusal test)
        return _column_strided_q() if recipe["strided"] else make_inputs(torch.device("cpu"), heads=1, heads_v=2)


def _judge(fn):
    impl = Implementation("test", {"gdn_decode": fn, "gdn_verify": op("gdn_verify").reference,
                                   "gdn_commit": op("gdn_commit").reference})
    return run_cell(GDN, impl, GDN.cell("fp32_state"), "cpu", max_examples=0, strategy=_OneStridedRecipe)


def test_a_clear_refusal_of_a_drawn_input_is_counted_not_failed():
    result = _judge(_refusing_strided_q)
    assert result.status == "certified" and result.refused_examples == 1 and result.examples == 1
    assert result.record()["refused_examples"] == 1


def test_an_assertion_on_a_drawn_input_is_a_finding():
    result = _judge(_asserting_strided_q)
    assert result.status == "failed" and result.failure.oracle == "parity"
