"""``tools/certify-cells --dump DIR``: a failing recipe's inputs and outputs, saved for a debugger.

For every failing oracle of a cell whose minimal recipe has a seed, one file
``DIR/<op>[.<backend>].<cell>.<oracle>.pt`` (``torch.save``) holding::

    {"op", "backend", "cell", "oracle", "finding", "recipe", "reproduce",
     "inputs": {name: tensor, ...},                     # as the strategy builds them (views and garbage kept)
     "outputs": {"implementation": (tensor, ...) or "raised ...",
                 "reference": (...), "stock": (...) or "raised ...", "truth": (...) or None}}

The outputs are computed again, after the run, on the recipe's inputs: the implementation in an
implementation host as during judging (never in this process), the reference, stock op and float64 truth
here.  Load with ``torch.load(path, map_location="cpu", weights_only=False)``.
"""
from __future__ import annotations

import pathlib

from tools.cli import UsageError


def check_directory(directory: str) -> pathlib.Path:
    """``--dump DIR``: created when missing; a path that is a file is a usage error."""
    path = pathlib.Path(directory)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--dump: {directory} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--dump: cannot create {directory}: {error.strerror}") from None
    return path


def _outputs(fn, inputs: dict, in_place: tuple[str, ...]):
    from oracles.determinism import run_on_copy

    try:
        return tuple(tensor.detach().clone() for tensor in run_on_copy(fn, inputs, in_place))
    except Exception as error:  # noqa: BLE001 - what it raised is what a debugger needs to see
        return f"raised {type(error).__name__}: {error}"


def dump_failure(directory: pathlib.Path, entry, backend: str | None, cell_id: str, oracle: str, failure,
                 impl: str | None, device: str, reproduce: str) -> pathlib.Path | None:
    """Write one failing oracle's recipe, inputs and outputs; None when its recipe builds no inputs (the
    refusal table, a cell where every input was refused)."""
    import torch

    from oracles.tensors import as_outputs, clone_inputs
    from tools.engine.worker import hosted_implementation, implementation_host

    recipe = failure.recipe
    if not recipe or "seed" not in recipe:
        return None
    inputs = entry.strategy_module.build(recipe, torch.device(device))
    in_place = tuple(name for name in entry.in_place if inputs[name] is not None)
    judged = hosted_implementation(impl, entry.name, backend, implementation_host(impl, device))
    truth = None
    if entry.parity.value == "band":
        truth = tuple(t.clone() if t is not None else None for t in as_outputs(entry.truth(**clone_inputs(inputs))))
    record = {
        "op": entry.name, "backend": backend, "cell": cell_id, "oracle": oracle, "finding": failure.message,
        "recipe": recipe, "reproduce": reproduce, "inputs": clone_inputs(inputs),
        "outputs": {"implementation": _outputs(judged[entry.name], inputs, in_place),
                    "reference": _outputs(entry.reference, inputs, in_place),
                    "stock": _outputs(entry.stock, inputs, in_place), "truth": truth},
    }
    name = ".".join(part for part in (entry.name, backend, cell_id, oracle) if part) + ".pt"
    path = directory / name
    torch.save(record, path)
    return path
