"""Bitwise A/B: a kernel at a git revision against the working tree's, on the same draws.

A change declared performance-only (a new launch plan, a restructured loop, a rename) should leave
every output bit where it was.  ``compare`` answers that per cell: the baseline's ``ops/``,
``references/`` and ``oracles/`` are exported from git (``git archive``) into a scratch folder, and the
baseline kernel — ``ENTRY.kernel`` of its kernel module there, so a renamed function is still found —
runs in an implementation host of its own with that folder first on its ``sys.path``; the working tree's
kernel runs in another host.  Both get the same inputs: each cell's corners, then the Hypothesis draws the
battery makes for that cell and seed (the working tree's strategy), compared output by output, bit by
bit.  Where they differ: how many inputs and elements, and by how many ULP (the distance between the two
bit patterns in the order of the floats; integers: by value).
"""
from __future__ import annotations

import dataclasses
import io
import pathlib
import subprocess
import tarfile
import tempfile

from tools.cli import UsageError

REPO = pathlib.Path(__file__).resolve().parents[2]
EXPORTED = ("ops", "references", "oracles")  # what a kernel and its reference import from the project


def git(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *words], cwd=REPO, capture_output=True)


def resolve(revision: str) -> str:
    run = git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if run.returncode != 0:
        raise UsageError(f"--baseline: unknown revision {revision!r}")
    return run.stdout.decode().strip()


def export(commit: str, into: pathlib.Path) -> None:
    """The project's importable layers as they were at ``commit``, written under ``into``."""
    run = git("archive", "--format=tar", commit, "--", *EXPORTED)
    if run.returncode != 0:
        raise UsageError(f"--baseline: git archive {commit[:12]}: {run.stderr.decode().strip().splitlines()[-1]}")
    with tarfile.open(fileobj=io.BytesIO(run.stdout)) as archive:
        archive.extractall(into, filter="data")


def module_of(path: pathlib.Path) -> str:
    return ".".join(path.resolve().relative_to(REPO).with_suffix("").parts)


@dataclasses.dataclass
class OutputDifference:
    output: int
    elements: int           # elements whose bits differ
    of: int
    max_ulp: float          # the largest distance, in ULP (floats) or in value (integers); inf: NaN vs number
    first: tuple
    baseline: object
    working: object

    def text(self) -> str:
        unit = "ULP" if isinstance(self.baseline, float) else "in value"
        return (f"output {self.output}: {self.elements} of {self.of} elements, at most {self.max_ulp:g} {unit}; "
                f"first at {self.first}: baseline {self.baseline!r}, working tree {self.working!r}")


def ulp_distance(a, b):
    """Per element: how many representable values lie between ``a`` and ``b`` (same floating dtype),
    ``inf`` where exactly one is NaN; -0.0 and +0.0 are one apart (their bits differ)."""
    import torch

    from oracles.bitwise import bit_pattern

    def ordered(t):
        bits = bit_pattern(t).to(torch.int64)
        if t.element_size() == 1:  # fp8's bits come as uint8: signed, like the wider ones
            bits = torch.where(bits >= 128, bits - 256, bits)
        magnitude = bits & ((1 << (t.element_size() * 8 - 1)) - 1)
        return torch.where(bits < 0, -1 - magnitude, bits)  # negative floats count down below +0.0

    distance = (ordered(a) - ordered(b)).abs().to(torch.float64)
    one_nan = a.isnan() ^ b.isnan()
    return torch.where(one_nan, torch.full_like(distance, float("inf")), distance)


def output_differences(baseline: tuple, working: tuple) -> list[OutputDifference | str]:
    """What differs between two results, output by output (empty: bitwise identical)."""
    import torch

    from oracles.bitwise import bit_pattern

    found = []
    if len(baseline) != len(working):
        return [f"{len(baseline)} outputs at the baseline, {len(working)} in the working tree"]
    for position, (a, b) in enumerate(zip(baseline, working)):
        if a.dtype != b.dtype or a.shape != b.shape:
            found.append(f"output {position}: baseline {a.dtype} {tuple(a.shape)}, working tree {b.dtype} "
                         f"{tuple(b.shape)}")
            continue
        if a.numel() == 0:
            continue
        differs = bit_pattern(a) != bit_pattern(b)
        if not differs.any():
            continue
        first = tuple(int(i) for i in differs.nonzero()[0])
        if a.is_floating_point():
            distance = ulp_distance(a, b)[differs].max().item()
        elif a.dtype == torch.bool:
            distance = 1.0
        else:
            distance = (a.to(torch.float64) - b.to(torch.float64)).abs()[differs].max().item()
        found.append(OutputDifference(position, int(differs.sum()), a.numel(), distance, first,
                                      a[first].item(), b[first].item()))
    return found


@dataclasses.dataclass
class CellAB:
    cell: str
    inputs: int = 0
    differing_inputs: int = 0
    max_ulp: float = 0.0
    first: dict | None = None      # the first differing input: its recipe and what differed
    errors: list = dataclasses.field(default_factory=list)  # inputs on which one side raised and the other not

    @property
    def bitwise(self) -> bool:
        return self.differing_inputs == 0 and not self.errors


def cell_recipes(entry, cell, device, max_examples: int, seed: int) -> list[dict]:
    """The cell's corners, then the draws the battery makes for it (``oracles.draws``: the battery's own)."""
    from oracles.draws import cell_draws

    strategy = entry.strategy_module
    return [*strategy.corners(cell, device), *cell_draws(strategy, cell, device, max_examples, seed)]


def _call(fn, inputs: dict, in_place: tuple[str, ...]):
    from oracles.determinism import run_on_copy

    try:
        return run_on_copy(fn, inputs, in_place), None
    except Exception as error:  # noqa: BLE001 - compared like an output: both must raise alike
        return None, f"{type(error).__name__}: {error}"


def hosted_pair(entry, baseline_root: pathlib.Path, label: str, device: str):
    """(baseline, working tree) functions of ``entry``'s op and its siblings, each side in its own host."""
    from ops.catalog import kernels
    from oracles.battery import Implementation
    from tools.engine.worker import hosted_implementation, implementation_host

    working = hosted_implementation(None, entry.name, entry.backend, implementation_host(None, device))
    sides = {name: next((e for e in kernels(name) if e.backend == entry.backend), kernels(name)[0])
             for name in (entry.name, *entry.siblings)}
    where = {name: (module_of(side.files.kernel), "ENTRY.kernel") for name, side in sides.items()}
    host = implementation_host(label, device)
    missing = host.load([str(baseline_root)], {name: at for name, at in where.items()})
    if missing:
        raise UsageError(f"--baseline: {', '.join(f'{where[m][0]}.ENTRY.kernel' for m in missing)} is not "
                         f"callable at {label}")
    baseline = Implementation(label, {name: host.function(name) for name in where})
    return baseline, working


def compare(entry, commit: str, device: str, cells=None, max_examples: int = 6, seed: int = 0,
            progress=None) -> list[CellAB]:
    """Per cell of ``entry`` (or those named): the baseline kernel at ``commit`` against the working tree's."""
    import torch

    from tools.engine.worker import retire_host

    label = f"baseline {commit[:12]}"
    results = []
    with tempfile.TemporaryDirectory(prefix="kparity-ab-") as scratch:
        root = pathlib.Path(scratch)
        export(commit, root)
        if not (root / entry.files.kernel.resolve().relative_to(REPO)).is_file():
            raise UsageError(f"--baseline: {entry.files.kernel.relative_to(REPO)} does not exist at {commit[:12]}")
        try:
            baseline, working = hosted_pair(entry, root, label, device)
            for cell in (entry.cells if not cells else [entry.cell(c) for c in cells]):
                results.append(compare_cell(entry, cell, baseline, working, torch.device(device), max_examples,
                                            seed, progress))
        finally:
            retire_host(label, device)
    return results


def compare_cell(entry, cell, baseline, working, device, max_examples: int, seed: int, progress=None) -> CellAB:
    from oracles.battery import recipe_json

    found = CellAB(cell.id)
    for recipe in cell_recipes(entry, cell, device, max_examples, seed):
        inputs = entry.strategy_module.build(recipe, device)
        in_place = tuple(name for name in entry.in_place if inputs[name] is not None)
        (a, a_error), (b, b_error) = _call(baseline[entry.name], inputs, in_place), \
            _call(working[entry.name], inputs, in_place)
        found.inputs += 1
        if progress:
            progress(f"{entry.name}/{cell.id}: {found.inputs} inputs")
        if a_error or b_error:
            if (a_error is None) != (b_error is None):
                found.errors.append({"recipe": recipe_json(recipe), "baseline": a_error, "working tree": b_error})
            continue
        differences = output_differences(a, b)
        if differences:
            found.differing_inputs += 1
            found.max_ulp = max([found.max_ulp, *(d.max_ulp for d in differences if isinstance(d, OutputDifference))])
            if found.first is None:
                found.first = {"recipe": recipe_json(recipe),
                               "differences": [d if isinstance(d, str) else d.text() for d in differences]}
    return found
