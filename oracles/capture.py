"""Capturing a call in a CUDA graph the way a serving engine does it.

This module imports nothing but torch, on purpose: the implementation host (``tools/engine/impl_host.py``),
which must hold nothing of the judge, loads it by its file path to capture the implementation it
serves; the graph parity oracle (``graph.py``) uses it for an implementation in its own process.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch


def capture_call(fn: Callable, static: dict) -> tuple[torch.cuda.CUDAGraph, object]:
    """Warm ``fn(**static)`` up on a side stream, then capture it: the graph and what the call returned.

    Warming up on the very buffers to be captured (compile, autotune) is what serving engines do: state an
    op keeps keyed on them outside the graph is then stale in every replay.  Any exception is the caller's
    finding (a call that cannot be captured).
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(**static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings():
        # an empty batch launches nothing: an empty graph is the right capture of it
        warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
        with torch.cuda.graph(graph):
            returned = fn(**static)
    return graph, returned
