"""One op's suite, declared as tables: the tests every op's suite has are generated here.

An op's suite (``suites/<family>/test_<module>.py``) declares an :class:`OpSuite` — its entry, how an
implementation is named (usually a function of ``suites/<family>/<op>_impls.py``), the wrong
implementations with the cell whose corners reach each bug and the oracle that must catch it, and a
correct alternative — and binds the tests it wants under the names it wants::

    SUITE = OpSuite.of_module(ENTRY, impls, wrong=[("nan_ignored", "decode_small_batch", "parity")],
                              correct="correct_via_max")
    test_cell = SUITE.cell_test()
    test_battery_rejects = SUITE.rejects_test(max_examples=10)
    test_battery_accepts_another_correct_implementation = SUITE.accepts_test()

- ``cell_test``: every cell of the entry through the whole battery, on the catalog kernel.
- ``rejects_test``: the negative controls: the battery must reject each wrong implementation, through
  the oracle named (or one of the oracles named, where either may see the bug first).
- ``accepts_test``: the correct alternative passes on every cell (or the cells named): the oracles do
  not reject an implementation only for being another one.

Test ids are the cell ids and the wrong implementations' names, as the claims gate expects
(``test_cell[<cell id>]``).
"""
from __future__ import annotations

import dataclasses
import functools
import types
from typing import Callable, Sequence

import pytest

from ops.catalog import Entry
from oracles.battery import Implementation
from suites.certification import (assert_certified, assert_rejected, cell_params, certify_cell, judged,
                                  target_oracles)

Oracle = str | tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class OpSuite:
    """The tables of one op's suite.

    - ``entry``: the catalog entry judged.
    - ``judge``: an implementation's name -> the implementation (its op and the contract's siblings); None
      for a suite of no other implementation than the catalog kernel.
    - ``wrong``: ``(name, cell id, oracle)``: a wrong implementation, the cell whose corners reach its bug,
      the oracle (or oracles) that must catch it.
    - ``correct``: a correct alternative, by name or as an implementation (None: no such test).
    """

    entry: Entry
    judge: Callable[[str], Implementation] | None = None
    wrong: Sequence[tuple[str, str, Oracle]] = ()
    correct: str | Implementation | None = None

    @classmethod
    def of_module(cls, entry: Entry, module: types.ModuleType, **tables) -> "OpSuite":
        """A suite whose implementations are functions of ``module`` (the op's ``*_impls.py``)."""
        return cls(entry, functools.partial(judged, entry, module), **tables)

    def cell_test(self) -> Callable:
        entry = self.entry

        @pytest.mark.parametrize("cell", cell_params(entry))
        def test_cell(cell):
            assert_certified(certify_cell(entry, cell))

        return test_cell

    def rejects_test(self, max_examples: int = 0) -> Callable:
        """``max_examples`` drawn inputs besides the corners (no shrinking: only the verdict is judged), judged
        by the oracle (or oracles) the row says must catch the mistake: the control is of that oracle, and the
        others would judge every corner of a kernel they pass (a wrong refusal's numbers are right)."""
        entry, judge = self.entry, self.judge

        @pytest.mark.parametrize("name, cell_id, oracle", self.wrong, ids=[row[0] for row in self.wrong])
        def test_battery_rejects(name, cell_id, oracle):
            impl = judge(name)
            result = certify_cell(entry, entry.cell(cell_id), impl, max_examples=max_examples, shrink=False,
                                  oracles=target_oracles(oracle))
            assert_rejected(result, oracle, impl.label)

        return test_battery_rejects

    def accepts_test(self, cell_ids: Sequence[str] | None = None, max_examples: int | None = None) -> Callable:
        """The correct alternative on ``cell_ids`` (default every cell), with ``max_examples`` draws (default
        the Hypothesis profile's)."""
        if self.correct is None:
            raise ValueError(f"{self.entry.name}: the suite declares no correct alternative")
        entry = self.entry
        correct = self.judge(self.correct) if isinstance(self.correct, str) else self.correct
        cells = entry.cells if cell_ids is None else [entry.cell(cell_id) for cell_id in cell_ids]
        options = {} if max_examples is None else {"max_examples": max_examples}

        @pytest.mark.parametrize("cell", [pytest.param(cell, id=cell.id) for cell in cells])
        def test_battery_accepts(cell):
            assert_certified(certify_cell(entry, cell, correct, **options), correct.label)

        return test_battery_accepts
