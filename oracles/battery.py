"""The oracle battery: what "certified" means for one (op, cell) on one architecture.

Per example (a *recipe*: a small JSON-able dict of sizes, layout, value mode and a ``seed``, which an
op's strategy module turns into tensors on the device):

1. parity — bitwise or band vs the reference (band: kernel and stock error vs float64 truth)
2. determinism — the same input twice, bitwise equal
3. batch invariance — where the entry declares it
4. graph parity — CUDA only: capture once, replay with the recipe under other seeds
5. write guards — poisoned outputs fully written, canaries intact, immutable inputs untouched
6. stateful properties — the contract's own properties (rollback, replay equivalence)
and once per cell, after the examples: 7. refused inputs, row by row.

Every oracle that applies gets its own verdict — pass, fail (finding, minimal recipe) or not
applicable (why) — so a refusal worded differently never hides whether the numbers are right.  The rule:
an oracle that fails on an example is not run again on later ones (its finding stands); the others go on
over every planned example.  Each failing oracle's recipe is then shrunk on its own, within
``SHRINK_SECONDS``: a drawn one by Hypothesis (the same seed draws the same examples up to it), a fixed
corner by trying its integer sizes smallest first while it still fails inside the cell.

A cell runs its fixed corner recipes first, then Hypothesis-drawn ones (seeded from a stable digest
of the cell id).  The result records the region the examples reached (``exercised``), which is all a
certificate claims.  The caller gives the op's strategy module (``ops.catalog.Entry.strategy_module``),
which provides ``recipes(cell, device)``, ``corners(cell, device)`` and ``build(recipe, device)``; a
recipe's shapes never depend on its ``seed``.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from typing import Callable, Iterable, Mapping

import hypothesis
import torch

from oracles import allocations
from oracles.band import BandReport
from oracles.batch_invariance import check_batch_invariance
from oracles.bitwise import first_difference
from oracles.draws import over_cell_draws
from oracles.determinism import check_determinism, run_on_copies, run_on_copy
from oracles.failures import NUMERICS, ORACLES, OracleFailure
from oracles.selection import ORACLE_GROUPS
from oracles.graph import MIN_REPLAYS, check_graph_parity, graph_parity_applies
from oracles.aliasing import aliasing, storage_key
from oracles.judge_errors import JudgeError, Raised, judge_error, out_of_memory
from oracles.legitimate_orders import legitimate_outputs
from oracles.parity import check_parity
from oracles.refusals import check_refusals, is_clear_refusal
from oracles.stateful import check_properties
from oracles.tensors import as_outputs, check_contract_outputs, clone_inputs
from oracles.triton_interpreter import limitation_in
from oracles.write_guards import check_write_guards

PASS, FAIL, NOT_APPLICABLE, NOT_ASKED = "pass", "fail", "not applicable", "not asked"
CERTIFIED, PASSED, FAILED = "certified", "passed", "failed"
NOT_JUDGED = "not judged"   # what this machine cannot run (inline PTX under the interpreter): no verdict either way
REFUSALS_RECIPE = {"refusals": "the contract's table"}
SHRINK_SECONDS = 60.0  # per failing oracle: a minimal recipe helps, but never at the cost of an unbounded run
CPU_SIZE_CAP = "cpu interpreter size cap"
ERRORS_BY_SIZE = 64  # band examples whose (output elements, kernel ULP, stock ULP) a cell's record keeps

Watch = Callable[[str, dict], None]
"""``watch(oracle, recipe)``: told before each oracle starts on a recipe, so that a runner outside the
process can name the oracle and the example when the process dies (``tools/engine/isolation.py``)."""


def run_stock_on_copy(stock: Callable, kwargs: dict, in_place: tuple[str, ...]) -> tuple | None:
    """:func:`run_on_copy` for the stock op: None when it cannot take this input (PyTorch's own limits, an SDPA
    backend with no kernel for the shape, are not the kernel's finding: E then comes from the reference's orders).
    Running out of memory is raised: it is not a limit, and without the stock op the band would narrow, unfairly.
    Here, not in ``oracles.determinism``: the references import that module, and their digests with it."""
    try:
        return run_on_copy(stock, kwargs, in_place)
    except Exception as error:  # noqa: BLE001 - whatever the stock op raises, bar memory, is its own limit
        if out_of_memory(error):
            raise
        return None


@dataclasses.dataclass
class Implementation:
    """What is being judged: a callable per op name (the op and its contract siblings).

    Certification fills it with functions run by an implementation host, apart from this process
    (``tools/engine/worker.hosted_implementation``); plain functions, called here, are for the oracles'
    unit tests and the suites' fast judging of their many controls only."""

    label: str
    functions: Mapping[str, Callable]

    @classmethod
    def of_kernels(cls, entry, kernels: Callable[[str], tuple]) -> "Implementation":
        """The entry's kernel, and its siblings' kernels of the same backend (else their first); ``kernels``
        names an op's kernels in dispatch order (``ops.catalog.kernels``: the battery knows no catalog)."""

        def sibling(name):
            found = kernels(name)
            return next((e for e in found if e.backend == entry.backend), found[0]).kernel

        return cls(f"catalog kernel ({entry.backend})",
                   {entry.name: entry.kernel, **{name: sibling(name) for name in entry.siblings}})

    def __getitem__(self, name: str) -> Callable:
        return self.functions[name]


def _oracle_order(oracle: str) -> int:
    return ORACLES.index(oracle) if oracle in ORACLES else len(ORACLES)  # isolation, sanitizers: last


@dataclasses.dataclass
class CellResult:
    op: str
    cell_id: str
    status: str                       # "certified" | "passed" (partial or --impl) | "failed" | "quarantined"
    examples: int = 0
    worst_kernel_error_ulp: float = 0.0
    worst_stock_error_ulp: float = 0.0
    stock_disagreements: int = 0      # bitwise ops: examples where the stock op breaks the contract
    verdicts: dict = dataclasses.field(default_factory=dict)    # oracle -> {"verdict", and why/finding/recipe}
    failures: dict = dataclasses.field(default_factory=dict)    # oracle -> OracleFailure (recipe filled in)
    exercised: dict = dataclasses.field(default_factory=dict)   # dimension -> [lo, hi] or the values seen
    annotations: dict = dataclasses.field(default_factory=dict)  # what the runner adds: faults, quarantine
    refused_examples: int = 0         # drawn inputs the implementation refused clearly (its own limits)

    @property
    def failure(self) -> OracleFailure | None:
        """The headline failure: the first failing oracle in battery order (numerics before refusals)."""
        return min(self.failures.values(), key=lambda f: _oracle_order(f.oracle), default=None)

    @failure.setter
    def failure(self, failure: OracleFailure) -> None:
        """A runner's own finding (a worker fault, a sanitizer report): one more failing verdict."""
        self.failures[failure.oracle] = failure
        self.verdicts[failure.oracle] = _fail_verdict(failure)

    @property
    def oracles_run(self) -> list[str]:
        return sorted(o for o, v in self.verdicts.items() if v["verdict"] in (PASS, FAIL) and o in ORACLES)

    @property
    def oracles_skipped(self) -> dict[str, str]:
        return {o: v["why"] for o, v in self.verdicts.items()
                if v["verdict"] in (NOT_APPLICABLE, NOT_ASKED, NOT_JUDGED)}

    def failing(self) -> list[str]:
        return sorted(self.failures, key=_oracle_order)

    def summary(self) -> str:
        """``numerics: pass; interface: refusals FAIL (2 rows)`` — the two halves of a verdict apart."""
        parts = []
        for group, members in ORACLE_GROUPS.items():
            failed = [o for o in members if self.verdicts.get(o, {}).get("verdict") == FAIL]
            judged = [o for o in members if self.verdicts.get(o, {}).get("verdict") == PASS]
            if failed:
                parts.append(f"{group}: " + ", ".join(
                    f"{o} FAIL" + (f" ({self.verdicts[o]['rows']} rows)" if "rows" in self.verdicts[o] else "")
                    for o in failed))
            else:
                parts.append(f"{group}: " + ("pass" if judged else "not judged"))
        others = [o for o in self.failing() if o not in ORACLES]
        unjudged = [f"not judged: {self.annotations['not_judged']}"] if "not_judged" in self.annotations else []
        return "; ".join(parts + [f"{o}: FAIL" for o in others] + unjudged)

    def record(self) -> dict:
        """The certificate's entry for this cell."""
        record = {
            "status": self.status,
            "examples": self.examples,
            "worst_kernel_error_ulp": _json_number(self.worst_kernel_error_ulp),
            "worst_stock_error_ulp": _json_number(self.worst_stock_error_ulp),
            "stock_disagreements": self.stock_disagreements,
            "refused_examples": self.refused_examples,
            "oracles": self.oracles_run,
            "skipped": self.oracles_skipped,
            "verdicts": dict(sorted(self.verdicts.items(), key=lambda item: _oracle_order(item[0]))),
        }
        if self.exercised:
            record["exercised"] = self.exercised
        if self.failure is not None:
            record["failure"] = {"oracle": self.failure.oracle, "message": self.failure.message,
                                 "recipe": self.failure.recipe}
        return {**record, **self.annotations}

    @classmethod
    def from_record(cls, op: str, cell_id: str, record: dict) -> "CellResult":
        """The inverse of :meth:`record` (how a result crosses from a worker process)."""
        known = {"status", "examples", "worst_kernel_error_ulp", "worst_stock_error_ulp", "stock_disagreements",
                 "refused_examples", "oracles", "skipped", "failure", "verdicts", "exercised"}
        verdicts = {name: dict(verdict) for name, verdict in record.get("verdicts", {}).items()}
        failures = {}
        for name, verdict in verdicts.items():
            if verdict["verdict"] == FAIL:
                failures[name] = OracleFailure(name, verdict["finding"])
                failures[name].recipe = verdict.get("recipe")
        if "failure" in record and record["failure"]["oracle"] not in failures:  # a record without verdicts
            failure = OracleFailure(record["failure"]["oracle"], record["failure"]["message"])
            failure.recipe = record["failure"]["recipe"]
            failures[failure.oracle] = failure
            verdicts[failure.oracle] = _fail_verdict(failure)
        return cls(op, cell_id, record["status"], record["examples"], float(record["worst_kernel_error_ulp"]),
                   float(record["worst_stock_error_ulp"]), record["stock_disagreements"], verdicts, failures,
                   dict(record.get("exercised", {})), {k: v for k, v in record.items() if k not in known},
                   refused_examples=record.get("refused_examples", 0))


def _fail_verdict(failure: OracleFailure, **extra) -> dict:
    return {"verdict": FAIL, "finding": failure.message, "recipe": failure.recipe, **extra}


def _json_number(value: float):
    return value if math.isfinite(value) else str(value)


def _is_span(bound) -> bool:
    """An integer range of a cell (``ops.catalog.Span``, read by shape: the battery imports no op layer)."""
    return isinstance(getattr(bound, "lo", None), int) and isinstance(getattr(bound, "hi", None), int)


def _exercise(exercised: dict, params: Mapping, recipe: Mapping, bounds: Mapping) -> None:
    """Widen ``exercised`` by one input: a [lo, hi] per integer dimension, the values seen per other one
    (dtypes, flags; and the recipe's value classes and layouts, which are no cell dimension)."""
    seen = {name: params.get(name) for name in bounds}
    seen.update({name: value for name, value in recipe.items() if isinstance(value, str) and name not in seen})
    for name, value in seen.items():
        if _is_span(bounds.get(name)) and isinstance(value, int):
            lo, hi = exercised.get(name, [value, value])
            exercised[name] = [min(lo, value), max(hi, value)]
        else:
            text = str(value).removeprefix("torch.")
            exercised[name] = sorted(set(exercised.get(name, [])) | {text})


def narrowing(cell, exercised: dict, device: torch.device) -> dict:
    """``{"narrowed_by": why, "declared": {dim: [lo, hi]}}`` when the examples stayed inside a smaller
    region than the cell declares (every strategy caps sizes on the CPU only), else ``{}``."""
    declared = {name: [bound.lo, bound.hi] for name, bound in cell.bounds.items()
                if _is_span(bound) and name in exercised and exercised[name] != [bound.lo, bound.hi]}
    if not declared:
        return {}
    why = CPU_SIZE_CAP if device.type == "cpu" else "not reached by the corner and drawn inputs"
    return {"narrowed_by": why, "declared": declared}


class Battery:
    """Runs the applicable oracles on one op's implementation, on one device."""

    def __init__(self, entry, impl: Implementation, device: torch.device, strategy, watch: Watch | None = None,
                 graph_parity_skipped: str | None = None, cell=None):
        self.entry = entry
        self.cell_bounds = cell.bounds if cell is not None else {}  # what ``exercised`` is measured against
        self.graph_parity_skipped = graph_parity_skipped  # why graph parity is not asked here (None: it is)
        self.impl = Implementation(impl.label, {name: _Called(fn, self) for name, fn in impl.functions.items()})
        self.fn = self.impl[entry.name]
        self.device = torch.device(device)
        self.strategy = strategy
        self.watch = watch
        self.recipe: dict = {}
        self.oracle = "parity"

    def _enter(self, oracle: str) -> None:
        """``oracle`` runs now on ``self.recipe`` (told to ``watch``)."""
        self.oracle = oracle
        if self.watch:
            self.watch(oracle, self.recipe)

    def _internal(self, what: str, error: BaseException) -> JudgeError:
        """``error``, raised by the judge's own ``what``, as the internal error it is (where it happened)."""
        found = judge_error(what, error, self.oracle)
        found.oracle, found.recipe = found.oracle or self.oracle, found.recipe or self.recipe
        return found

    def _judge_side(self, what: str, call: Callable, *args):
        """``call(*args)``, a piece of the judge (the reference, the truth): what it raises is an internal error."""
        try:
            return call(*args)
        except JudgeError:
            raise
        except Exception as error:  # noqa: BLE001 - the judge's own defect, never the implementation's finding
            raise self._internal(what, error) from error

    def _refusal(self, kwargs: dict) -> Exception | None:
        """The contract's refusal of these inputs (its validation's error), or None when it answers them."""
        try:
            self.entry.validate(**self.entry.bind(**kwargs))
        except (ValueError, TypeError) as refusal:
            return refusal
        return None

    def not_applicable(self) -> dict[str, str]:
        """Oracle -> why it does not apply to this entry on this device."""
        why = {}
        if not self.entry.batch_invariant:
            why["batch_invariance"] = "the contract declares no batch invariance"
        if self.graph_parity_skipped:
            why["graph_parity"] = self.graph_parity_skipped
        elif not graph_parity_applies(self.device):
            why["graph_parity"] = f"no CUDA graphs on {self.device.type}"
        if not self.entry.properties:
            why["stateful"] = "the contract declares no stateful properties"
        return why

    def judge(self, recipe: dict, asked: Iterable[str], result: CellResult | None = None) -> dict[str, OracleFailure]:
        """Run the ``asked`` per-example oracles on one recipe; returns each failing one's finding.  Any
        exception the implementation raises is the finding of the oracle that called it; one the judge's
        own code raises (building the inputs, the reference, the truth, a comparison) is a
        :class:`JudgeError`, raised.  ``result`` (when given) collects the band errors, stock
        disagreements and exercised region."""
        entry, fn, asked = self.entry, self.fn, [o for o in NUMERICS if o in set(asked)]
        self.recipe = recipe
        if not asked:
            return {}
        self._enter(asked[0])
        kwargs = self._judge_side("building the recipe's inputs", self.strategy.build, recipe, self.device)
        refusal = self._refusal(kwargs)
        if refusal is not None:  # judged on it, an implementation's assert would stand as a finding
            raise self._internal("the strategy", RefusedInput(f"the strategy built an input the contract refuses "
                                                              f"({type(refusal).__name__}: {refusal})"))
        if result is not None:
            _exercise(result.exercised, entry.params_of(**kwargs), recipe, self.cell_bounds)
        # an optional in-place argument passed as None (no amax to update) is not an output of this call
        in_place = tuple(name for name in entry.in_place if kwargs[name] is not None)
        # determinism's second call goes with the first (one message to a host)
        try:
            ran = run_on_copies(fn, kwargs, in_place, 2 if "determinism" in asked else 1)
            if isinstance(ran[0], Exception):
                raise ran[0]
            actual, second = ran[0], (ran[1] if len(ran) > 1 else None)
        except Raised as raised:  # no output: the other oracles have nothing to judge here
            error = raised.error
            if is_clear_refusal(error, kwargs):
                # an input the contract answers, beyond the implementation's own limits: refusing it clearly
                # is allowed (CONTRACTS.md); counted, and nothing else is judged on it
                if result is not None:
                    result.refused_examples += 1
                return {}
            if limitation_in(str(error)):   # the interpreter's, not the implementation's
                raise _Unrunnable(limitation_in(str(error))) from error
            return {asked[0]: OracleFailure(asked[0], f"raised {type(error).__name__}: {error}")}
        except OracleFailure as failure:  # what the call returned breaks the contract, or its process ended
            return {asked[0]: OracleFailure(asked[0], failure.message)}
        except JudgeError:
            raise
        except Exception as error:  # noqa: BLE001 - copying the inputs or reading the outputs: the judge's
            raise self._internal(f"the {asked[0]} oracle's call of the implementation", error) from error
        # every oracle after this one reads the outputs: they are what the contract promises first (a wrong
        # shape would crash the judge's slicing, and be taken for the judge's own error)
        expected = self._judge_side("the reference", run_on_copy, entry.reference, kwargs, in_place)
        against = "vs the contract's reference" if entry.parity.value == "bitwise" else "vs float64 truth"
        try:
            check_contract_outputs(actual, expected, against, oracle=asked[0])
        except OracleFailure as failure:
            return {asked[0]: failure}

        def parity():
            stock = self._stock(kwargs, in_place)
            explain = getattr(self.strategy, "explain", None)  # the op's own words for a differing element
            truth, orders = None, None
            if entry.parity.value == "band":
                truth = self._judge_side("the float64 truth", lambda: as_outputs(entry.truth(**clone_inputs(kwargs))))
                orders = self._judge_side("the reference's legitimate orders", legitimate_outputs,
                                          entry.legitimate_orders, kwargs, in_place)
            _, report = check_parity(entry, kwargs, actual, in_place, stock, explain, expected, truth, orders)
            if entry.parity.value == "bitwise":
                if result is not None and stock is not None and \
                        any(first_difference(s, e) for s, e in zip(stock, expected)):
                    result.stock_disagreements += 1
            else:
                if result is not None:
                    _record_band(result, report, recipe)
                    by_size = result.annotations.setdefault("errors_by_size", [])
                    if len(by_size) < ERRORS_BY_SIZE:  # the report's plot of error against size (elements out)
                        by_size.append([sum(o.numel() for o in actual), *(_json_number(float(f"{e:.3g}")) for e in
                                                                          (report.kernel_error_ulp, report.stock_error_ulp))])

        def graph_parity():
            same_shape = [self.strategy.build({**recipe, "seed": recipe["seed"] + i}, self.device)
                          for i in range(MIN_REPLAYS + 1)]
            check_graph_parity(fn, same_shape, [kwargs], in_place)

        checks = {
            "parity": parity,
            "determinism": lambda: check_determinism(fn, kwargs, in_place, first=actual, second=second),
            "batch_invariance": lambda: check_batch_invariance(fn, kwargs, entry.batch_args,
                                                               full=actual[:len(actual) - len(in_place)]),
            "graph_parity": graph_parity,
            "write_guards": lambda: check_write_guards(fn, kwargs, in_place),
            "stateful": lambda: check_properties(entry.properties, self.impl, kwargs),
        }
        found = {}
        for oracle in asked:
            self._enter(oracle)
            try:
                checks[oracle]()
            except OracleFailure as failure:
                found[oracle] = failure
            except Raised as raised:  # the implementation raised: a finding of the oracle that called it
                found[oracle] = OracleFailure(oracle, f"raised {raised}")
            except JudgeError:
                raise
            except Exception as error:  # noqa: BLE001 - the oracle's own code: the judge's defect
                raise self._internal(f"the {oracle} oracle's own code", error) from error
        return found

    def _stock(self, kwargs: dict, in_place: tuple[str, ...]):
        """The stock op's outputs, or None when it cannot take this input (recorded, not a failure)."""
        try:
            return run_stock_on_copy(self.entry.stock, kwargs, in_place)
        except Exception as error:  # noqa: BLE001 - only running out of memory comes back: the judge's failure
            raise self._internal("the stock op", error) from error

    def check_refusals(self) -> tuple[int, list[str]]:
        """Every row of the contract's refusal table: (rows checked, the findings of those that failed)."""
        self.recipe = REFUSALS_RECIPE
        self._enter("refusals")
        findings = []
        for refusal in self.entry.refusals:
            try:
                # the implementation's own exception is what this oracle judges: the function unwrapped
                check_refusals(self.fn.fn, [refusal], self.device)
            except OracleFailure as failure:
                findings.append(failure.message)
            except JudgeError:
                raise
            except Exception as error:  # noqa: BLE001 - making the refused input, or reading it back
                raise self._internal(f"the refusals oracle ({refusal.what})", error) from error
        return len(self.entry.refusals), findings


class RefusedInput(JudgeError):
    """A recipe whose input the contract refuses: no input at all (drawn, the strategy's defect; proposed by
    a shrinker, a candidate to skip)."""


class _Called:
    """An implementation's function as the oracles call it.  What escapes the call is the implementation's
    (:class:`Raised`), but for the judge's own findings and errors, which pass as they are (a hosted
    function raises OracleFailure for a host that ended, JudgeError for its own transfer failing).  The
    outputs of a function run in this process are checked for aliasing here; a hosted one's outputs are
    the judge's copies, checked from the host's facts (``tools/engine/impl_executor.py``)."""

    HOSTED = ("call_poisoned", "capture_graph")   # what a hosted function offers the oracles besides a call

    def __init__(self, fn: Callable, battery: Battery):
        self.fn, self.battery = fn, battery

    def _raising(self, call: Callable, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except (OracleFailure, JudgeError):
            raise
        except Exception as error:  # noqa: BLE001 - whatever it raises is the implementation's
            raise self._raised(error) from error

    def _raised(self, error: Exception) -> Raised:
        """What the implementation raised (in this process, or rebuilt from its host's), as the oracles take
        it; running out of memory is the machine's, not the implementation's: raised as the judge's."""
        if out_of_memory(error):
            held = allocations.memory_held()
            found = JudgeError(f"the implementation's call ran out of memory ({type(error).__name__}: {error}"
                               f"{'; the judge process: ' + held if held else ''})",
                               self.battery.oracle, self.battery.recipe)
            found.__cause__ = error
            raise found
        return Raised(error)

    def __call__(self, *args, **kwargs):
        returned = self._raising(self.fn, *args, **kwargs)
        if returned is not None and not isinstance(returned, (torch.Tensor, tuple, list)):
            raise OracleFailure(self.battery.oracle, f"returned {type(returned).__module__}."
                                                     f"{type(returned).__qualname__}: the contract's outputs are "
                                                     f"exactly torch.Tensor (no subclass), several in a tuple")
        outputs = [item for item in as_outputs(returned) if isinstance(item, torch.Tensor)]
        arguments = {str(name): storage_key(value) for name, value in (*enumerate(args), *kwargs.items())
                     if isinstance(value, torch.Tensor)}
        problem = aliasing(outputs, [storage_key(output) for output in outputs], arguments)
        if problem:
            raise OracleFailure(self.battery.oracle, problem)
        return returned

    def call_many(self, calls: list[dict]) -> list:
        """Several calls (``oracles/calls.py``; one message where the function is hosted): each one's outputs,
        or what stopped them as the last item — :class:`Raised` for the implementation's exception."""
        offered = getattr(self.fn, "call_many", None)
        if offered is None:
            results = []
            for kwargs in calls:
                try:
                    results.append(self(**kwargs))
                except (Raised, OracleFailure) as stopped:
                    results.append(stopped)
                    break
            return results
        judges = (OracleFailure, JudgeError)
        return [self._raised(result) if isinstance(result, Exception) and not isinstance(result, judges) else result
                for result in self._raising(offered, calls)]

    def __getattr__(self, name: str):
        if name not in self.HOSTED:
            raise AttributeError(name)
        offered = getattr(self.__dict__["fn"], name)   # AttributeError: a function of this process

        @functools.wraps(offered)
        def call(*args, **kwargs):
            returned = self._raising(offered, *args, **kwargs)
            if name == "capture_graph":  # the replays run the implementation too
                captured, replay = returned
                called_replay = functools.partial(self._raising, replay)
                if hasattr(replay, "between"):   # a hosted replay sends the calls around it in one message
                    called_replay.between = functools.partial(self._raising, replay.between)
                return captured, called_replay
            return returned

        return call


def _record_band(result: CellResult, report: BandReport, recipe: dict) -> None:
    """Widen the cell's band record by one example: the worst kernel and stock errors, the worst E and
    the implementation that set it, the widest band applied, and why a legitimate one was left out."""
    result.worst_kernel_error_ulp = max(result.worst_kernel_error_ulp, report.kernel_error_ulp)
    result.worst_stock_error_ulp = max(result.worst_stock_error_ulp, report.stock_error_ulp)
    band = result.annotations.setdefault("band", {"worst_legitimate_error_ulp": 0.0, "set_by": None,
                                                  "worst_allowed_ulp": 0.0, "limit_ulp": report.limit_ulp})
    if report.legitimate_error_ulp >= band["worst_legitimate_error_ulp"]:
        band["worst_legitimate_error_ulp"], band["set_by"] = report.legitimate_error_ulp, report.band_set_by
    band["worst_allowed_ulp"] = max(band["worst_allowed_ulp"], report.allowed_error_ulp)
    if report.legitimate_failures:  # a legitimate implementation said nothing about the band: say why
        failures = result.annotations.setdefault("legitimate_failures", {"examples": 0, "first": None})
        failures["examples"] += 1
        failures["first"] = failures["first"] or f"{report.legitimate_failures} on {recipe_json(recipe)}"


class _Shrink:
    """A bounded shrink of one oracle's failure: Hypothesis replays the cell's draws (same seed, so the
    same examples up to the failing one) judging that oracle alone.  Past ``SHRINK_SECONDS`` after the
    first failure, unseen recipes pass without running, and seen failing ones fail again without
    running, so Hypothesis stops where it is and reports the smallest recipe found so far."""

    def __init__(self, battery: Battery, oracle: str):
        self.battery, self.oracle = battery, oracle
        self.failed: dict[str, OracleFailure] = {}
        self.started: float | None = None

    def __call__(self, recipe: dict) -> None:
        key = recipe_json(recipe)
        if self.started is not None and time.monotonic() - self.started > SHRINK_SECONDS:
            if key in self.failed:
                raise self.failed[key]
            return
        try:
            failure = self.battery.judge(recipe, [self.oracle]).get(self.oracle)
        except RefusedInput:
            # a smaller recipe the contract refuses (H not a multiple of the group) is no input at all: an
            # implementation's assert on it must never stand as the minimal finding
            hypothesis.assume(False)
        if failure is not None:
            self.started = self.started or time.monotonic()
            failure.recipe = recipe
            self.failed[key] = failure
            raise failure


def _shrink_corner(battery: Battery, cell, oracle: str, failure: OracleFailure) -> OracleFailure:
    """Shrink each integer size of a failing corner to the smallest size of a ladder (``_size_ladder``)
    at which the recipe stays inside the cell and the contract and the oracle still fails; bounded by
    ``SHRINK_SECONDS``."""
    started, best = time.monotonic(), failure

    def fails(recipe: dict) -> OracleFailure | None:
        try:
            kwargs = battery.strategy.build(recipe, battery.device)
            if not cell.contains(battery.entry.params_of(**kwargs)):
                return None
        except Exception:  # noqa: BLE001 - a size the strategy cannot build is outside what we may try
            return None
        try:
            found = battery.judge(recipe, [oracle]).get(oracle)
        except RefusedInput:  # the contract refuses it: no input at all
            return None
        if found is not None:
            found.recipe = recipe
        return found

    for name, value in list(failure.recipe.items()):
        if name == "seed" or not isinstance(value, int) or isinstance(value, bool):
            continue
        lo = getattr(cell.bounds.get(name), "lo", 0)
        # smallest first: a failure that hangs on a value planted by the seed is not monotone in the size,
        # so bisecting from the corner stops at whatever size it first passes (V = 112640); a size threshold
        # is then bisected between the last ladder size that passed and the first that failed
        passed = lo - 1
        for size in _size_ladder(lo, best.recipe[name]):
            if time.monotonic() - started > SHRINK_SECONDS:
                break
            found = fails({**best.recipe, name: size})
            if found is None:
                passed = size
                continue
            best, low, high = found, passed + 1, size
            while low < high and time.monotonic() - started < SHRINK_SECONDS:
                middle = (low + high) // 2
                found = fails({**best.recipe, name: middle})
                if found is not None:
                    best, high = found, middle
                else:
                    low = middle + 1
            break
    return best


def _size_ladder(lo: int, hi: int) -> list[int]:
    """Sizes from ``lo`` up to below ``hi`` to try, smallest first: the bottom of the span, the block edges
    (powers of two and one either side), and ``hi`` halved down."""
    sizes = {lo, lo + 1, lo + 2, *(hi >> k for k in range(1, hi.bit_length()))}
    sizes |= {edge + step for k in range(hi.bit_length()) for edge in (1 << k,) for step in (-1, 0, 1)}
    return sorted(size for size in sizes if lo <= size < hi)


def run_cell(entry, impl: Implementation, cell, device, *, max_examples: int, seed: int = 0,
             shrink: bool = True, strategy, progress: Callable[[str], None] | None = None,
             note: Callable[[str], None] | None = None, watch: Watch | None = None,
             graph_parity_skipped: str | None = None, oracles: Iterable[str] = ORACLES) -> CellResult:
    """Run the battery over one cell: corners, then ``max_examples`` Hypothesis draws, judging the
    ``oracles`` asked (default: all; fewer make a partial run, whose status is at best "passed").
    ``progress`` hears of each example judged, ``note`` of anything else worth a line (a shrink begun)."""
    battery = Battery(entry, impl, device, strategy, watch, graph_parity_skipped, cell)
    result = CellResult(entry.name, cell.id, CERTIFIED)
    asked = set(oracles)
    for oracle, why in battery.not_applicable().items():
        result.verdicts[oracle] = {"verdict": NOT_APPLICABLE, "why": why}
    for oracle in ORACLES:
        if oracle not in asked and oracle not in result.verdicts:
            result.verdicts[oracle] = {"verdict": NOT_ASKED, "why": "partial run: not among --oracles"}
    live = [o for o in NUMERICS if o in asked and o not in result.verdicts]

    corners = battery.strategy.corners(cell, battery.device) if live else []
    planned = len(corners) + (max_examples if live else 0)
    from_corner: set[str] = set()

    def check(recipe: dict, corner: bool) -> None:
        remaining = [o for o in live if o not in result.failures]
        if not remaining or "not_judged" in result.annotations:
            return
        refused = result.refused_examples
        try:
            found = battery.judge(recipe, remaining, result)
        except _Unrunnable as unrunnable:
            result.annotations["not_judged"] = str(unrunnable)
            return
        finally:
            allocations.give_back_cache()
        for oracle, failure in found.items():
            failure.recipe = recipe
            result.failures[oracle] = failure
            if corner:
                from_corner.add(oracle)
        if result.refused_examples == refused:   # a clearly refused input is counted apart, never as judged
            result.examples += 1
        if progress:
            progress(f"{entry.name}/{cell.id}: {result.examples}/{planned} examples")

    for recipe in corners:
        check(recipe, corner=True)
    internal: list[JudgeError] = []

    def explore(judge_one: Callable[[dict], None], phases) -> None:
        @over_cell_draws(battery.strategy, cell, battery.device, max_examples, seed, phases,
                         report_multiple_bugs=False, print_blob=False, verbosity=hypothesis.Verbosity.quiet)
        def test(recipe):
            if internal:  # the judge failed: nothing more is judged, and Hypothesis must not shrink it
                return
            try:
                judge_one(recipe)
            except JudgeError as error:
                internal.append(error)

        test()
        if internal:
            raise internal[0]

    if max_examples > 0 and live:
        explore(lambda recipe: check(recipe, corner=False), [hypothesis.Phase.generate])
    for oracle in [o for o in live if o in result.failures] if shrink else []:
        if note:
            note(f"{entry.name}/{cell.id}: {oracle} failed after {result.examples} examples; shrinking it")
        if oracle in from_corner:
            result.failures[oracle] = _shrink_corner(battery, cell, oracle, result.failures[oracle])
            continue
        try:
            explore(_Shrink(battery, oracle), [hypothesis.Phase.generate, hypothesis.Phase.shrink])
        except OracleFailure as shrunk:
            result.failures[oracle] = shrunk
        except hypothesis.errors.FlakyFailure as flaky:
            # the failure did not reproduce on the same recipe: flaky is failing
            first = next(e for e in flaky.exceptions if isinstance(e, OracleFailure))
            flaky_failure = OracleFailure("determinism", f"fails only sometimes on the same input: {first}")
            flaky_failure.recipe = first.recipe
            flaky_failure.__cause__ = flaky
            result.failures.setdefault("determinism", flaky_failure)
    if live and result.examples == 0 and result.refused_examples:
        # refusing an input beyond one's own limits is allowed; refusing every input leaves nothing judged
        nothing = OracleFailure(live[0], f"refused all {result.refused_examples} examples of the cell: no answer "
                                         f"was judged (a cell passes only on inputs the implementation answers)")
        nothing.recipe = None
        result.failures[live[0]] = nothing
    for oracle in live:
        if oracle in result.failures:
            result.verdicts[oracle] = _fail_verdict(result.failures[oracle])
        elif "not_judged" in result.annotations:
            result.verdicts[oracle] = {"verdict": NOT_JUDGED, "why": result.annotations["not_judged"]}
        else:
            result.verdicts[oracle] = {"verdict": PASS, "examples": result.examples}
    if "determinism" in result.failures and result.verdicts["determinism"]["verdict"] != FAIL:
        result.verdicts["determinism"] = _fail_verdict(result.failures["determinism"])
    # last: an implementation that skips the contract's checks may crash on a refused input (an
    # out-of-bounds read under the interpreter), and that must not cost the numerics their verdicts
    if "refusals" in asked:
        rows, findings = battery.check_refusals()
        if findings:
            failure = OracleFailure("refusals", "\n".join(findings))
            failure.recipe = REFUSALS_RECIPE
            result.failures["refusals"] = failure
            result.verdicts["refusals"] = _fail_verdict(failure, rows=len(findings), of_rows=rows)
        else:
            result.verdicts["refusals"] = {"verdict": PASS, "rows": rows}
    result.status = _status(result)
    if result.exercised:
        result.annotations.update(narrowing(cell, result.exercised, battery.device))
    return result


class _Unrunnable(Exception):
    """The implementation hit what this machine cannot run (``oracles/triton_interpreter.py``)."""


def _status(result: CellResult) -> str:
    """failed when any oracle failed; certified when every applicable oracle was judged; else passed."""
    if result.failures:
        return FAILED
    if "not_judged" in result.annotations:
        return NOT_JUDGED
    return PASSED if any(v["verdict"] == NOT_ASKED for v in result.verdicts.values()) else CERTIFIED


def replay(entry, impl: Implementation, cell, device, recipe: dict, strategy,
           watch: Watch | None = None, graph_parity_skipped: str | None = None,
           oracles: Iterable[str] = ORACLES) -> CellResult:
    """Run the battery on one recipe (what a reproduction line does)."""
    battery = Battery(entry, impl, device, strategy, watch, graph_parity_skipped, cell)
    result = CellResult(entry.name, cell.id, CERTIFIED)
    not_applicable = battery.not_applicable()
    asked = [o for o in NUMERICS if o in set(oracles) and o not in not_applicable]
    for oracle, failure in battery.judge(recipe, asked, result).items():
        failure.recipe = recipe
        result.failures[oracle] = failure
    result.examples = 1
    for oracle in ORACLES:
        if oracle in not_applicable:
            result.verdicts[oracle] = {"verdict": NOT_APPLICABLE, "why": not_applicable[oracle]}
        elif oracle not in asked:
            result.verdicts[oracle] = {"verdict": NOT_ASKED, "why": "a replay judges one recipe's oracles"
                                       if oracle == "refusals" else "partial run: not among --oracles"}
        elif oracle in result.failures:
            result.verdicts[oracle] = _fail_verdict(result.failures[oracle])
        else:
            result.verdicts[oracle] = {"verdict": PASS, "examples": 1}
    result.status = FAILED if result.failures else PASSED
    return result


def recipe_json(recipe: dict) -> str:
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))
