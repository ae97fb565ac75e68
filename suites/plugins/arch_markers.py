"""Architecture markers: ``cpu sm90 sm100 sm103 sm107``.

Every test carries the markers of the architectures it is valid on (a test with none is a collection
error).  On a machine of another architecture it is skipped with the reason.  Asking for an
architecture this machine is not (``pytest -m sm103`` on an H200 or a CPU) fails loudly instead of
"passing" with everything skipped, unless ``--allow-arch-mismatch``.
"""
from __future__ import annotations

import re

import pytest

from tools.engine.test_lists import ARCH_MARKERS


def machine_marker() -> str | None:
    """This machine's arch marker: its first CUDA device's, or ``cpu`` without CUDA."""
    import torch

    from ops.catalog import arch_of

    if not torch.cuda.is_available():
        return "cpu"
    arch = arch_of("cuda")
    return arch.marker if arch else None


def requested_archs(markexpr: str) -> set[str]:
    """Arch markers a ``-m`` expression asks for (those not directly negated by ``not``)."""
    return {marker for marker in ARCH_MARKERS
            if re.search(rf"(?<!not )\b{marker}\b", re.sub(r"\s+", " ", markexpr))}


def pytest_addoption(parser):
    parser.addoption("--allow-arch-mismatch", action="store_true", default=False,
                     help="let -m select an architecture this machine is not (its tests are skipped)")


def pytest_configure(config):
    here = machine_marker()
    config.kparity_machine_marker = here
    missing = requested_archs(config.option.markexpr or "") - {here}
    if missing and not config.getoption("allow_arch_mismatch"):
        raise pytest.UsageError(
            f"-m {config.option.markexpr!r} selects {', '.join(sorted(missing))} tests, but this machine is "
            f"{here or 'an unknown architecture'}: every one of them would be skipped. Run on such a device, "
            f"or pass --allow-arch-mismatch to accept that.")


def pytest_collection_modifyitems(session, config, items):
    here = config.kparity_machine_marker
    unmarked = []
    for item in items:
        archs = sorted(m.name for m in item.iter_markers() if m.name in ARCH_MARKERS)
        if not archs:
            unmarked.append(item.nodeid)
        elif here not in archs:
            item.add_marker(pytest.mark.skip(reason=f"valid on {', '.join(archs)}; this machine is {here}"))
    if unmarked:
        raise pytest.UsageError("tests without an arch marker (" + " ".join(ARCH_MARKERS) + "):\n  "
                                + "\n  ".join(unmarked))
