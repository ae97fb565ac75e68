"""The catalog: what each op claims, on which architectures, for which input regimes (cells).

An :class:`Entry` is a small declaration beside its kernel (``ops/<family>/<module>.py``): the hot
call, the contract's reference and validation, the stock op a user would otherwise run, the parity
class, the declared properties, the cells and the kernel's ``backend`` (``triton``, ``cute``).  One op
may have several kernels, one entry each, in modules of their own (``ops/norm/rms_norm_gated.py`` and
``ops/norm/rms_norm_gated_cute.py``), each with its own certificate beside it.

Calling an entry is *certified dispatch* of its op: the first of the op's kernels, in
:data:`BACKEND_ORDER`, whose cell for this input holds a fresh certificate for this device's
architecture runs; if none does, the stock op runs and the fallback is counted
(``KPARITY_REQUIRE_CERTIFIED=1`` turns that fallback into an error).  A sampled fraction of the calls routed
to a kernel is re-checked against the op's parity class by the runtime canary (``ops/canary.py``,
``KPARITY_CANARY``).

Example::

    from ops.catalog import op
    token_ids = op("greedy_argmax")(logits)   # kernel if certified here, else torch.argmax
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import importlib
import inspect
import os
import pathlib
import pkgutil
import re
from typing import Any, Callable, Iterable, Mapping

import torch

from ops import canary, certificates
from ops.canary import REQUIRE_CERTIFIED_ENV
from oracles.band_limit import BandLimit
from references.bounds import OneOf, Span, stable_seed
from references.validation import Refusal

REPO = pathlib.Path(__file__).resolve().parent.parent

BACKEND_ORDER = ("cute", "triton")
"""Which kernel of an op dispatch tries first when several are certified for an input.  CuTe DSL
kernels come first: each is written for the GPU families it claims (explicit 16-byte vectors, its
own reductions), where the Triton kernel is the portable one that also runs under the interpreter.
``tools/bench`` times both backends of an op side by side; reorder here if it shows otherwise."""


class Arch(enum.Enum):
    """Architectures a kernel can be certified on.  An enum, so a typo is an AttributeError."""

    CPU_INTERP = "cpu-interp"
    SM90 = "sm90"
    SM100 = "sm100"
    SM103 = "sm103"
    SM107 = "sm107"

    @property
    def marker(self) -> str:
        """The pytest marker of this architecture (``cpu`` for the interpreter)."""
        return "cpu" if self is Arch.CPU_INTERP else self.value

    @classmethod
    def from_marker(cls, marker: str) -> "Arch":
        return cls.CPU_INTERP if marker == "cpu" else cls(marker)


ALL_ARCHS = frozenset(Arch)
_CAPABILITY_ARCH = {(9, 0): Arch.SM90, (10, 0): Arch.SM100, (10, 3): Arch.SM103, (10, 7): Arch.SM107}


def arch_of(device: torch.device | str) -> Arch | None:
    """The architecture that runs kernels for tensors on ``device``; None for one we do not know."""
    device = torch.device(device)
    if device.type == "cpu":
        return Arch.CPU_INTERP
    if device.type == "cuda":
        return _CAPABILITY_ARCH.get(torch.cuda.get_device_capability(device))
    return None


class Parity(enum.Enum):
    BITWISE = "bitwise"
    BAND = "band"


_SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


@dataclasses.dataclass(frozen=True)
class Cell:
    """One declared input regime: a stable snake_case ``id``, ``why`` it exists, and its bounds.

    ``bounds`` maps each parameter that ``Entry.params_of`` reports to a :class:`Span` or
    :class:`OneOf`; an input belongs to the cell when every parameter lies inside its bound.
    """

    id: str
    why: str
    bounds: Mapping[str, Span | OneOf]

    def __post_init__(self):
        if not _SNAKE_CASE.match(self.id):
            raise ValueError(f"Cell id {self.id!r} is not snake_case")
        if not self.why.strip():
            raise ValueError(f"Cell {self.id!r} needs a one-line why")

    def contains(self, params: Mapping[str, Any]) -> bool:
        return all(params.get(name) in bound for name, bound in self.bounds.items())

    def seed(self, *salt: object) -> int:
        return stable_seed("cell", self.id, *salt)


class FallbackRefused(RuntimeError):
    """Raised when ``KPARITY_REQUIRE_CERTIFIED=1`` and an input has no certified kernel here."""


@dataclasses.dataclass(frozen=True)
class BenchCase:
    """One row of ``tools/bench``: a call made on the device, and the fewest bytes it must move.

    The bench times the kernel and the stock op (and any ``competitors``) on the same inputs, and
    reports achieved bandwidth against a device copy measured in the same run.
    """

    label: str
    make: Callable[[torch.device], dict]
    bytes_moved: Callable[..., int]
    target: str = ""
    competitors: Mapping[str, Callable] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class OpFiles:
    """One kernel's files (absolute paths; a file may not exist yet, and adding it is a change).

    - ``kernel``: ``ops/<family>/<module>.py``: kernel, launch plan, entry and cells.
    - ``reference``: ``references/<family>/<op>.py``: the contract.
    - ``strategy``: ``references/<family>/<op>_strategy.py``: the op's inputs, for the battery.
    - ``suite``: ``suites/<family>/test_<module>.py``: drives every cell of this kernel.
    - ``implementations``: ``suites/<family>/<op>_impls.py``: the suite's wrong and correct alternatives.
    - ``certificate``: ``ops/<family>/<module>.cert.json``, beside the kernel.
    """

    kernel: pathlib.Path
    reference: pathlib.Path
    strategy: pathlib.Path
    suite: pathlib.Path
    implementations: pathlib.Path
    certificate: pathlib.Path


FALLBACKS: collections.Counter = collections.Counter()
"""(op name, reason) -> number of calls that ran the stock op instead of the kernel."""


@dataclasses.dataclass(eq=False)
class Entry:
    """One op's declaration.  Field order follows STYLE.md: call, contract, judges, claims.

    - ``kernel``: the host wrapper (validates via the contract, allocates, launches).
    - ``reference``: the contract's executable semantics (``references/<family>/<op>.py``).
    - ``validate``: the contract's refusal checks, shared by kernel and reference.
    - ``stock``: what a user would otherwise run.
    - ``truth``: float64 truth for band ops.
    - ``legitimate_orders``: band ops: the reference in each of the other reduction orders a real kernel
      may use (name -> callable of the op's signature); with the stock op they set the band.
    - ``band_limit``: band ops: the widest band before it judges nothing (``oracles.band.BandLimit``;
      None: the contract's default).
    - ``params_of``: call arguments -> the parameters cells are bounded on (sizes, dtypes, flags).
    - ``batch_args``: arguments whose dim 0 is the batch (used by batch invariance); outputs are
      batched on dim 0 too.
    - ``in_place``: arguments the contract lets the op write.
    - ``siblings``: other ops of the same contract (rollback_save beside rollback_restore); an
      implementation under judgement provides them too, or the reference stands in.
    - ``backend``: what the kernel is written in (a name in :data:`BACKEND_ORDER`); an op has at
      most one kernel per backend.
    - ``limits``: the kernel's own limits, narrower than the contract (strides, sizes, a host scalar):
      call arguments -> None, or the reason, naming the argument, why the kernel refuses them.  The
      kernel refuses such inputs clearly (``references.validation.require_within_limits``); dispatch
      routes them to the stock op, counted as a fallback.  Never demanded of another implementation.
    """

    name: str
    family: str
    kernel: Callable
    reference: Callable
    validate: Callable
    stock: Callable
    parity: Parity
    params_of: Callable[..., dict]
    cells: tuple[Cell, ...]
    archs: frozenset[Arch]
    refusals: tuple[Refusal, ...]
    truth: Callable | None = None
    legitimate_orders: Mapping[str, Callable] = dataclasses.field(default_factory=dict)
    band_limit: BandLimit | None = None
    batch_invariant: bool = False
    batch_args: tuple[str, ...] = ()
    in_place: tuple[str, ...] = ()
    siblings: tuple[str, ...] = ()
    properties: tuple[Callable, ...] = ()
    bench: tuple[BenchCase, ...] = ()
    backend: str = "triton"
    limits: Callable[..., str | None] | None = None

    @classmethod
    def of_contract(cls, contract, **declared) -> "Entry":
        """The entry of the op whose contract module is ``references/<family>/<op>.py``: its name, family,
        reference (the module's function of the op's name), ``validate``, ``stock``, ``REFUSALS`` and,
        for band ops, ``truth``, ``LEGITIMATE_ORDERS`` and ``BAND_LIMIT`` come from that module; the rest (kernel, parity, cells...) is declared."""
        family, name = contract.__name__.split(".")[-2:]
        return cls(name=name, family=family, reference=getattr(contract, name), validate=contract.validate,
                   stock=contract.stock, refusals=contract.REFUSALS, truth=getattr(contract, "truth", None),
                   legitimate_orders=getattr(contract, "LEGITIMATE_ORDERS", {}),
                   band_limit=getattr(contract, "BAND_LIMIT", None),
                   **declared)

    def __post_init__(self):
        ids = [cell.id for cell in self.cells]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{self.name}: duplicate cell ids {sorted(ids)}")
        if self.parity is Parity.BAND and self.truth is None:
            raise ValueError(f"{self.name}: a band op needs a float64 truth")
        self.signature = inspect.signature(self.reference)

    # -- what an input is ------------------------------------------------------------------------
    def bind(self, *args, **kwargs) -> dict:
        """Call arguments as a name -> value mapping, in the reference's names."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def cell_of(self, *args, **kwargs) -> Cell | None:
        """The first cell whose bounds hold this input, or None."""
        params = self.params_of(**self.bind(*args, **kwargs))
        return next((cell for cell in self.cells if cell.contains(params)), None)

    def cell(self, cell_id: str) -> Cell:
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        raise KeyError(f"{self.name} has no cell {cell_id!r}; cells: {[c.id for c in self.cells]}")

    # -- where its files are --------------------------------------------------------------------
    @property
    def kernel_file(self) -> str:
        return inspect.getsourcefile(self.kernel)

    @property
    def reference_file(self) -> str:
        return inspect.getsourcefile(self.reference)

    @property
    def strategy_module_name(self) -> str:
        return f"references.{self.family}.{self.name}_strategy"

    @property
    def strategy_module(self):
        """The op's input strategy (``recipes``, ``corners``, ``build``: what the battery draws inputs
        with), shared by all of its kernels."""
        return importlib.import_module(self.strategy_module_name)

    @property
    def files(self) -> "OpFiles":
        """Where this kernel's files are: the one place the project's file layout is written."""
        kernel = pathlib.Path(self.kernel_file)
        return OpFiles(
            kernel=kernel,
            reference=pathlib.Path(self.reference_file),
            strategy=REPO / pathlib.Path(*self.strategy_module_name.split(".")).with_suffix(".py"),
            # the suite is named after the kernel module: an op's second kernel has its own
            suite=REPO / "suites" / self.family / f"test_{kernel.stem}.py",
            implementations=REPO / "suites" / self.family / f"{self.name}_impls.py",
            certificate=kernel.with_suffix(".cert.json"))

    # -- certified dispatch ---------------------------------------------------------------------
    def beyond_limits(self, bound: Mapping[str, Any]) -> str | None:
        """Why the bound call arguments are beyond this kernel's own limits, or None."""
        return None if self.limits is None else self.limits(**bound)

    def why_not_routed(self, arch: Arch | None, device: torch.device, cell: Cell | None,
                       params: Mapping[str, Any] | None = None) -> str | None:
        """None when this kernel may run an input of ``cell`` (of cell parameters ``params``) on ``arch``;
        else the reason, in words."""
        if cell is None:
            return "no cell holds this input"
        if arch is None:
            return f"unknown architecture of {device}"
        if arch not in self.archs:
            return f"does not claim {arch.value}"
        return certificates.why_not_certified(self, arch, cell.id, params)

    def __call__(self, *args, **kwargs):
        bound = self.bind(*args, **kwargs)
        self.validate(**bound)
        device = _device_of(args, kwargs)
        arch = arch_of(device)
        # an entry made outside the catalog (a test's copy) dispatches to its own kernel alone
        candidates = kernels(self.name) if any(k is self for k in kernels(self.name)) else (self,)
        canary.raise_pending()
        reasons = []
        for entry in candidates:
            beyond = entry.beyond_limits(bound)
            cell = entry.cell_of(*args, **kwargs)
            reason = (f"beyond the kernel's limits ({beyond})" if beyond is not None
                      else entry.why_not_routed(arch, device, cell, entry.params_of(**bound)))
            if reason is None:
                check = canary.before(entry, bound, cell.id)
                result = entry.kernel(*args, **kwargs)
                if check is not None:
                    canary.after(check, result, bound)
                return result
            reasons.append(f"{entry.backend}: {reason}")
        reason = "; ".join(reasons)
        FALLBACKS[(self.name, reason)] += 1
        if os.environ.get(REQUIRE_CERTIFIED_ENV) == "1":
            raise FallbackRefused(f"{self.name}: {reason}; {REQUIRE_CERTIFIED_ENV}=1 forbids the stock fallback")
        return self.stock(*args, **kwargs)


def _device_of(args, kwargs) -> torch.device:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


# -- the registry -------------------------------------------------------------------------------
_REGISTRY: dict[str, tuple[Entry, ...]] | None = None

# A kernel module whose backend's package is not installed is left out of the catalog (its op keeps
# its other kernels) and listed in UNAVAILABLE with the reason; any other import error is raised.
BACKEND_PACKAGES = {"cutlass": "nvidia-cutlass-dsl", "cuda": "cuda-bindings"}
UNAVAILABLE: dict[str, str] = {}
"""kernel module -> why it is not in the catalog on this machine."""


def _dispatch_rank(entry: Entry) -> int:
    if entry.backend not in BACKEND_ORDER:
        raise ValueError(f"{entry.name}: backend {entry.backend!r} is not one of {BACKEND_ORDER}")
    return BACKEND_ORDER.index(entry.backend)


def group_kernels(found: Iterable[Entry]) -> dict[str, tuple[Entry, ...]]:
    """Entries grouped by op name, each op's kernels in dispatch order; at most one per backend."""
    grouped: dict[str, list[Entry]] = collections.defaultdict(list)
    for entry in found:
        if any(other.backend == entry.backend for other in grouped[entry.name]):
            raise ValueError(f"two {entry.backend} catalog entries named {entry.name!r}")
        _dispatch_rank(entry)
        grouped[entry.name].append(entry)
    return {name: tuple(sorted(grouped[name], key=_dispatch_rank)) for name in sorted(grouped)}


def _registry() -> dict[str, tuple[Entry, ...]]:
    """The catalog: every ``ENTRY`` in the modules of ``ops/<family>/``, grouped by op."""
    global _REGISTRY
    if _REGISTRY is None:
        import ops

        found = []
        for family in pkgutil.iter_modules(ops.__path__):
            if not family.ispkg:
                continue
            package = importlib.import_module(f"ops.{family.name}")
            for module_info in pkgutil.iter_modules(package.__path__):
                module_name = f"ops.{family.name}.{module_info.name}"
                try:
                    module = importlib.import_module(module_name)
                except ModuleNotFoundError as error:
                    package_name = (error.name or "").split(".")[0]
                    if package_name not in BACKEND_PACKAGES:
                        raise
                    UNAVAILABLE[module_name] = f"{BACKEND_PACKAGES[package_name]} is not installed ({error})"
                    continue
                entry = getattr(module, "ENTRY", None)
                if isinstance(entry, Entry):
                    found.append(entry)
        _REGISTRY = group_kernels(found)
    return _REGISTRY


def kernels(name: str) -> tuple[Entry, ...]:
    """Every kernel of the op ``name``, one entry per backend, in dispatch order (:data:`BACKEND_ORDER`)."""
    registry = _registry()
    if name not in registry:
        raise KeyError(f"no op named {name!r} in the catalog; ops: {', '.join(registry)}")
    return registry[name]


def entries() -> dict[str, Entry]:
    """One entry per op: the first of its kernels in dispatch order.  The contract side of an entry
    (reference, validation, stock op, siblings) is the op's and the same for each of its kernels; for
    every kernel, use :func:`kernels`."""
    return {name: found[0] for name, found in _registry().items()}


def every_kernel() -> tuple[Entry, ...]:
    """Every kernel of every op: ops by name, each op's kernels in dispatch order."""
    return tuple(entry for found in _registry().values() for entry in found)


def kernel_label(entry: Entry) -> str:
    """How the tools name a kernel: ``op [backend]`` when its op has several kernels here, else the op's
    name alone (``greedy_argmax``; ``rms_norm_gated [cute]``)."""
    return f"{entry.name} [{entry.backend}]" if len(_registry().get(entry.name, ())) > 1 else entry.name


def op(name: str) -> Entry:
    """The op named ``name`` (call it for certified dispatch over all of its kernels)."""
    return kernels(name)[0]


def unjudged_kernels() -> list[dict]:
    """The kernel modules the catalog left out on this machine (:data:`UNAVAILABLE`: their backend's
    package is missing), each with why, its source file and the arch sections its certificate holds.  Those
    sections cannot be judged fresh or stale here (the digest needs the module imported), so the tools show
    them as *not judged*, never drop them."""
    entries()  # the catalog's scan is what fills UNAVAILABLE
    found = []
    for module, why in sorted(UNAVAILABLE.items()):
        source = pathlib.Path(*module.split(".")).with_suffix(".py")
        certificate = REPO / source.with_suffix(".cert.json")
        archs = list(certificates.read_certificate(certificate)["archs"]) if certificate.exists() else []
        found.append({"module": module, "kernel_file": source.as_posix(), "why": why, "certificate_archs": archs})
    return found
