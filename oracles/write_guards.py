"""Write guards: outputs fully written, nothing written outside, immutable inputs untouched.

- Every tensor the implementation allocates with ``torch.empty``/``empty_like``/``empty_strided``/
  ``new_empty`` (outputs and scratch) is handed out poisoned, from inside a larger buffer whose
  margins hold canary bytes.  The call runs twice, poisoned with two different byte patterns: an
  output element that the op does not write shows the poison, so the two runs differ there.
- Mutable (in-place) arguments are moved into canary-margined buffers of the same layout.
- Canary margins must be intact after the call: a write just past either end of an allocation is
  caught there.
- Every other tensor argument's whole storage (view padding included) must be bitwise unchanged.

An implementation that runs in another process (``tools/engine/impl_executor.py``) offers
``fn.call_poisoned(kwargs, poison)``: its host poisons the allocations with the pattern the judge
chose and sends each output's whole margined buffer, whose canaries the judge checks itself.
Anything else is called here, under :class:`~oracles.allocations.PoisonedAllocations`.
"""
from __future__ import annotations

from typing import Callable

from oracles.allocations import PoisonedAllocations, in_margined_buffer, margin_bytes, margins_intact
from oracles.bitwise import check_bitwise
from oracles.failures import OracleFailure
from oracles.tensors import as_outputs, changed_storages, clone_inputs, snapshot_storages

POISON_PATTERNS = (0xFF, 0x5A)   # 0xFF: NaN for every float width, -1 for ints


def poisoned_call(fn: Callable, kwargs: dict, poison: int) -> tuple[tuple, list[str]]:
    """``fn(**kwargs)`` with every allocation poisoned: its outputs, and the allocations whose canary
    margins it overwrote (in words)."""
    call_poisoned = getattr(fn, "call_poisoned", None)
    if call_poisoned is not None:
        return call_poisoned(kwargs, poison)
    with PoisonedAllocations(poison) as allocations:
        result = as_outputs(fn(**kwargs))
    return result, allocations.overwritten_margins()


def _guarded_run(fn: Callable, kwargs: dict, in_place: tuple[str, ...], poison: int) -> tuple:
    guarded = clone_inputs(kwargs)
    margins = {}
    for name in in_place:
        original = guarded[name]
        tensor, buffer = in_margined_buffer(original.shape, original.stride(), original.dtype, original.device, 0)
        tensor.copy_(original)
        guarded[name], margins[name] = tensor, buffer
    immutable = snapshot_storages(guarded, skip=in_place)
    result, outside = poisoned_call(fn, guarded, poison)
    outside += [f"in-place argument {name!r}" for name, buffer in margins.items()
                if not margins_intact(buffer, margin_bytes(guarded[name].element_size()))]
    if outside:
        raise OracleFailure("write_guards", f"wrote outside the bounds of {'; '.join(outside)}")
    changed = changed_storages(guarded, immutable)
    if changed:
        raise OracleFailure("write_guards", f"modified inputs the contract does not let it write: "
                                            f"{', '.join(changed)}")
    return result + tuple(guarded[name] for name in in_place)


def check_write_guards(fn: Callable, kwargs: dict, in_place: tuple[str, ...] = ()) -> None:
    first = _guarded_run(fn, kwargs, in_place, POISON_PATTERNS[0])
    second = _guarded_run(fn, kwargs, in_place, POISON_PATTERNS[1])
    check_bitwise(second, first, "outputs under two different allocation poisons (an element the op "
                                 "does not write shows the poison)", oracle="write_guards")
