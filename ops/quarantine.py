"""The quarantine ledger: known-bad (op, cell, arch) of the catalog kernels, each with its reason.

``ops/quarantine.yml`` sits beside the catalog because it speaks of catalog cells (test lists are
about pytest ids and live in ``test_lists/``)::

    version: 1
    quarantine:
    - op: greedy_argmax
      cell: decode_large_batch
      arch: sm90
      issue: 12                      # an issue number or URL, or a reason (at least one)
      reason: illegal address past 2**31 elements

A quarantined cell is never launched by ``tools/certify-cells`` for the catalog kernel, never
certified (its certificate entry says ``"status": "quarantined"`` with the reason, so dispatch never
routes to it), and a suite's ``test_cell`` skips it with the reason.  ``tools/certify-cells
--check-quarantine`` runs exactly these cells, each in an isolated worker, and fails when one passes:
the ledger must shrink when a bug is fixed.  Every problem in the file is a ``QuarantineError`` with
``file:line`` (duplicate or non-scalar keys and non-UTF-8 text included: ``ops/strict_yaml.py``).
"""
from __future__ import annotations

import dataclasses
import pathlib

import yaml

from ops.catalog import Arch, entries
from ops.strict_yaml import YamlFileError, compose_file

LEDGER = pathlib.Path(__file__).resolve().parent / "quarantine.yml"
QUARANTINED = "quarantined"
_KEYS = {"op", "cell", "arch", "issue", "reason"}


class QuarantineError(ValueError):
    """The ledger does not parse, or names an op, cell or arch the catalog does not have."""


@dataclasses.dataclass(frozen=True)
class Quarantined:
    op: str
    cell: str
    arch: Arch
    issue: str | None
    reason: str | None
    where: str                        # "ops/quarantine.yml:7"

    def record(self) -> dict:
        """What a report and a certificate say about the cell instead of a verdict."""
        return {"quarantine": {"issue": self.issue, "reason": self.reason, "ledger": self.where}}

    def describe(self) -> str:
        return f"{self.where}: {citation(self.issue, self.reason)}"


def citation(issue: str | None, reason: str | None) -> str:
    """``"reason; issue 12"`` (whichever of the two an entry gives)."""
    return "; ".join(part for part in (reason, issue and f"issue {issue}") if part)


def _scalar(node, key: str, where: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or not str(node.value).strip():
        raise QuarantineError(f"{where}: '{key}' must be a non-empty scalar")
    return str(node.value).strip()


def load(path: pathlib.Path | str = LEDGER) -> list[Quarantined]:
    """Parse and check the ledger against the catalog."""
    path = pathlib.Path(path)
    name = _shown(path)
    try:
        root = compose_file(path, name)
    except YamlFileError as error:
        raise QuarantineError(str(error)) from None
    if not isinstance(root, yaml.MappingNode):
        raise QuarantineError(f"{name}:1: expected a mapping with 'version' and 'quarantine'")
    top = {key.value: value for key, value in root.value}
    if set(top) != {"version", "quarantine"} or getattr(top["version"], "value", None) != "1":
        raise QuarantineError(f"{name}:{root.start_mark.line + 1}: top-level keys must be 'version: 1' and "
                              f"'quarantine', got {sorted(top)}")
    listed = top["quarantine"]
    if not isinstance(listed, yaml.SequenceNode):
        raise QuarantineError(f"{name}:{listed.start_mark.line + 1}: 'quarantine' must be a list of entries")
    registry, found, seen = entries(), [], {}
    for node in listed.value:
        where = f"{name}:{node.start_mark.line + 1}"
        if not isinstance(node, yaml.MappingNode):
            raise QuarantineError(f"{where}: an entry is a mapping of op, cell, arch and issue or reason")
        fields = {key.value: value for key, value in node.value}
        missing, unknown = {"op", "cell", "arch"} - set(fields), set(fields) - _KEYS
        if missing or unknown:
            raise QuarantineError(f"{where}: an entry has op, cell, arch and issue or reason; "
                                  f"missing {sorted(missing)}, unknown {sorted(unknown)}")
        if not {"issue", "reason"} & set(fields):
            raise QuarantineError(f"{where}: cite an 'issue' or give a 'reason'")
        op, cell, arch_name = (_scalar(fields[key], key, where) for key in ("op", "cell", "arch"))
        if op not in registry:
            raise QuarantineError(f"{where}: no op named {op!r}; ops: {', '.join(registry)}")
        entry = registry[op]
        if cell not in {c.id for c in entry.cells}:
            raise QuarantineError(f"{where}: {op} has no cell {cell!r}; cells: {', '.join(c.id for c in entry.cells)}")
        try:
            arch = Arch(arch_name)
        except ValueError:
            archs = ", ".join(a.value for a in Arch)
            raise QuarantineError(f"{where}: no arch {arch_name!r}; archs: {archs}") from None
        if arch not in entry.archs:
            raise QuarantineError(f"{where}: {op} does not claim {arch.value}")
        key = (op, cell, arch)
        if key in seen:
            raise QuarantineError(f"{where}: {op}/{cell} on {arch.value} is already quarantined at {seen[key]}")
        seen[key] = where
        issue, reason = (_scalar(fields[k], k, where) if k in fields else None for k in ("issue", "reason"))
        found.append(Quarantined(op, cell, arch, issue, reason, where))
    return found


def _shown(path: pathlib.Path) -> str:
    """The ledger's name as errors show it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(LEDGER.parent.parent))
    except ValueError:
        return str(path)


def lookup(ledger: list[Quarantined], op: str, cell: str, arch: Arch) -> Quarantined | None:
    return next((q for q in ledger if (q.op, q.cell, q.arch) == (op, cell, arch)), None)
