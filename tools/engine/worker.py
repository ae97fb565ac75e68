"""One (op, cell) through the battery: in this process, or in a worker process that tools/engine/isolation.py runs.

``execute(task)`` is the whole of running a cell; ``tools/certify-cells`` calls it directly when it
does not isolate, and a worker (``python -m tools.engine.worker --connect SOCKET --device DEVICE``)
calls it for each task its parent sends.  The worker tells its parent which oracle runs on which
recipe before each oracle starts, so that when the process dies (an illegal address, a device
assert, a segfault under the interpreter) or hangs, the parent can still say where.

Messages, worker -> parent: ``("ready",)``, ``("oracle", name, recipe)``, ``("note", text)``,
``("result", record)``; parent -> worker: ``("cell", task)``, ``("stop",)``.
"""
from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import functools
import importlib
import os
import socket
import sys
from multiprocessing.connection import Connection

from tools.cli import UsageError

# ops, oracles and torch are imported in the functions that use them: the runner imports this module (for
# CellTask) before it has parsed its flags, and a worker chooses the Triton interpreter before Triton loads.
NO_ORACLE = "isolation"    # where a cell is before its first oracle begins (loading it, or a crash then)


@dataclasses.dataclass(frozen=True)
class CellTask:
    """What to run: JSON-able, so that it crosses to a worker as it is."""

    op: str
    cell_id: str
    device: str                        # "cpu" | "cuda" (a worker sees one GPU)
    impl: str | None = None            # MODULE[:ATTR], or None for the catalog kernels
    max_examples: int = 0
    seed: int = 0
    shrink: bool = True
    replay: dict | None = None         # one recipe instead of the cell's corners and draws
    backend: str | None = None         # which of the op's kernels (None: its first, as for an --impl)
    sanitizer: str | None = None       # the compute-sanitizer tool the worker runs under, if any

    @property
    def key(self) -> tuple[str, str]:
        return self.op, self.cell_id


def load_implementation(spec: str, entries):
    """``MODULE[:ATTR]`` -> an Implementation for each entry (missing siblings: the reference)."""
    from ops.catalog import op  # here, not at the top: the runner imports this module before torch
    from oracles.battery import Implementation

    module_name, _, attribute = spec.partition(":")
    sys.path[:0] = [p for p in (os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p]
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is a usage error, in one line
        raise UsageError(f"--impl: cannot import {module_name!r}: {type(error).__name__}: {error}") from None
    if attribute and len(entries) != 1:
        raise UsageError("--impl MODULE:ATTR judges one op: name it with one --op")
    implementations = {}
    for entry in entries:
        main = attribute or entry.name
        if not callable(getattr(module, main, None)):
            raise UsageError(f"--impl: {module_name} has no callable {main!r}")
        functions = {entry.name: getattr(module, main)}
        for sibling in entry.siblings:
            functions[sibling] = getattr(module, sibling, None) or op(sibling).reference
        implementations[entry.name] = Implementation(spec, functions)
    return implementations


def _entry(op_name: str, backend: str | None):
    from ops.catalog import kernels

    found = kernels(op_name)
    return found[0] if backend is None else next(entry for entry in found if entry.backend == backend)


@functools.lru_cache(maxsize=None)
def _implementation(impl: str | None, op_name: str, backend: str | None):
    from ops.catalog import kernels
    from oracles.battery import Implementation

    entry = _entry(op_name, backend)
    return load_implementation(impl, [entry])[op_name] if impl else Implementation.of_kernels(entry, kernels)


def execute(task: CellTask, *, progress=None, watch=None):
    """Run the battery on ``task``'s cell (or replay its one recipe); returns a ``CellResult``."""
    import torch

    from oracles.battery import replay, run_cell

    entry = _entry(task.op, task.backend)
    cell, impl = entry.cell(task.cell_id), _implementation(task.impl, task.op, task.backend)
    device = torch.device(task.device)
    # Under compute-sanitizer torch allocates stream-ordered (cudaMallocAsync): memory allocated inside a
    # capture does not exist until the graph is instantiated, so Triton's launcher cannot validate its
    # pointers and no capture succeeds.  Sanitized runs write no certificate; the plain run judges graphs.
    skipped = (f"not run under compute-sanitizer --tool {task.sanitizer}: its stream-ordered allocations "
               "cannot be captured" if task.sanitizer else None)
    if task.replay is not None:
        return replay(entry, impl, cell, device, task.replay, entry.strategy_module, watch=watch,
                      graph_parity_skipped=skipped)
    return run_cell(entry, impl, cell, device, max_examples=task.max_examples, seed=task.seed,
                    shrink=task.shrink, strategy=entry.strategy_module, progress=progress, watch=watch,
                    graph_parity_skipped=skipped)


def _surface_device_errors(result, device: str, last_oracle: str, last_recipe: dict) -> None:
    """An asynchronous CUDA error of this cell surfaces here, not in the next cell: it fails this one."""
    import torch

    from oracles.failures import OracleFailure

    if device != "cuda":
        return
    try:
        torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - whatever the device raises, it belongs to this cell
        if result.failure is None:
            result.status = "failed"
            result.failure = OracleFailure(last_oracle, f"a CUDA error surfaced after the cell: {error}")
            result.failure.recipe = last_recipe


def serve(connection: Connection, device: str) -> None:
    import ops  # noqa: F401 - chooses the Triton interpreter on a machine without CUDA, before Triton loads

    where = {}

    def watch(oracle: str, recipe: dict) -> None:
        where.update(oracle=oracle, recipe=recipe)
        connection.send(("oracle", oracle, recipe))

    connection.send(("ready",))
    while True:
        message = connection.recv()
        if message[0] == "stop":
            return
        task = CellTask(**message[1])
        where.update(oracle=NO_ORACLE, recipe={})
        result = execute(task, progress=lambda line: connection.send(("note", line)), watch=watch)
        _surface_device_errors(result, device, where["oracle"], where["recipe"])
        connection.send(("result", result.record()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.engine.worker",
                                     description="A certification worker; tools/certify-cells starts it.")
    parser.add_argument("--connect", required=True, metavar="SOCKET", help="the parent's unix socket")
    parser.add_argument("--device", required=True, choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    faulthandler.enable()  # a segfault prints the Python stack to stderr, which the parent quotes
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(args.connect)
    serve(Connection(client.detach()), args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
