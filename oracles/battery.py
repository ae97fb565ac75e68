"""The oracle battery: what "certified" means for one (op, cell) on one architecture.

Per example (a *recipe*: a small JSON-able dict of sizes, layout, value mode and a ``seed``, which an
op's strategy module turns into tensors on the device):

1. parity — bitwise or band vs the reference (band: kernel and stock error vs float64 truth)
2. determinism — the same input twice, bitwise equal
3. batch invariance — where the entry declares it
4. graph parity — CUDA only: capture once, replay with the recipe under other seeds
5. write guards — poisoned outputs fully written, canaries intact, immutable inputs untouched
6. stateful properties — the contract's own properties (rollback, replay equivalence)
and once per cell: 7. refused inputs.

A cell runs its fixed corner recipes first, then Hypothesis-drawn ones (seeded from a stable digest
of the cell id), shrinking a failure to a minimal recipe.  The caller gives the op's strategy module
(``ops.catalog.Entry.strategy_module``), which provides ``recipes(cell, device)``, ``corners(cell, device)``
and ``build(recipe, device)``; a recipe's shapes never depend on its ``seed``.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Mapping

import hypothesis
import torch
from hypothesis import HealthCheck

from oracles.band import check_band
from oracles.batch_invariance import check_batch_invariance
from oracles.bitwise import check_bitwise, first_difference
from oracles.determinism import check_determinism, run_on_copy
from oracles.failures import OracleFailure
from oracles.graph import MIN_REPLAYS, check_graph_parity, graph_parity_applies
from oracles.refusals import check_refusals
from oracles.stateful import check_properties
from oracles.tensors import as_outputs, clone_inputs
from oracles.write_guards import check_write_guards

ORACLES = ("parity", "determinism", "batch_invariance", "graph_parity", "write_guards", "stateful", "refusals")
REFUSALS_RECIPE = {"refusals": "the contract's table"}

Watch = Callable[[str, dict], None]
"""``watch(oracle, recipe)``: told before each oracle starts on a recipe, so that a runner outside the
process can name the oracle and the example when the process dies (``tools/engine/isolation.py``)."""


@dataclasses.dataclass
class Implementation:
    """What is being judged: a callable per op name (the op and its contract siblings)."""

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


@dataclasses.dataclass
class CellResult:
    op: str
    cell_id: str
    status: str                       # "certified" | "failed"
    examples: int = 0
    worst_kernel_error_ulp: float = 0.0
    worst_stock_error_ulp: float = 0.0
    stock_disagreements: int = 0      # bitwise ops: examples where the stock op breaks the contract
    oracles_run: list = dataclasses.field(default_factory=list)
    oracles_skipped: dict = dataclasses.field(default_factory=dict)
    failure: OracleFailure | None = None
    annotations: dict = dataclasses.field(default_factory=dict)  # what the runner adds: faults, quarantine

    def record(self) -> dict:
        """The certificate's entry for this cell."""
        record = {
            "status": self.status,
            "examples": self.examples,
            "worst_kernel_error_ulp": _json_number(self.worst_kernel_error_ulp),
            "worst_stock_error_ulp": _json_number(self.worst_stock_error_ulp),
            "stock_disagreements": self.stock_disagreements,
            "oracles": sorted(self.oracles_run),
            "skipped": self.oracles_skipped,
        }
        if self.failure is not None:
            record["failure"] = {"oracle": self.failure.oracle, "message": self.failure.message,
                                 "recipe": self.failure.recipe}
        return {**record, **self.annotations}

    @classmethod
    def from_record(cls, op: str, cell_id: str, record: dict) -> "CellResult":
        """The inverse of :meth:`record` (how a result crosses from a worker process)."""
        known = {"status", "examples", "worst_kernel_error_ulp", "worst_stock_error_ulp", "stock_disagreements",
                 "oracles", "skipped", "failure"}
        failure = None
        if "failure" in record:
            failure = OracleFailure(record["failure"]["oracle"], record["failure"]["message"])
            failure.recipe = record["failure"]["recipe"]
        return cls(op, cell_id, record["status"], record["examples"], float(record["worst_kernel_error_ulp"]),
                   float(record["worst_stock_error_ulp"]), record["stock_disagreements"], list(record["oracles"]),
                   dict(record["skipped"]), failure, {k: v for k, v in record.items() if k not in known})


def _json_number(value: float):
    return value if math.isfinite(value) else str(value)


class Battery:
    """Runs every applicable oracle on one op's implementation, on one device."""

    def __init__(self, entry, impl: Implementation, device: torch.device, strategy, watch: Watch | None = None,
                 graph_parity_skipped: str | None = None):
        self.entry = entry
        self.graph_parity_skipped = graph_parity_skipped  # why graph parity is not asked here (None: it is)
        self.impl = impl
        self.fn = impl[entry.name]
        self.device = torch.device(device)
        self.strategy = strategy
        self.watch = watch
        self.recipe: dict = {}

    def _enter(self, oracle: str) -> None:
        """``oracle`` runs now on ``self.recipe`` (its finding, if it raises; told to ``watch``)."""
        self.current = oracle
        if self.watch:
            self.watch(oracle, self.recipe)

    def check_recipe(self, recipe: dict, result: CellResult) -> None:
        """Run oracles 1-6 on one recipe; any exception the implementation raises is that oracle's finding."""
        self.recipe = recipe
        self._enter("parity")
        try:
            self._check_recipe(recipe, result)
        except OracleFailure:
            raise
        except Exception as error:  # noqa: BLE001 - a crash is a finding of the oracle that was running
            raise OracleFailure(self.current, f"raised {type(error).__name__}: {error}") from error

    def _check_recipe(self, recipe: dict, result: CellResult) -> None:
        entry, fn = self.entry, self.fn
        kwargs = self.strategy.build(recipe, self.device)
        # an optional in-place argument passed as None (no amax to update) is not an output of this call
        in_place = tuple(name for name in entry.in_place if kwargs[name] is not None)
        ran = {"parity", "determinism", "write_guards"}

        # 1. parity
        expected = run_on_copy(entry.reference, kwargs, in_place)
        actual = run_on_copy(fn, kwargs, in_place)
        stock = self._stock(kwargs, in_place)
        if entry.parity.value == "bitwise":
            check_bitwise(actual, expected, "vs the contract's reference")
            if stock is not None and any(first_difference(s, e) for s, e in zip(stock, expected)):
                result.stock_disagreements += 1
        else:
            truth = as_outputs(entry.truth(**clone_inputs(kwargs)))
            report = check_band(actual, stock if stock is not None else expected, truth,
                                "vs float64 truth")
            result.worst_kernel_error_ulp = max(result.worst_kernel_error_ulp, report.kernel_error_ulp)
            result.worst_stock_error_ulp = max(result.worst_stock_error_ulp, report.stock_error_ulp)
        # 2. determinism
        self._enter("determinism")
        check_determinism(fn, kwargs, in_place, first=actual)
        # 3. batch invariance
        self._enter("batch_invariance")
        if entry.batch_invariant:
            check_batch_invariance(fn, kwargs, entry.batch_args, full=actual[:len(actual) - len(in_place)])
            ran.add("batch_invariance")
        # 4. graph parity
        self._enter("graph_parity")
        if self.graph_parity_skipped:
            result.oracles_skipped["graph_parity"] = self.graph_parity_skipped
        elif graph_parity_applies(self.device):
            same_shape = [self.strategy.build({**recipe, "seed": recipe["seed"] + i}, self.device)
                          for i in range(MIN_REPLAYS + 1)]
            check_graph_parity(fn, same_shape, [kwargs], in_place)
            ran.add("graph_parity")
        else:
            result.oracles_skipped["graph_parity"] = f"no CUDA graphs on {self.device.type}"
        # 5. write guards
        self._enter("write_guards")
        check_write_guards(fn, kwargs, in_place)
        # 6. stateful properties
        self._enter("stateful")
        if entry.properties:
            check_properties(entry.properties, self.impl, kwargs)
            ran.add("stateful")
        result.oracles_run = sorted(set(result.oracles_run) | ran)
        result.examples += 1

    def _stock(self, kwargs: dict, in_place: tuple[str, ...]):
        """The stock op's outputs, or None when it cannot take this input (recorded, not a failure)."""
        try:
            return run_on_copy(self.entry.stock, kwargs, in_place)
        except Exception:  # noqa: BLE001 - the stock op's own limits are not the kernel's finding
            return None

    def check_refusals(self, result: CellResult) -> None:
        self.recipe = REFUSALS_RECIPE
        self._enter("refusals")
        try:
            check_refusals(self.fn, self.entry.refusals, self.device)
        except OracleFailure as failure:
            failure.recipe = REFUSALS_RECIPE
            raise
        result.oracles_run = sorted(set(result.oracles_run) | {"refusals"})


def run_cell(entry, impl: Implementation, cell, device, *, max_examples: int, seed: int = 0,
             shrink: bool = True, strategy, progress: Callable[[str], None] | None = None,
             watch: Watch | None = None, graph_parity_skipped: str | None = None) -> CellResult:
    """Run the whole battery over one cell: corners, then ``max_examples`` Hypothesis draws."""
    battery = Battery(entry, impl, device, strategy, watch, graph_parity_skipped)
    result = CellResult(entry.name, cell.id, "certified")

    def check(recipe: dict) -> None:
        try:
            battery.check_recipe(recipe, result)
        except OracleFailure as failure:
            failure.recipe = recipe
            raise
        if progress:
            progress(f"{entry.name}/{cell.id}: {result.examples} examples")

    try:
        battery.check_refusals(result)
        for recipe in battery.strategy.corners(cell, battery.device):
            check(recipe)
        if max_examples > 0:
            phases = [hypothesis.Phase.generate] + ([hypothesis.Phase.shrink] if shrink else [])

            @hypothesis.settings(max_examples=max_examples, deadline=None, database=None, phases=phases,
                                 suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                                 print_blob=False, verbosity=hypothesis.Verbosity.quiet)
            @hypothesis.seed(cell.seed(seed))
            @hypothesis.given(battery.strategy.recipes(cell, battery.device))
            def explore(recipe):
                check(recipe)

            try:
                explore()
            except hypothesis.errors.FlakyFailure as flaky:
                # the failure did not reproduce on the same recipe: flaky is failing
                first = next(e for e in flaky.exceptions if isinstance(e, OracleFailure))
                flaky_failure = OracleFailure("determinism", f"fails only sometimes on the same input: {first}")
                flaky_failure.recipe = first.recipe
                raise flaky_failure from flaky
    except OracleFailure as failure:
        result.status = "failed"
        result.failure = failure
    return result


def replay(entry, impl: Implementation, cell, device, recipe: dict, strategy,
           watch: Watch | None = None, graph_parity_skipped: str | None = None) -> CellResult:
    """Run the battery on one recipe (what a reproduction line does)."""
    battery = Battery(entry, impl, device, strategy, watch, graph_parity_skipped)
    result = CellResult(entry.name, cell.id, "certified")
    try:
        battery.check_recipe(recipe, result)
    except OracleFailure as failure:
        failure.recipe = recipe
        result.status, result.failure = "failed", failure
    return result


def recipe_json(recipe: dict) -> str:
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))
