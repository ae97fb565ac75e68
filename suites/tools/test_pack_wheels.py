"""tools/pack-wheels and tools/install-wheels, offline: made-up wheels packed, split into parts, carried
and pip-installed back with no index; the path a wheel's .pth adds is printed; a missing or damaged part
is refused before anything is installed."""
from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import random
import subprocess
import sys
import zipfile

import pytest

from tools import pack_wheels as tool

pytestmark = pytest.mark.cpu
REPO = pathlib.Path(__file__).resolve().parent.parent.parent
PART_BYTES = 2**18
# incompressible bytes, so that the archive needs several parts
BLOB = random.Random(0).randbytes(2**20)


def toy_wheel(folder: pathlib.Path, name: str, files: dict[str, bytes]) -> pathlib.Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD with each file's digest)."""
    info = f"{name}-1.0.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in {**files, f"{info}/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    return wheel


def fake_download(requirements, wheels, python, platforms, deps):
    """Two wheels: a package with a large binary, and one whose .pth puts a nested folder on sys.path
    with an import line (as nvidia-cutlass-dsl's does)."""
    return [toy_wheel(wheels, "toy_lib", {"toy_lib/__init__.py": b"VALUE = 7\n", "toy_lib/blob.bin": BLOB}),
            toy_wheel(wheels, "toy_dsl", {
                "toy_dsl/__init__.py": b"",
                "toy_dsl/packages/toy_core/__init__.py": b"import toy_lib\nVALUE = toy_lib.VALUE * 6\n",
                "toy_dsl.pth": b"import sys, os, toy_dsl; sys.path.insert(0, os.path.join(toy_dsl.__path__[0], 'packages'))\n"})]


@pytest.fixture
def packed(tmp_path):
    out = tmp_path / "carried"
    manifest = tool.pack(["toy-lib", "toy-dsl"], out, "3.11", ["any"], deps=False, max_part_bytes=PART_BYTES,
                         call_bytes=3 * PART_BYTES, download=fake_download)
    return out, manifest


def test_pack_splits_into_parts_and_groups_them_into_uploads(packed):
    out, manifest = packed
    assert json.loads((out / tool.MANIFEST).read_text()) == manifest
    sizes = [part["bytes"] for part in manifest["parts"]]
    assert len(sizes) >= 4 and max(sizes) <= PART_BYTES
    assert sorted(path.name for path in out.iterdir()) == sorted([tool.MANIFEST, *(p["file"] for p in manifest["parts"])])
    carried = [name for group in manifest["carries"] for name in group]
    assert carried == [part["file"] for part in manifest["parts"]]
    by_name = dict(zip(carried, sizes))
    assert all(sum(by_name[name] for name in group) <= 3 * PART_BYTES for group in manifest["carries"])


def test_install_puts_every_wheel_on_the_printed_path(packed, tmp_path):
    out, _ = packed
    target = tmp_path / "site"
    run = subprocess.run([sys.executable, str(REPO / "tools" / "install-wheels"), "--from", str(out),
                          "--target", str(target)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    line = run.stdout.strip()
    assert line == f"export PYTHONPATH={target}:{target / 'toy_dsl' / 'packages'}${{PYTHONPATH:+:$PYTHONPATH}}"
    assert (target / "toy_lib" / "blob.bin").read_bytes() == BLOB
    check = subprocess.run(["bash", "-c", f"{line}; {sys.executable} -c 'import toy_core; print(toy_core.VALUE)'"],
                           capture_output=True, text=True)
    assert check.stdout.strip() == "42", check.stderr


def test_a_damaged_or_missing_part_is_refused_and_nothing_is_installed(packed, tmp_path):
    out, manifest = packed
    target = tmp_path / "site"
    script = [sys.executable, str(REPO / "tools" / "install-wheels"), "--from", str(out), "--target", str(target)]
    middle = out / manifest["parts"][1]["file"]
    data = middle.read_bytes()
    middle.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    run = subprocess.run(script, capture_output=True, text=True)
    assert run.returncode == 1 and f"{middle.name} does not match its sha256" in run.stderr, run.stderr
    middle.unlink()
    run = subprocess.run(script, capture_output=True, text=True)
    assert run.returncode == 1 and f"{middle.name} not in" in run.stderr, run.stderr
    assert not target.exists() and run.stdout == ""


@pytest.mark.parametrize("tool_name, arguments, message", [
    ("install-wheels", ["--from", "{tmp}"], "MANIFEST.json is missing"),
    ("pack-wheels", [], "no requirement given"),
    ("pack-wheels", ["-r", "{tmp}/absent.txt"], "--requirement-file"),
    ("pack-wheels", ["x", "--max-part-mib", "70"], "above the bytes one call carries"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, tool_name, arguments, message):
    run = subprocess.run([sys.executable, str(REPO / "tools" / tool_name),
                          *[a.format(tmp=tmp_path) for a in arguments]], capture_output=True, text=True)
    assert run.returncode == 2 and message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_xz_runs_on_every_core_over_blocks_of_an_equal_share():
    """xz -9 compresses one block a thread: blocks of an equal share of the bytes (at least 16 MiB), so
    that each core has one and the dictionary restarts as rarely as the cores allow."""
    assert tool.xz_command(200 * tool.MIB, 2)[1:4] == ["-9", "--threads=2", f"--block-size={100 * tool.MIB}"]
    assert tool.xz_command(tool.MIB, 8)[3] == f"--block-size={tool.MIN_BLOCK_BYTES}"


def test_archive_without_the_xz_command_is_the_same_tar(tmp_path, monkeypatch):
    """Where no ``xz`` command is found Python's lzma writes the archive: install reads both the same way."""
    import tarfile
    wheels = fake_download([], tmp_path, "3.11", ["any"], False)
    archives = {}
    for label, which in (("xz", tool.shutil.which), ("lzma", lambda name: None)):
        monkeypatch.setattr(tool.shutil, "which", which)
        archives[label] = tmp_path / f"{label}.tar.xz"
        tool.write_archive(wheels, archives[label], cores=2)
    members = {label: [(m.name, m.size) for m in tarfile.open(path, "r|xz")] for label, path in archives.items()}
    assert members["xz"] == members["lzma"] == [(w.name, len(tool.stored_copy(w))) for w in wheels]
