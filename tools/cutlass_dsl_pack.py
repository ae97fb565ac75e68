"""tools/pack-cutlass-dsl and tools/install-cutlass-dsl: carry NVIDIA's CuTe DSL (and quack-kernels) to a
GPU machine that has no package registry.

``pack`` (here, with PyPI): downloads the CPython 3.12 manylinux x86-64 wheels the GPU image lacks —
``nvidia-cutlass-dsl`` and its ``libs-core``, ``libs-base`` and ``libs-cu13`` wheels (cu13: the image's
torch is a CUDA 13 build and its driver runs CUDA 13), and for quack ``quack-kernels``,
``apache-tvm-ffi`` and ``torch-c-dlpack-ext`` — unpacks them into one tree each and packs each tree as
the smallest archive we found, tar + xz -9, into ``.cutlass/`` (git-ignored).  Their other needs
(cuda-bindings, protobuf, typing-extensions, einops, numpy, torch) are in the GPU image already.
An archive over ``--max-part-mib`` (60 MiB: the device tool moves
at most 64 MiB a call, the repository included) is split into parts of at most that size, to be carried
in separate calls of one warm lease.  ``.cutlass/MANIFEST.json`` lists every file with its sha256.

``install`` (there, no network): joins each archive's parts, checks them against the manifest, unpacks
them into ``--target`` and prints the one line to evaluate, ``export PYTHONPATH=...`` (the tree, and
the DSL's own ``dsl_packages`` folder that its wheel puts on the path with a .pth file, which a
PYTHONPATH folder does not read).  Nothing is installed into the interpreter: torch stays as it is.

Exit status: 0 done; 1 a part missing or corrupt; 2 a usage error or a failed download (one line).
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

from tools.cli import ArgumentParser, UsageError

CUTLASS_DSL_VERSION = "4.8.1"   # the version pyproject's test extra pins: the CPU compile gate's compiler
BUNDLES = {
    "cutlass-dsl": [(f"nvidia-cutlass-dsl{suffix}", CUTLASS_DSL_VERSION)
                    for suffix in ("", "-libs-core", "-libs-base", "-libs-cu13")],
    "quack": [("quack-kernels", "0.6.5"), ("apache-tvm-ffi", "0.1.15.post2"), ("torch-c-dlpack-ext", "0.1.5")],
}
# where each bundle's importable packages live under the target, besides the target itself
EXTRA_PATHS = {"cutlass-dsl": ["nvidia_cutlass_dsl/dsl_packages"], "quack": []}
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")
MANIFEST = "MANIFEST.json"
MIB = 2**20
REPO = pathlib.Path(__file__).resolve().parent.parent


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


# -- pack (here) ----------------------------------------------------------------------------------
def download(packages: list[tuple[str, str]], wheels: pathlib.Path) -> list[pathlib.Path]:
    wheels.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
               *[word for platform in PLATFORMS for word in ("--platform", platform)], "-d", str(wheels),
               *[f"{name}=={version}" for name, version in packages]]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"pip download failed: {last}")
    found = []
    for name, version in packages:
        stem = f"{name.replace('-', '_')}-{version}-"
        matches = sorted(wheels.glob(f"{stem}*.whl"))
        if len(matches) != 1:
            raise UsageError(f"pip download: expected one wheel {stem}*.whl in {wheels}, found {len(matches)}")
        found.append(matches[0])
    return found


def unpack_wheels(wheels: list[pathlib.Path], tree: pathlib.Path) -> None:
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(tree)
    for path_file in tree.glob("*.pth"):  # replaced by the PYTHONPATH install prints
        path_file.unlink()


def write_archive(tree: pathlib.Path, archive: pathlib.Path) -> None:
    """tar (sorted, owner-free) through xz -9: 61 MiB for the 244 MiB DSL tree, whose wheels zip to 92 MiB."""
    with lzma.open(archive, "wb", preset=9) as compressed, tarfile.open(fileobj=compressed, mode="w") as tar:
        for path in sorted(tree.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(tree)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_file():
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)


def split(archive: pathlib.Path, max_part_bytes: int) -> list[pathlib.Path]:
    """``archive`` itself if small enough; else ``archive.part1``, ``.part2``... of at most that size."""
    size = archive.stat().st_size
    if size <= max_part_bytes:
        return [archive]
    count = -(-size // max_part_bytes)
    part_size = -(-size // count)
    parts = []
    with open(archive, "rb") as whole:
        for index in range(1, count + 1):
            part = archive.with_name(f"{archive.name}.part{index}")
            with open(part, "wb") as handle:
                remaining = part_size
                while remaining and (block := whole.read(min(MIB, remaining))):
                    handle.write(block)
                    remaining -= len(block)
            parts.append(part)
    archive.unlink()
    return parts


def pack(out: pathlib.Path, max_part_bytes: int, bundles=BUNDLES) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"python": PYTHON_VERSION, "bundles": {}}
    for bundle, packages in bundles.items():
        print(f"pack-cutlass-dsl: {bundle}: downloading {', '.join(f'{n}=={v}' for n, v in packages)}",
              file=sys.stderr, flush=True)
        wheels = download(packages, out / "wheels")
        tree = out / "tree" / bundle
        unpack_wheels(wheels, tree)
        archive = out / f"{bundle}-py{PYTHON_VERSION.replace('.', '')}.tar.xz"
        for stale in out.glob(f"{archive.name}*"):
            stale.unlink()
        print(f"pack-cutlass-dsl: {bundle}: packing {tree} (xz -9; minutes for the DSL)", file=sys.stderr, flush=True)
        write_archive(tree, archive)
        parts = split(archive, max_part_bytes)
        manifest["bundles"][bundle] = {
            "packages": [f"{name}=={version}" for name, version in packages],
            "wheel_bytes": sum(wheel.stat().st_size for wheel in wheels),
            "paths": EXTRA_PATHS.get(bundle, []),
            "parts": [{"file": part.name, "bytes": part.stat().st_size, "sha256": sha256(part)} for part in parts],
        }
        shutil.rmtree(tree)
    shutil.rmtree(out / "tree", ignore_errors=True)
    shutil.rmtree(out / "wheels")  # 97 MB that must not travel by mistake with the folder
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def pack_main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/pack-cutlass-dsl", description=__doc__.split("\n\n")[1])
    parser.add_argument("--out", default=str(REPO / ".cutlass"), help="where the archives go (default .cutlass/)")
    parser.add_argument("--max-part-mib", type=float, default=60.0,
                        help="split an archive above this size, MiB (default 60)")
    args = parser.parse_args(argv)
    manifest = pack(pathlib.Path(args.out), int(args.max_part_mib * MIB))
    for bundle, record in manifest["bundles"].items():
        sizes = ", ".join(f"{p['file']} {p['bytes'] / MIB:.1f} MiB" for p in record["parts"])
        print(f"{bundle}: {record['wheel_bytes'] / MIB:.1f} MiB of wheels -> {sizes}")
    return 0


# -- install (there) ------------------------------------------------------------------------------
class _JoinedParts:
    """The parts of one archive read back to back as one file (for tarfile's streaming mode)."""

    def __init__(self, paths: list[pathlib.Path]):
        self.paths, self.handle = list(paths), None

    def read(self, size: int = -1) -> bytes:
        while True:
            if self.handle is None:
                if not self.paths:
                    return b""
                self.handle = open(self.paths.pop(0), "rb")
            block = self.handle.read(size)
            if block or size == 0:
                return block
            self.handle.close()
            self.handle = None


def install(source: pathlib.Path, target: pathlib.Path, bundles: list[str] | None = None) -> list[str]:
    """Unpack ``bundles`` (default: every one in the manifest) from ``source`` into ``target``; returns the
    PYTHONPATH entries.  Raises FileNotFoundError or ValueError naming a missing or corrupt part."""
    manifest_path = source / MANIFEST
    if not manifest_path.exists():
        raise FileNotFoundError(f"{manifest_path} is missing: run tools/pack-cutlass-dsl where PyPI is reachable")
    manifest = json.loads(manifest_path.read_text())
    target.mkdir(parents=True, exist_ok=True)
    paths = [str(target)]
    unknown = sorted(set(bundles or ()) - set(manifest["bundles"]))
    if unknown:
        raise FileNotFoundError(f"no bundle {', '.join(unknown)} in {manifest_path}: {', '.join(manifest['bundles'])}")
    for bundle, record in manifest["bundles"].items():
        if bundles and bundle not in bundles:
            continue
        parts = [source / part["file"] for part in record["parts"]]
        missing = [part.name for part in parts if not part.exists()]
        if missing:
            raise FileNotFoundError(f"{bundle}: {', '.join(missing)} not in {source} (carry every part: "
                                    f"ops/norm/README_section.md)")
        for part, expected in zip(parts, record["parts"]):
            if sha256(part) != expected["sha256"]:
                raise ValueError(f"{bundle}: {part.name} does not match its sha256 in {MANIFEST}: carried incompletely?")
        with tarfile.open(fileobj=_JoinedParts(parts), mode="r|xz") as tar:
            tar.extractall(target, filter="data")
        paths += [str(target / extra) for extra in record["paths"]]
        print(f"install-cutlass-dsl: {bundle}: {', '.join(record['packages'])} -> {target}", file=sys.stderr)
    return paths


def install_main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/install-cutlass-dsl", description=__doc__.split("\n\n")[2])
    parser.add_argument("--from", dest="source", default=str(REPO / ".cutlass"),
                        help="where the archives and MANIFEST.json are (default .cutlass/)")
    parser.add_argument("--target", default="/tmp/cutlass-dsl", help="where to unpack (default /tmp/cutlass-dsl)")
    parser.add_argument("--bundle", action="append", choices=sorted(BUNDLES),
                        help="only this bundle (repeatable; default: every bundle in the manifest)")
    args = parser.parse_args(argv)
    try:
        paths = install(pathlib.Path(args.source), pathlib.Path(args.target), args.bundle)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print("export PYTHONPATH=" + os.pathsep.join(paths) + "${PYTHONPATH:+:$PYTHONPATH}")
    return 0
