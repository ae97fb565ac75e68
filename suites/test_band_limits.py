"""docs/band-limits.md lists every band limit a reference declares, with its number; and none is
narrower than the default (a declaration may only widen the limit, with its reason)."""
from __future__ import annotations

import pathlib

import pytest

from ops.catalog import Parity, entries
from oracles.band_limit import DEFAULT_LIMIT, BandLimit

pytestmark = [pytest.mark.cpu]
DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "band-limits.md"


def _declared_rows() -> dict[str, str]:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[0] not in ("op", "(none)"):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def _problems(declared: dict, listed: dict[str, str]) -> list[str]:
    problems = [f"{name}: declared, not listed" for name in sorted(set(declared) - set(listed))]
    problems += [f"{name}: listed, not declared" for name in sorted(set(listed) - set(declared))]
    for name in sorted(set(declared) & set(listed)):
        limit = declared[name]
        if float(listed[name]) != limit.ulp or limit.ulp <= DEFAULT_LIMIT.ulp or not limit.reason.strip():
            problems.append(f"{name}: {limit} listed as {listed[name]}")
    return problems


def test_every_declared_band_limit_is_listed_with_its_number_and_reason():
    declared = {name: entry.band_limit for name, entry in entries().items()
                if entry.parity is Parity.BAND and entry.band_limit is not None}
    assert _problems(declared, _declared_rows()) == []


def test_an_unlisted_or_misnumbered_declaration_is_caught():
    wider = BandLimit(16.0, "control")
    assert _problems({"gdn_verify": wider}, {}) == ["gdn_verify: declared, not listed"]
    assert _problems({"gdn_verify": wider}, {"gdn_verify": "12"})
    assert _problems({}, {"gdn_verify": "16"}) == ["gdn_verify: listed, not declared"]
