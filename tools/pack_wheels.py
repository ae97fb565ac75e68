"""tools/pack-wheels and tools/install-wheels: carry the wheels a run needs to a machine with no package
registry (an air-gapped GPU cluster, a device lent through an upload of at most 64 MiB a call).

``pack`` (here, with a registry): ``pip download``s the named requirements as wheels for the target's
Python version and platform (``--no-deps`` unless ``--deps``: a GPU image already has torch and CUDA),
re-stores each wheel's members uncompressed, puts them in one tar and compresses it with xz -9 on every core (zip's
per-file deflate leaves much that xz finds: the CuTe DSL's 92 MiB of wheels become about 61 MiB), then
splits it into parts of at most ``--max-part-mib`` (16 MiB).  ``MANIFEST.json`` lists the wheels and every
part with its size and sha256, and which parts fit in one carry of ``--max-call-mib`` (64 MiB, the
repository's own bytes left aside with ``--reserve-mib``).

``install`` (there, no network): checks every part against the manifest (a missing or damaged part is
refused before anything is unpacked), joins and unpacks them, ``pip install --no-index --no-deps
--target``s the wheels and prints the one line to evaluate, ``export PYTHONPATH=...``: the target and
the folders its ``.pth`` files name (a PYTHONPATH folder's ``.pth`` files are not read, so a wheel that
puts its packages on the path that way, as nvidia-cutlass-dsl does, needs them named).

Exit status: 0 done; 1 a part missing or damaged, or pip failed; 2 a usage error or no manifest (one line).
"""
from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from tools.cli import ArgumentParser, UsageError

MANIFEST = "MANIFEST.json"
ARCHIVE = "wheels.tar.xz"
MIB = 2**20
REPO = pathlib.Path(__file__).resolve().parent.parent
# the manylinux tags an x86-64 GPU image with glibc >= 2.28 accepts, newest first
DEFAULT_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                     "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


# -- pack (here) ----------------------------------------------------------------------------------
def download(requirements: list[str], wheels: pathlib.Path, python: str, platforms: list[str],
             deps: bool) -> list[pathlib.Path]:
    """The wheels pip picks for ``requirements`` on the target; UsageError with pip's last line if none."""
    wheels.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               *[word for platform in platforms for word in ("--platform", platform)],
               *([] if deps else ["--no-deps"]), "-d", str(wheels), *requirements]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"pip download failed: {last}")
    return sorted(wheels.glob("*.whl"))


def stored_copy(wheel: pathlib.Path) -> bytes:
    """The wheel with every member stored, not deflated: the same files (and RECORD), which xz then
    compresses across members; pip installs a stored wheel as it does a deflated one."""
    out = io.BytesIO()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as copy:
        for info in source.infolist():
            member = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            member.external_attr = info.external_attr
            copy.writestr(member, source.read(info))
    return out.getvalue()


# xz compresses blocks on every core; a block restarts the dictionary, so blocks are as large as the cores
# allow: the stored wheels split evenly over them, never below 16 MiB (-9's dictionary is 64 MiB).
MIN_BLOCK_BYTES = 16 * MIB


def xz_command(stored_bytes: int, cores: int) -> list[str]:
    """``xz -9`` on ``cores`` threads over blocks of an equal share of ``stored_bytes`` (at least 16 MiB)."""
    block = max(MIN_BLOCK_BYTES, -(-stored_bytes // max(1, cores)))
    return ["xz", "-9", f"--threads={max(1, cores)}", f"--block-size={block}", "--stdout"]


def write_archive(wheels: list[pathlib.Path], archive: pathlib.Path, cores: int | None = None) -> None:
    """One tar of the stored wheels, xz -9 on every core (the ``xz`` command; Python's lzma on one thread
    where there is none).  Either way one .xz stream that ``tarfile``'s ``r|xz`` reads."""
    stored = [(wheel.name, stored_copy(wheel)) for wheel in wheels]
    cores = cores or os.cpu_count() or 1
    with open(archive, "wb") as target:
        if shutil.which("xz"):
            xz = subprocess.Popen(xz_command(sum(len(data) for _, data in stored), cores), stdin=subprocess.PIPE,
                                  stdout=target)
            _write_tar(stored, xz.stdin)
            xz.stdin.close()
            if xz.wait() != 0:
                raise RuntimeError(f"xz exited with status {xz.returncode}")
        else:
            with lzma.open(target, "wb", preset=9) as compressed:
                _write_tar(stored, compressed)


def _write_tar(stored: list[tuple[str, bytes]], stream) -> None:
    with tarfile.open(fileobj=stream, mode="w|") as tar:
        for name, data in stored:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def split(archive: pathlib.Path, max_part_bytes: int) -> list[pathlib.Path]:
    """``archive.part01``, ``.part02``... of at most ``max_part_bytes`` each; the archive is removed."""
    parts = []
    with open(archive, "rb") as whole:
        while block := whole.read(max_part_bytes):
            part = archive.with_name(f"{archive.name}.part{len(parts) + 1:02d}")
            part.write_bytes(block)
            parts.append(part)
    archive.unlink()
    return parts


def carries(part_sizes: list[int], call_bytes: int) -> list[list[int]]:
    """Consecutive part indices grouped so that each group's bytes fit in one call."""
    groups: list[list[int]] = []
    used = call_bytes
    for index, size in enumerate(part_sizes):
        if used + size > call_bytes:
            groups.append([])
            used = 0
        groups[-1].append(index)
        used += size
    return groups


def pack(requirements: list[str], out: pathlib.Path, python: str, platforms: list[str], deps: bool,
         max_part_bytes: int, call_bytes: int, download=download) -> dict:
    if max_part_bytes > call_bytes:
        raise UsageError(f"--max-part-mib {max_part_bytes / MIB:g} is above the bytes one call carries "
                         f"({call_bytes / MIB:g} MiB): no part could travel")
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob(f"{ARCHIVE}*"), out / MANIFEST]:
        stale.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        wheels = download(requirements, pathlib.Path(scratch), python, platforms, deps)
        if not wheels:
            raise UsageError(f"pip download found no wheel for {' '.join(requirements)}")
        archive = out / ARCHIVE
        print(f"pack-wheels: {len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / MIB:.1f} MiB: "
              f"xz -9 on {os.cpu_count() or 1} cores", file=sys.stderr, flush=True)
        write_archive(wheels, archive)
        manifest = {
            "python": python, "platforms": list(platforms), "requirements": list(requirements),
            "wheels": [{"file": wheel.name, "bytes": wheel.stat().st_size} for wheel in wheels],
        }
    parts = split(archive, max_part_bytes)
    manifest["parts"] = [{"file": part.name, "bytes": part.stat().st_size, "sha256": sha256(part)} for part in parts]
    manifest["carries"] = [[parts[i].name for i in group]
                           for group in carries([p.stat().st_size for p in parts], call_bytes)]
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def pack_main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/pack-wheels", description=__doc__.split("\n\n")[1])
    parser.add_argument("requirements", nargs="*", metavar="REQUIREMENT", help="pip requirement, e.g. quack-kernels==0.6.5")
    parser.add_argument("-r", "--requirement-file", action="append", default=[], metavar="FILE",
                        help="read requirements from FILE (one a line, # comments)")
    parser.add_argument("--out", default=str(REPO / ".whl"), help="where the parts go (default .whl/, git-ignored)")
    parser.add_argument("--python", default="3.12", help="the target's Python version (default 3.12)")
    parser.add_argument("--platform", action="append", metavar="TAG",
                        help=f"a platform tag the target accepts (repeatable; default {DEFAULT_PLATFORMS[0]} and older)")
    parser.add_argument("--deps", action="store_true", help="also download what the requirements depend on")
    parser.add_argument("--max-part-mib", type=float, default=16.0, help="largest part, MiB (default 16)")
    parser.add_argument("--max-call-mib", type=float, default=64.0, help="bytes one upload carries, MiB (default 64)")
    parser.add_argument("--reserve-mib", type=float, default=8.0,
                        help="of those, what the rest of the upload (the repository) takes, MiB (default 8)")
    args = parser.parse_args(argv)
    requirements = list(args.requirements)
    for name in args.requirement_file:
        try:
            lines = pathlib.Path(name).read_text().splitlines()
        except OSError as error:
            raise UsageError(f"--requirement-file {name}: {error.strerror}") from None
        requirements += [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]
    if not requirements:
        raise UsageError("no requirement given (name them, or -r FILE)")
    if min(args.max_part_mib, args.max_call_mib - args.reserve_mib) <= 0:
        raise UsageError("--max-part-mib and --max-call-mib minus --reserve-mib must be positive")
    manifest = pack(requirements, pathlib.Path(args.out), args.python, args.platform or list(DEFAULT_PLATFORMS),
                    args.deps, int(args.max_part_mib * MIB), int((args.max_call_mib - args.reserve_mib) * MIB))
    total = sum(part["bytes"] for part in manifest["parts"])
    print(f"{len(manifest['wheels'])} wheels ({sum(w['bytes'] for w in manifest['wheels']) / MIB:.1f} MiB) -> "
          f"{len(manifest['parts'])} parts ({total / MIB:.1f} MiB) in {args.out}, {len(manifest['carries'])} "
          f"upload(s): " + " | ".join(" ".join(group) for group in manifest["carries"]))
    return 0


# -- install (there) ------------------------------------------------------------------------------
class PartError(Exception):
    """A part that is missing or does not match its sha256: the carried set is incomplete."""


def checked_parts(source: pathlib.Path) -> tuple[dict, list[pathlib.Path]]:
    manifest_path = source / MANIFEST
    if not manifest_path.exists():
        raise UsageError(f"{manifest_path} is missing: run tools/pack-wheels where a registry is reachable")
    try:
        manifest = json.loads(manifest_path.read_text())
        manifest["parts"], manifest["wheels"]
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{manifest_path} is not a pack-wheels manifest") from None
    parts = [source / part["file"] for part in manifest["parts"]]
    missing = [part.name for part in parts if not part.exists()]
    if missing:
        raise PartError(f"{', '.join(missing)} not in {source}: carry every part ({MANIFEST} lists them)")
    for part, expected in zip(parts, manifest["parts"]):
        if sha256(part) != expected["sha256"]:
            raise PartError(f"{part.name} does not match its sha256 in {MANIFEST}: carried incompletely?")
    return manifest, parts


class _JoinedParts:
    """The parts read back to back as one file (tarfile's streaming mode reads nothing else)."""

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


def path_entries(target: pathlib.Path) -> list[str]:
    """The target, then the folders its ``.pth`` files add, as ``site`` would add them for a site folder
    (a line naming a folder, or an ``import`` line that extends ``sys.path`` as nvidia-cutlass-dsl's does)."""
    script = ("import site, sys; before = set(sys.path); site.addsitedir(sys.argv[1]); "
              "print('\\n'.join(entry for entry in sys.path if entry not in before))")
    run = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True)
    if run.returncode != 0:
        raise PartError(f"a .pth file in {target} failed: {(run.stderr.strip().splitlines() or ['no output'])[-1]}")
    added = [entry for entry in run.stdout.splitlines() if entry and entry != str(target)]
    return [str(target), *added]


def install(source: pathlib.Path, target: pathlib.Path, pip=None) -> list[str]:
    """Check, join and unpack the parts in ``source``, pip-install the wheels into ``target``; returns the
    PYTHONPATH entries.  Raises PartError before unpacking anything if a part is missing or damaged."""
    manifest, parts = checked_parts(source)
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(fileobj=_JoinedParts(parts), mode="r|xz") as tar:
            tar.extractall(scratch, filter="data")
        wheels = [str(pathlib.Path(scratch) / wheel["file"]) for wheel in manifest["wheels"]]
        command = pip or [sys.executable, "-m", "pip"]
        run = subprocess.run([*command, "install", "--quiet", "--disable-pip-version-check", "--no-index",
                              "--no-deps", "--upgrade", "--target", str(target), *wheels],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise PartError(f"pip install failed: {(run.stderr.strip().splitlines() or ['no output'])[-1]}")
    print(f"install-wheels: {', '.join(w['file'] for w in manifest['wheels'])} -> {target}", file=sys.stderr)
    return path_entries(target)


def install_main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/install-wheels", description=__doc__.split("\n\n")[2])
    parser.add_argument("--from", dest="source", default=str(REPO / ".whl"),
                        help="where the parts and MANIFEST.json are (default .whl/)")
    parser.add_argument("--target", default="/tmp/wheels", help="where to install (default /tmp/wheels)")
    args = parser.parse_args(argv)
    try:
        paths = install(pathlib.Path(args.source), pathlib.Path(args.target))
    except PartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print("export PYTHONPATH=" + os.pathsep.join(paths) + "${PYTHONPATH:+:$PYTHONPATH}")
    return 0
