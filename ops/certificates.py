"""Certificates: per architecture and per cell, what the oracle battery proved and on which source.

A certificate is a JSON file beside its kernel (``ops/sampling/greedy_argmax.py`` ->
``ops/sampling/greedy_argmax.cert.json``; an op's CuTe DSL kernel ``ops/norm/rms_norm_gated_cute.py`` has
its own, ``ops/norm/rms_norm_gated_cute.cert.json``), written only by ``tools/certify-cells``.  Each arch section
records the sha256 of the kernel and reference sources it was earned on (with every module of ops/ and
references/ they use: a kernel shared by sibling ops, number formats, launch helpers); when they change the
section is *stale* and certified dispatch stops routing to the kernel.  A missing arch reads as unknown.
"""
from __future__ import annotations

import functools
import hashlib
import json
import pathlib
import sys
import types
from typing import Any, Callable

# An ``ops.catalog.Entry`` and ``ops.catalog.Arch``: the catalog reads certificates to route calls, so this
# module names its types without importing it.
Entry = Arch = Any

CERTIFIED = "certified"
FAILED = "failed"


def certificate_path(entry: Entry) -> pathlib.Path:
    return entry.files.certificate


# The catalog, its cell bounds and the certificates themselves describe kernels; they are not part of one.
_NOT_KERNEL_SOURCES = {"ops", "ops.catalog", "ops.certificates", "references", "references.bounds"}


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
    """Modules of ``ops/`` and ``references/`` that the kernel or reference module uses, transitively:
    a kernel shared by sibling ops (``rollback_restore`` runs ``rollback_save``'s), contract helpers,
    number formats (``references/formats``), launch helpers (``ops/triton_backend``)."""
    used = modules_used({entry.kernel.__module__, entry.reference.__module__}, ("ops.", "references."),
                        _NOT_KERNEL_SOURCES)
    return sorted(pathlib.Path(sys.modules[name].__file__) for name in used)


def source_digest(entry: Entry, read_bytes: Callable[[pathlib.Path], bytes] = pathlib.Path.read_bytes) -> str:
    """sha256 of the kernel module (kernel + launch plan + entry and its cells), the reference, and the
    modules they use (``used_sources``).  ``read_bytes`` reads a source (``tools/gate`` reads them at
    another git revision)."""
    digest = hashlib.sha256()
    for role, path in (("kernel", entry.kernel_file), ("reference", entry.reference_file)):
        digest.update(role.encode() + b"\0" + read_bytes(pathlib.Path(path)) + b"\0")
    for path in used_sources(entry):
        digest.update(b"uses\0" + path.name.encode() + b"\0" + read_bytes(path) + b"\0")
    return digest.hexdigest()


def load(entry: Entry) -> dict:
    """The certificate as written, or an empty one."""
    path = certificate_path(entry)
    if not path.exists():
        return {"op": entry.name, "archs": {}}
    return json.loads(path.read_text())


@functools.lru_cache(maxsize=None)
def _dispatch_view(entry: Entry) -> tuple[str, dict]:
    return source_digest(entry), load(entry)


def forget_cached() -> None:
    """Drop what dispatch read, after a certificate or a source changed in this process."""
    _dispatch_view.cache_clear()


def arch_status(entry: Entry, arch: Arch, certificate: dict | None = None, digest: str | None = None) -> str:
    """``fresh``, ``stale`` or ``unknown`` for this entry's certificate section of ``arch``."""
    certificate = load(entry) if certificate is None else certificate
    section = certificate["archs"].get(arch.value)
    if section is None:
        return "unknown"
    digest = source_digest(entry) if digest is None else digest
    return "fresh" if section["source_sha256"] == digest else "stale"


def why_not_certified(entry: Entry, arch: Arch, cell_id: str) -> str | None:
    """None when ``cell_id`` holds a fresh certificate for ``arch``; else the reason, in words."""
    digest, certificate = _dispatch_view(entry)
    status = arch_status(entry, arch, certificate, digest)
    if status != "fresh":
        return f"certificate for {arch.value} is {status}"
    cell = certificate["archs"][arch.value]["cells"].get(cell_id)
    if cell is None or cell["status"] != CERTIFIED:
        return f"cell {cell_id} is not certified on {arch.value}"
    return None


def recertify_command(entry: Entry, arch: Arch) -> str:
    device = "cpu" if arch.marker == "cpu" else "cuda"
    return f"tools/certify-cells --op {entry.name} --device {device} --backend {entry.backend}  # on a {arch.value} machine"


def write_section(entry: Entry, arch: Arch, section: dict) -> pathlib.Path:
    """Replace ``arch``'s section of the entry's certificate (other archs are kept as they are)."""
    certificate = load(entry)
    certificate["op"] = entry.name
    certificate["archs"][arch.value] = section
    certificate["archs"] = dict(sorted(certificate["archs"].items()))
    path = certificate_path(entry)
    path.write_text(json.dumps(certificate, indent=2, sort_keys=False) + "\n")
    forget_cached()
    return path
