"""Several calls of one function in a row, as one message where the function runs in another process.

An implementation run by its host (``tools/engine/impl_executor.py``) offers ``fn.call_many(calls)``:
the calls go in one message and the host settles once after the last (a round trip and a settle cost more
than the kernels the oracles call).  Anything else is called here, one call after another.
"""
from __future__ import annotations

from typing import Callable

from oracles.tensors import as_outputs


def call_each(fn: Callable, calls: list[dict]) -> list:
    """``fn(**kwargs)`` for each of ``calls``, in order: each one's outputs (a tuple), or the exception it
    raised — the last item then; the calls after it do not run."""
    call_many = getattr(fn, "call_many", None)
    if call_many is not None:
        return [result if isinstance(result, Exception) else as_outputs(result) for result in call_many(calls)]
    results = []
    for kwargs in calls:
        try:
            results.append(as_outputs(fn(**kwargs)))
        except Exception as error:  # noqa: BLE001 - handed to the oracle, which raises it where the call was
            results.append(error)
            break
    return results
