"""Eager vs CUDA-graph parity: capture once, replay with new inputs copied into the captured buffers.

Serving engines capture a decode step once and replay it with new metadata every step.  Here the
call is captured on the first case; then for each later case (>= 3 replays): the case is copied into
the captured input buffers, an eager call of another shape runs in between (so any state the op
keeps outside the graph moves on), the graph is replayed, and its outputs (and in-place arguments)
must be bitwise equal to an eager call on the same case.  CPU: not applicable (reported as skipped).

An implementation that runs in another process (``tools/engine/impl_executor.py``) offers
``fn.capture_graph(static)``: its host captures the call on the judge's buffers (shared by CUDA IPC,
``static`` then holds the shared ones), and each replay runs there while the judge copies the cases in
and reads the outputs from its own side; its replay offers ``between(before, after)``, which sends the
calls before the replay, the replay and the calls after it in one message.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch

from oracles.bitwise import check_bitwise
from oracles.capture import capture_call
from oracles.failures import OracleFailure
from oracles.tensors import as_outputs, clone_inputs

MIN_REPLAYS = 3


def graph_parity_applies(device: torch.device) -> bool:
    return device.type == "cuda"


def _capture_here(fn: Callable, static: dict) -> tuple[tuple, Callable[[], None]]:
    """Capture ``fn(**static)`` in this process: the captured outputs, and the graph's replay."""
    try:
        graph, returned = capture_call(fn, static)
    except Exception as error:  # noqa: BLE001 - a call that cannot be captured is the finding
        raise OracleFailure("graph_parity", f"the call cannot be captured in a CUDA graph: "
                                            f"{type(error).__name__}: {error}") from None
    return as_outputs(returned), graph.replay


def _replay_between(fn: Callable, replay_graph: Callable[[], None], before: list[dict], after: list[dict]) -> list:
    """Call ``fn`` on each of ``before``, replay the graph, call it on each of ``after``: the outputs of the
    calls after (in one message where ``fn`` runs in another process)."""
    between = getattr(replay_graph, "between", None)
    if between is not None:
        return between(before, after)
    for kwargs in before:
        fn(**kwargs)
    replay_graph()
    return [as_outputs(fn(**kwargs)) for kwargs in after]


def check_graph_parity(fn: Callable, cases: Sequence[dict], interleaved: Sequence[dict],
                       in_place: tuple[str, ...] = ()) -> None:
    """``cases`` share shapes and layouts (cases[0] is captured); ``interleaved`` are other shapes."""
    if len(cases) < MIN_REPLAYS + 1:
        raise ValueError(f"cases: need >= {MIN_REPLAYS + 1} inputs of one shape, got {len(cases)}")
    static = clone_inputs(cases[0])
    capture = getattr(fn, "capture_graph", None) or functools.partial(_capture_here, fn)
    captured, replay_graph = capture(static)
    for replay, case in enumerate(list(cases[1:]) + [cases[0]], start=1):
        for name, value in case.items():
            if isinstance(value, torch.Tensor):
                static[name].copy_(value)
        eager_inputs = clone_inputs(case)
        (eager,) = _replay_between(fn, replay_graph, [clone_inputs(other) for other in interleaved], [eager_inputs])
        eager = eager + tuple(eager_inputs[name] for name in in_place)
        torch.cuda.synchronize()
        check_bitwise(captured + tuple(static[name] for name in in_place), eager,
                      f"replay {replay} of the captured graph vs eager", oracle="graph_parity")
