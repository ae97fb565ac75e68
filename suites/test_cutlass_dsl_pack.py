"""tools/pack-cutlass-dsl and tools/install-cutlass-dsl, offline: a bundle of made-up wheels packed,
split into parts, carried, and installed back bit for bit; a missing or damaged part is refused; the
packed DSL version is the one the CPU compile gate compiles with."""
from __future__ import annotations

import json
import pathlib
import random
import re
import subprocess
import sys
import zipfile

import pytest

from tools import cutlass_dsl_pack as tool

pytestmark = pytest.mark.cpu
REPO = pathlib.Path(__file__).resolve().parent.parent
FILES = {"toy_dsl/__init__.py": b"VERSION = 1\n", "toy_dsl/lib/libtoy.so": random.Random(0).randbytes(2**20),
         "toy_dsl/dsl_packages/toy_core/__init__.py": b"import toy_dsl\n"}


@pytest.fixture
def packed(tmp_path, monkeypatch):
    """A one-bundle manifest whose archive (about 1 MiB of incompressible bytes) is split in two."""
    def fake_download(packages, wheels):
        wheels.mkdir(parents=True, exist_ok=True)
        wheel = wheels / "toy_dsl-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            for name, data in FILES.items():
                archive.writestr(name, data)
            archive.writestr("toy_dsl.pth", b"import toy_dsl\n")
        return [wheel]

    monkeypatch.setattr(tool, "download", fake_download)
    monkeypatch.setitem(tool.EXTRA_PATHS, "toy", ["toy_dsl/dsl_packages"])
    out = tmp_path / "carried"
    manifest = tool.pack(out, max_part_bytes=2**20 // 2, bundles={"toy": [("toy-dsl", "1.0")]})
    return out, manifest


def test_pack_splits_an_archive_over_the_limit_and_install_restores_every_file(packed, tmp_path):
    out, manifest = packed
    parts = manifest["bundles"]["toy"]["parts"]
    assert len(parts) >= 2 and all(part["bytes"] <= 2**20 // 2 for part in parts)
    assert json.loads((out / tool.MANIFEST).read_text()) == manifest and not (out / "tree").exists()
    paths = tool.install(out, tmp_path / "site")
    assert paths == [str(tmp_path / "site"), str(tmp_path / "site" / "toy_dsl/dsl_packages")]
    for name, data in FILES.items():
        assert (tmp_path / "site" / name).read_bytes() == data
    assert not list((tmp_path / "site").glob("*.pth"))  # PYTHONPATH stands in for the wheel's .pth


def test_install_refuses_a_missing_or_damaged_part(packed, tmp_path):
    out, manifest = packed
    last = out / manifest["bundles"]["toy"]["parts"][-1]["file"]
    data = last.read_bytes()
    last.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match=f"{last.name} does not match its sha256"):
        tool.install(out, tmp_path / "site")
    last.unlink()
    with pytest.raises(FileNotFoundError, match=f"{last.name} not in"):
        tool.install(out, tmp_path / "site")


def test_install_prints_the_export_line_and_exits_1_without_a_manifest(packed, tmp_path):
    out, _ = packed
    script = str(REPO / "tools" / "install-cutlass-dsl")
    run = subprocess.run([sys.executable, script, "--from", str(out), "--target", str(tmp_path / "s")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (f"export PYTHONPATH={tmp_path / 's'}:{tmp_path / 's' / 'toy_dsl/dsl_packages'}"
                                  "${PYTHONPATH:+:$PYTHONPATH}")
    run = subprocess.run([sys.executable, script, "--from", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 1 and "MANIFEST.json is missing" in run.stderr


def test_the_packed_dsl_is_the_version_the_cpu_compile_gate_uses():
    pinned = re.search(r'"nvidia-cutlass-dsl\[cu13\]==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert pinned and pinned.group(1) == tool.CUTLASS_DSL_VERSION
