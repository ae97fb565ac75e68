"""Certificates: per architecture and per cell, what the oracle battery proved and on which code.

A certificate is a JSON file beside its kernel (``ops/sampling/greedy_argmax.py`` ->
``ops/sampling/greedy_argmax.cert.json``; an op's CuTe DSL kernel ``ops/norm/rms_norm_gated_cute.py`` has
its own, ``ops/norm/rms_norm_gated_cute.cert.json``), written only by ``tools/certify-cells``, atomically
and under a lock.  Each arch section records:

- ``source_sha256``, the *code digest*: the kernel and reference modules and every module of ``ops/``,
  ``references/`` and ``oracles/`` they use (transitively), each as parsed code with comments, docstrings
  and formatting removed; a comment edit keeps the section fresh, a change of meaning makes it *stale*;
- ``versions``, the toolchain it was earned under (a section of another torch/triton/cutlass does not route);
- ``report_sha256``, the sha256 of the run's JSON report for this kernel, committed beside the certificate
  (``ops/sampling/greedy_argmax.sm90.report.json``; ``tools/gate`` checks that they agree).

Certified dispatch routes an input only to a cell whose section meets :data:`POLICY`, the one statement of
what "certified" requires.  A missing arch reads as unknown; a certificate that cannot be read (not JSON,
truncated, empty, an unknown schema, a field of the wrong type, a non-finite number, nesting too deep to
parse, not a regular file) reads as *not certified*: dispatch falls back to the stock op with one warning naming
the file, and the tools exit 2 naming it.  Dispatch also refuses a section whose report is missing or is not the
one it names, and a cell whose exercised region is empty or not a region of the cell.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import re
import sys
import tempfile
import threading
import types
import warnings
from typing import Any, Callable, Mapping

from ops.files import read_regular_bytes
from oracles.failures import ORACLES

# An ``ops.catalog.Entry`` and ``ops.catalog.Arch``: the catalog reads certificates to route calls, so this
# module names its types without importing it.
Entry = Arch = Any

CERTIFIED = "certified"
FAILED = "failed"
SCHEMA = 2
KNOWN_SCHEMAS = (1, SCHEMA)  # 1: written before the schema was recorded (no "schema" key)
# The packages a kernel's behaviour depends on, each with the distributions whose version stands for it:
# the CuTe DSL's is its base libraries', which every flavour installs (the project installs the cu13
# libraries alone, without the nvidia-cutlass-dsl wheel).
_DISTRIBUTIONS = {"torch": ("torch",), "triton": ("triton",),
                  "nvidia-cutlass-dsl": ("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl")}
TOOLCHAIN_PACKAGES = tuple(_DISTRIBUTIONS)


class CertificateError(ValueError):
    """A certificate that cannot be read: not JSON, truncated, empty, or of an unknown schema."""


@dataclasses.dataclass(frozen=True)
class CertificationPolicy:
    """What a certificate section must hold before dispatch routes to its kernel (the gate and the report
    judge by it too).

    - ``min_examples``: per architecture (``Arch`` value), examples per cell, and Hypothesis draws the run
      asked for per cell; a run of the corners alone proves only the corners.  Each is the depth measured
      to catch every wrong implementation the suites keep, with margin (``suites/measure_draws.py``,
      docs/draws.md).
    - ``oracles``: each must have run on the cell, or be recorded as not applicable with a reason.
    - the code digest must match the code now, the toolchain this machine's, and the section must name
      the digest of the report of the run that earned it.
    """

    min_examples: Mapping[str, int]
    oracles: tuple[str, ...]

    def examples_on(self, arch: Arch | str) -> int:
        """The examples per cell a section of ``arch`` must hold."""
        return self.min_examples[getattr(arch, "value", arch)]

    def examples_on_every_arch(self) -> int:
        """The most examples per cell any arch asks: a section holding them meets the policy on every arch."""
        return max(self.min_examples.values())

    def section_problem(self, section: dict, digest: str, toolchain: dict | None = None, *,
                        arch: Arch | str) -> str | None:
        """None when the section of ``arch`` as a whole may route; else why not, in words.  ``toolchain``
        None: not compared (``tools/gate`` judges on a CPU machine whatever the section's toolchain)."""
        if section.get("source_sha256") != digest:
            return "stale (its code digest is not the code's now)"
        if toolchain is not None:
            earned = section.get("versions")
            if not isinstance(earned, dict):
                return "records no toolchain"
            for package in TOOLCHAIN_PACKAGES:
                if earned.get(package) != toolchain.get(package):
                    return f"earned under {package} {earned.get(package)}, this machine has {toolchain.get(package)}"
        depth = self.depth_problem(section, arch=arch)
        if depth:
            return depth
        if not isinstance(section.get("report_sha256"), str) or not _SHA256.match(section["report_sha256"]):
            return "records no digest of the report of the run that earned it"
        return None

    def depth_problem(self, section: dict, *, arch: Arch | str) -> str | None:
        """None when ``section`` drew as many examples a cell as this policy asks on ``arch``; else why not."""
        least, arch = self.examples_on(arch), getattr(arch, "value", arch)
        if not _is_int(section.get("max_examples")) or section["max_examples"] < least:
            return f"drew {_shown(section.get('max_examples'))} examples per cell, the policy asks {least} on {arch}"
        return None

    def cell_problem(self, record: dict | None, cell=None, *, arch: Arch | str) -> str | None:
        """None when a cell's record in a section of ``arch`` is certified by the policy's standard; else why
        not.  ``cell`` (the catalog's): the record's exercised region must also be a region of it
        (:func:`region_problem`)."""
        if not isinstance(record, dict) or record.get("status") != CERTIFIED:
            return "not certified"
        if not isinstance(record.get("exercised"), dict):
            return "no record of the region its examples exercised"
        least, arch = self.examples_on(arch), getattr(arch, "value", arch)
        if not _is_int(record.get("examples")) or record["examples"] < least:
            return f"certified on {_shown(record.get('examples'))} examples, the policy asks {least} on {arch}"
        ran, skipped = record.get("oracles") or [], record.get("skipped") or {}
        if not isinstance(ran, list) or not isinstance(skipped, dict):
            return "its oracles are not a list, or its skipped oracles not a mapping"
        missing = [oracle for oracle in self.oracles if oracle not in ran and not str(skipped.get(oracle, "")).strip()]
        if missing:
            return f"oracle {missing[0]} neither ran nor was declared not applicable"
        return None if cell is None else region_problem(record["exercised"], cell)

    def certified_cells_below(self, entry: Entry, section: dict, *, arch: Arch | str) -> list[tuple[str, str]]:
        """``(cell id, why)`` for each cell ``section`` records as certified that this policy does not count as
        one (dispatch does not route it): judged on fewer examples than it asks (the rest of its draws refused
        clearly), an oracle missing, a region that is not its cell's."""
        below = []
        for cell in entry.cells:
            record = section["cells"].get(cell.id)
            if isinstance(record, dict) and record.get("status") == CERTIFIED:
                problem = self.cell_problem(record, cell, arch=arch)
                if problem:
                    below.append((cell.id, problem))
        return below


POLICY = CertificationPolicy(min_examples={
    "cpu-interp": 24,   # docs/draws.md: the last wrong implementation falls at draw 12; twice that
    # docs/draws.md: on sm90 a wrong implementation only a GPU makes wrong (the NVFP4-KV tensor-core scores) fell
    # between draw 4 and about 110 over twelve draw streams: twice the deepest catch (a miss then under 0.1%)
    "sm90": 220,
    # no device to measure on: the deepest depth measured on a GPU (a GPU's own arithmetic makes rare wrongs)
    "sm100": 220, "sm103": 220, "sm107": 220,
}, oracles=ORACLES)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _is_int(value) -> bool:
    return type(value) is int  # a bool is an int to isinstance, never a count or a size here


def _shown(value, limit: int = 60) -> str:
    """A value as a message shows it, cut short: a forged certificate may hold megabytes in one field."""
    text = repr(value) if not _is_int(value) or value.bit_length() < 200 else f"an int of {value.bit_length()} bits"
    return text if len(text) <= limit else text[:limit] + "..."


def _is_range(reached) -> bool:
    return isinstance(reached, list) and len(reached) == 2 and all(map(_is_int, reached)) and reached[0] <= reached[1]


def _is_choices(reached) -> bool:
    return isinstance(reached, list) and bool(reached) and all(isinstance(value, str) for value in reached)


def _choice_name(value) -> str:
    return str(value).removeprefix("torch.")


def region_problem(exercised: dict, cell) -> str | None:
    """None when ``exercised`` is a region of ``cell``: every bound of the cell present, an integer dimension
    as ``[lo, hi]`` inside its span, a choice dimension as names of its choices; else why not.  An empty or
    partial region is no region (it would route every input), and one beyond the cell's bounds was not earned
    by judging this cell."""
    if not exercised:
        return "its exercised region is empty"
    for name, bound in cell.bounds.items():
        reached = exercised.get(name)
        if hasattr(bound, "lo"):
            if not _is_range(reached) or reached[0] < bound.lo or reached[1] > bound.hi:
                return f"its exercised {name} {_shown(reached)} is not a range inside {bound.lo}..{bound.hi}"
        elif not _is_choices(reached) or not set(reached) <= {_choice_name(choice) for choice in bound.choices}:
            return f"its exercised {name} {_shown(reached)} is not a list of the cell's choices"
    return None


def toolchain() -> dict:
    """This machine's versions of the packages a kernel's behaviour depends on (None: not installed)."""
    versions = dict.fromkeys(TOOLCHAIN_PACKAGES)
    for package in TOOLCHAIN_PACKAGES:
        for distribution in _DISTRIBUTIONS[package]:
            try:
                versions[package] = importlib.metadata.version(distribution)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def certificate_path(entry: Entry) -> pathlib.Path:
    return entry.files.certificate


def report_path(entry: Entry, arch: Arch) -> pathlib.Path:
    """Where the report of the run that earned ``arch``'s section is committed, beside the certificate
    (``greedy_argmax.cert.json`` -> ``greedy_argmax.sm90.report.json``)."""
    certificate = certificate_path(entry)
    return certificate.with_name(f"{certificate.name.removesuffix('.cert.json')}.{arch.value}.report.json")


# The catalog and the certificates themselves describe kernels; they are not part of one.  Nor is the
# judge's patch of the Triton interpreter: at a kernel's first launch the interpreter copies its own module
# globals into the kernel module's (FunctionRewriter._compile_and_exec), the patch's functions among them,
# so a digest that followed them would change with whether this process had launched a kernel yet.
_NOT_KERNEL_SOURCES = {"ops", "ops.catalog", "ops.certificates", "references", "references.bounds",
                       "oracles", "oracles.triton_interpreter"}
# What a kernel or reference can use of this project and so change the meaning of (number formats,
# launch helpers, a sibling's kernel, the bit-pattern helpers of the oracles).
_CODE_PREFIXES = ("ops.", "references.", "oracles.")


def modules_used(roots, prefixes: tuple[str, ...], excluded=frozenset()) -> set[str]:
    """Names of the modules under ``prefixes`` that the modules named ``roots`` use, transitively,
    through any name they bind (an imported module, or a function or class from one); roots excluded."""
    pending, seen = list(roots), set(roots)
    while pending:
        for value in vars(sys.modules[pending.pop()]).values():
            # a Triton kernel, by the Python function it wraps: under the interpreter the wrapper's own
            # __module__ is Triton's, on a GPU it is the kernel's, and a digest must not depend on which
            value = value.fn if callable(getattr(value, "fn", None)) else value
            name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            if isinstance(name, str) and name.startswith(prefixes) and name not in seen and name not in excluded:
                seen.add(name)
                pending.append(name)
    return seen - set(roots)


def used_sources(entry: Entry) -> list[pathlib.Path]:
    """Modules of ``ops/``, ``references/`` and ``oracles/`` that the kernel or reference module uses,
    transitively: a kernel shared by sibling ops (``rollback_restore`` runs ``rollback_save``'s), contract
    helpers, number formats (``references/formats``), launch helpers (``ops/triton_backend``)."""
    used = modules_used({entry.kernel.__module__, entry.reference.__module__}, _CODE_PREFIXES, _NOT_KERNEL_SOURCES)
    return sorted(pathlib.Path(sys.modules[name].__file__) for name in used)


# ``ast.parse`` is not safe from several threads at once on CPython 3.11 (its syntax tree constructor keeps
# one recursion counter per interpreter: a thread switch inside it, a finalizer run by the collector, raises
# SystemError "AST constructor recursion depth mismatch"), so each source is parsed once per process,
# under this lock; reentrant, as source_digest holds it around its walk of sys.modules too.
_CODE_LOCK = threading.RLock()
_CODE: dict[bytes, str] = {}


def code_of(source: bytes | str) -> str:
    """A module's meaning: its syntax tree without docstrings (nor any other bare string statement) and
    without positions, so that comments, docstrings and formatting do not count."""
    key = source.encode("utf-8") if isinstance(source, str) else bytes(source)
    with _CODE_LOCK:
        if key not in _CODE:
            _CODE[key] = _code_of(key)
        return _CODE[key]


def _code_of(source: bytes) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [statement for statement in body if not (
                isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str))]
            node.body = kept or [ast.Pass()]
    return canonical_dump(tree)


def canonical_dump(node) -> str:
    """``ast.dump`` (no positions) as Python 3.12 writes it, on any Python: a digest earned on the GPU
    image's 3.12 must read fresh on a 3.11 CI machine.  ``ast.dump``'s own text moves with the version
    (3.12 added ``type_params`` to functions and classes; 3.13 leaves empty lists out), so the form is
    fixed here: every field, ``type_params=[]`` where an older Python has none, an optional field that is
    None left out."""
    if isinstance(node, ast.AST):
        kind = type(node)
        fields = list(kind._fields)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and "type_params" not in fields:
            fields.append("type_params")
        parts = [f"{name}={canonical_dump(getattr(node, name, []))}" for name in fields
                 if not (getattr(node, name, []) is None and getattr(kind, name, ...) is None)]
        return f"{kind.__name__}({', '.join(parts)})"
    if isinstance(node, list):
        return "[" + ", ".join(canonical_dump(item) for item in node) + "]"
    return repr(node)


def source_digest(entry: Entry, read_bytes: Callable[[pathlib.Path], bytes] = pathlib.Path.read_bytes) -> str:
    """The code digest: sha256 of the kernel module (kernel + launch plan + entry and its cells), the
    reference, and the modules they use (``used_sources``), each as :func:`code_of`.  ``read_bytes`` reads a
    source (``tools/gate`` reads them at another git revision)."""
    with _CODE_LOCK:
        return _source_digest(entry, read_bytes)


def _source_digest(entry: Entry, read_bytes: Callable[[pathlib.Path], bytes]) -> str:
    digest = hashlib.sha256()
    for role, path in (("kernel", entry.kernel_file), ("reference", entry.reference_file)):
        digest.update(role.encode() + b"\0" + code_of(read_bytes(pathlib.Path(path))).encode() + b"\0")
    for path in used_sources(entry):
        digest.update(b"uses\0" + path.name.encode() + b"\0" + code_of(read_bytes(path)).encode() + b"\0")
    return digest.hexdigest()


def read_certificate(path: pathlib.Path, text: str | None = None) -> dict:
    """The certificate in ``path`` (or ``text``, its contents) as written; CertificateError naming the file
    when it is not one this code can read."""
    try:
        text = read_regular_bytes(path).decode("utf-8") if text is None else text
        certificate = json.loads(text, parse_constant=_refuse_constant)
    except (OSError, ValueError, RecursionError) as error:
        # ValueError: not JSON, not UTF-8, NaN/Infinity, or an integer past Python's digit limit;
        # RecursionError: nested deeper than the parser recurses
        reason = "empty" if text == "" else f"{type(error).__name__}: {_shown(str(error), 200)}"
        raise CertificateError(f"{path}: unreadable certificate ({reason})") from None
    schema = certificate.get("schema", 1) if isinstance(certificate, dict) else None
    if not _is_int(schema) or schema not in KNOWN_SCHEMAS:
        raise CertificateError(f"{path}: unknown certificate schema {_shown(schema)} (this code reads {KNOWN_SCHEMAS})")
    archs = certificate.get("archs")
    if not isinstance(archs, dict) or not all(
            isinstance(section, dict) and isinstance(section.get("cells"), dict) for section in archs.values()):
        raise CertificateError(f"{path}: not a certificate (expected archs -> sections with cells)")
    for arch, section in archs.items():
        problem = _section_shape_problem(section)
        if problem:
            raise CertificateError(f"{path}: section {_shown(arch)}: {problem}")
    return certificate


def _is_text(value) -> bool:
    return value is None or isinstance(value, str)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number a certificate holds")


# The fields dispatch and the tools read, each with the test its value must pass when present (absent is
# the policy's business).  Other fields (verdicts, annotations) are kept as written.
_SECTION_FIELDS = {"source_sha256": (_is_text, "a string or null"), "report_sha256": (_is_text, "a string or null"),
                   "max_examples": (_is_int, "an integer"), "versions": (dict, "a mapping")}
_CELL_FIELDS = {"status": (str, "a string"), "examples": (_is_int, "an integer"), "oracles": (list, "a list"),
                "skipped": (dict, "a mapping"), "exercised": (dict, "a mapping")}


def _field_problem(record: dict, fields: dict) -> str | None:
    for name, (kind, words) in fields.items():
        if name in record and not (isinstance(record[name], kind) if isinstance(kind, type) else kind(record[name])):
            return f"{name} is {_shown(record[name])}, expected {words}"
    return None


def _section_shape_problem(section: dict) -> str | None:
    """Why a section's fields are not of the types this code reads, or None."""
    problem = _field_problem(section, _SECTION_FIELDS)
    if problem:
        return problem
    if not all(isinstance(v, (str, type(None))) for v in section.get("versions", {}).values()):
        return "versions holds a value that is neither a version string nor null"
    for cell_id, record in section["cells"].items():
        if not isinstance(record, dict):
            return f"cell {_shown(cell_id)} is {type(record).__name__}, expected a mapping"
        problem = _field_problem(record, _CELL_FIELDS)
        if not problem and not all(isinstance(o, str) for o in record.get("oracles", [])):
            problem = "oracles holds a non-string"
        if not problem and not all(isinstance(why, str) for why in record.get("skipped", {}).values()):
            problem = "skipped holds a reason that is not a string"
        for name, reached in ({} if problem else record.get("exercised", {})).items():
            if not problem and not (_is_range(reached) or _is_choices(reached)):
                problem = f"exercised {_shown(name)} is {_shown(reached)}, expected [lo, hi] or a list of names"
        if problem:
            return f"cell {_shown(cell_id)}: {problem}"
    return None


def load(entry: Entry) -> dict:
    """The certificate as written, or an empty one; CertificateError when it cannot be read."""
    path = certificate_path(entry)
    if not path.exists():
        return {"op": entry.name, "archs": {}}
    return read_certificate(path)


@functools.lru_cache(maxsize=None)
def _dispatch_view(entry: Entry) -> tuple[str, dict | CertificateError, dict]:
    try:
        certificate = load(entry)
    except CertificateError as error:
        certificate = error
    return source_digest(entry), certificate, toolchain()


@functools.lru_cache(maxsize=None)
def _dispatch_report_problem(entry: Entry, arch: Arch) -> str | None:
    """:func:`report_problem` of the section dispatch read, checked once, when the section is first read."""
    return report_problem(entry, arch, _dispatch_view(entry)[1]["archs"][arch.value])


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(f"{message}; running the stock op", RuntimeWarning, stacklevel=5)


def forget_cached() -> None:
    """Drop what dispatch read, after a certificate or a source changed in this process."""
    _dispatch_view.cache_clear()
    _dispatch_report_problem.cache_clear()


def arch_status(entry: Entry, arch: Arch, certificate: dict | None = None, digest: str | None = None) -> str:
    """``fresh``, ``stale`` or ``unknown`` for this entry's certificate section of ``arch`` (the code digest
    alone: :data:`POLICY` says whether it may route)."""
    certificate = load(entry) if certificate is None else certificate
    section = certificate["archs"].get(arch.value)
    if section is None:
        return "unknown"
    digest = source_digest(entry) if digest is None else digest
    return "fresh" if section.get("source_sha256") == digest else "stale"


def why_not_certified(entry: Entry, arch: Arch, cell_id: str, params: Mapping | None = None) -> str | None:
    """None when ``cell_id`` holds a section for ``arch`` that meets :data:`POLICY` here (and ``params``,
    the input's cell parameters, lie in the region its examples exercised); else the reason.
    An unreadable certificate is not certified: one warning per file, then the stock op."""
    digest, certificate, versions = _dispatch_view(entry)
    if isinstance(certificate, CertificateError):
        _warn_once(str(certificate))
        return f"certificate unreadable: {certificate}"
    status = arch_status(entry, arch, certificate, digest)
    if status != "fresh":
        return f"certificate for {arch.value} is {status}"
    section = certificate["archs"][arch.value]
    problem = POLICY.section_problem(section, digest, versions, arch=arch) or _dispatch_report_problem(entry, arch)
    if problem:
        return f"certificate for {arch.value} is below the policy: {problem}"
    cell = entry.cell(cell_id)
    record = section["cells"].get(cell_id)
    problem = POLICY.cell_problem(record, cell, arch=arch)
    if problem:
        if isinstance(record, dict) and record.get("status") == CERTIFIED:  # a certified record that is not one
            _warn_once(f"{certificate_path(entry)}: {arch.value} cell {cell_id}: {problem}")
        return f"cell {cell_id} is not certified on {arch.value}" + ("" if problem == "not certified" else f": {problem}")
    return outside_exercised(record, params or {}, cell)


def outside_exercised(record: dict, params: Mapping, cell) -> str | None:
    """Why an input lies outside what a certified cell's examples reached — a certificate claims that
    region only (a CPU size cap narrows it) — else None.  ``record``'s region has passed
    :func:`region_problem` for ``cell``: the cell's bounds are the dimensions judged, each compared whole
    (an int by value, a choice by its exact name)."""
    for name, bound in cell.bounds.items():
        reached, value = record["exercised"][name], params.get(name)
        if hasattr(bound, "lo"):
            if not _is_int(value) or not reached[0] <= value <= reached[1]:
                return f"{name}={_shown(value)} is outside the exercised {reached[0]}..{reached[1]}"
        elif _choice_name(value) not in reached:
            return f"{name}={_choice_name(value)} was not exercised ({', '.join(reached)})"
    return None


def recertify_command(entry: Entry, arch: Arch) -> str:
    device = "cpu" if arch.marker == "cpu" else "cuda"
    return f"tools/certify-cells --op {entry.name} --device {device} --backend {entry.backend}  # on a {arch.value} machine"


@contextlib.contextmanager
def locked(path: pathlib.Path):
    """An exclusive lock on ``path``'s lock file (``NAME.lock`` beside it) for a read-modify-write."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_atomically(path: pathlib.Path, text: str) -> None:
    """Replace ``path`` by ``text`` all at once: a temporary file in the same folder, flushed to disk, renamed
    over it, and the folder flushed, so a kill at any point leaves the old file or the new one, never a part."""
    folder = path.parent
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def report_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_section(entry: Entry, arch: Arch, section: dict, report: dict | None = None) -> pathlib.Path:
    """Replace ``arch``'s section of the entry's certificate (other archs are kept as they are), atomically
    and under the certificate's lock.  ``report``: the JSON report of the run that earned it, written beside
    the certificate (:func:`report_path`) with its sha256 in the section."""
    path = certificate_path(entry)
    if report is not None:
        text = json.dumps(report, indent=2) + "\n"
        write_atomically(report_path(entry, arch), text)
        section = {**section, "report_sha256": report_digest(text)}
    with locked(path):
        certificate = load(entry)
        certificate["schema"] = SCHEMA
        certificate["op"] = entry.name
        certificate["archs"][arch.value] = section
        certificate["archs"] = dict(sorted(certificate["archs"].items()))
        write_atomically(path, json.dumps(certificate, indent=2, sort_keys=False) + "\n")
    forget_cached()
    return path


def report_problem(entry: Entry, arch: Arch, section: dict) -> str | None:
    """None when the report committed beside the certificate is the one ``arch``'s section names; else why."""
    recorded = section.get("report_sha256")
    if not isinstance(recorded, str):
        return "the section records no report digest (re-certify to keep the run's report)"
    path = report_path(entry, arch)
    try:
        text = read_regular_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return f"its report {path} cannot be read ({type(error).__name__})"
    if report_digest(text) != recorded:
        return f"its report {path} is not the one the section names (sha256 differs)"
    return None
