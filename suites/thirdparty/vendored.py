"""Third-party source files carried instead of their wheel, and the loader the adapters read them with.

vLLM's wheel is 336 MB (a device call carries 64 MiB) and installs its whole serving stack; its Triton
kernels are single files.  ``SOURCES`` names, per package, the release they come from, the commit it was
built from, the wheel's sha256 and the sha256 of every file taken from it (licenses included).  The files
are never committed (public code stays out of this repository): they live in ``.thirdparty/`` (git-ignored)
and travel to a GPU machine as a carried path (``carry: [".thirdparty"]``).  Where PyPI is reachable,

    python -m suites.thirdparty.vendored vllm

downloads the wheel with pip, checks its sha256, takes the listed files out of it and checks each.

``load_module`` imports a carried file under its own dotted name (``vllm.v1.attention.ops...``) with the
few vLLM modules it imports replaced by stand-ins (``STAND_INS``: the platform and the Triton handles);
``load_function`` compiles one top-level function of a file whose module imports the serving stack
(vLLM's rejection sampler) under the file's own name and line numbers, so that Triton reads its source
from the carried file.  A missing file is an ImportError naming the command above (the adapter tests skip
with it); a file whose sha256 differs from the manifest is a RuntimeError: it is not the code named.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import pathlib
import subprocess
import sys
import tempfile
import types
import zipfile

import ops  # noqa: F401 - on a CPU, chooses the Triton interpreter before the carried files import Triton

import torch  # noqa: E402 - after ops

ROOT = pathlib.Path(__file__).resolve().parents[2] / ".thirdparty"


@dataclasses.dataclass(frozen=True)
class Sources:
    requirement: str          # what pip downloads
    wheel: str                # its file name
    wheel_sha256: str
    commit: str               # the git commit the wheel was built from (its own version file says so)
    files: dict               # path inside the wheel -> sha256
    licenses: tuple           # which of ``files`` are licenses

    @property
    def folder(self) -> pathlib.Path:
        return ROOT / self.requirement.replace("==", "-")


SOURCES = {
    "vllm": Sources(
        requirement="vllm==0.33.0",
        wheel="vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        wheel_sha256="4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa",
        commit="4ba787ec9 (vllm/_version.py of the wheel: __commit_id__ = 'g4ba787ec9')",
        files={
            "vllm/v1/attention/ops/triton_decode_attention.py":
                "6095f9bfe69e7c4f472e27f0757a4ae9c7358b50275908b0715fad9727297dde",
            "vllm/v1/sample/rejection_sampler.py":
                "9f035dd0c5af33b29ffcc63e2192f7b2fb85f8a6b4ac89275ecb5698f7ca2ff1",
            "vllm/third_party/flash_linear_attention/ops/fused_recurrent.py":
                "b065f160e94371192ce743bcd1ce3a9c75ddcecf31be243af4d55b39a898685e",
            "vllm/third_party/flash_linear_attention/ops/op.py":
                "456da84fd12411cf53c96a90dd4f78f49afb454c3d51d2c524ea8e7106fe8ae5",
            "vllm/third_party/flash_linear_attention/ops/utils.py":
                "d6c90d36505e02086954c23ca4dd2fea82a69416d68ff1d0501e16b3148b5b0c",
            "vllm/third_party/flash_linear_attention/LICENSE":
                "1350bfbef13ce4d3d3bdaa2f1fc4b1d1117d846732a2a62f891a67f3d5356d0d",
            "vllm-0.33.0.dist-info/licenses/LICENSE":
                "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
        },
        licenses=("vllm-0.33.0.dist-info/licenses/LICENSE (Apache-2.0, vLLM)",
                  "vllm/third_party/flash_linear_attention/LICENSE (MIT, flash-linear-attention)"),
    ),
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def carried_file(package: str, path: str) -> pathlib.Path:
    """The carried file, checked against the manifest."""
    sources = SOURCES[package]
    found = sources.folder / path
    if not found.is_file():
        raise ImportError(f"{found} is not here: run `python -m suites.thirdparty.vendored {package}` where PyPI "
                          f"is reachable (and carry .thirdparty to a GPU machine)")
    if sha256(found.read_bytes()) != sources.files[path]:
        raise RuntimeError(f"{found}: sha256 differs from {sources.requirement}'s in suites/thirdparty/vendored.py: "
                           "not the code the verdicts name")
    return found


# -- stand-ins for the vLLM modules the carried kernels import -------------------------------------------
class _Platform:
    """``vllm.platforms.current_platform`` as the carried files use it: CUDA (NVIDIA) or nothing."""

    @staticmethod
    def is_rocm() -> bool:
        return False

    @staticmethod
    def is_cuda() -> bool:
        return torch.cuda.is_available()

    is_cuda_alike = is_cuda

    @staticmethod
    def is_device_capability_family(family: int, device_id: int | None = None) -> bool:
        if not torch.cuda.is_available():
            return False
        major, _ = torch.cuda.get_device_capability(device_id)
        return major * 10 == family


def _stand_ins(package_root: pathlib.Path) -> dict[str, types.ModuleType]:
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice

    vllm = types.ModuleType("vllm")
    vllm.__path__ = [str(package_root / "vllm")]   # the carried tree: submodules resolve from it
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = _Platform()
    triton_utils = types.ModuleType("vllm.triton_utils")
    triton_utils.triton, triton_utils.tl, triton_utils.tldevice = triton, tl, tldevice
    return {"vllm": vllm, "vllm.platforms": platforms, "vllm.triton_utils": triton_utils}


STAND_INS = {"vllm": _stand_ins}


def _install_stand_ins(package: str) -> None:
    modules = STAND_INS[package](SOURCES[package].folder)
    present = sys.modules.get(package)
    if present is not None and getattr(present, "__path__", None) != modules[package].__path__:
        raise ImportError(f"a {package} package is imported already ({present!r}): the carried files load under "
                          f"the name {package}")
    for name, module in modules.items():
        sys.modules.setdefault(name, module)


def _forward_builtin_aliases(module: types.ModuleType) -> None:
    """Under the Triton interpreter only: a module-level alias of a ``triton.language`` builtin
    (``exp = tl.exp``, as vLLM's fla copy writes) becomes a function that looks the builtin up when called.
    The interpreter swaps ``tl``'s builtins for its own for the length of a launch and cannot reach an
    alias bound before; the compiler resolves one like the name itself, so on a GPU nothing is touched."""
    import triton.language as tl

    for name, value in list(vars(module).items()):
        if not tl.core.is_builtin(value):
            continue
        home = next((space for space in (tl, tl.math) if getattr(space, value.__name__, None) is value), None)
        if home is not None:
            def forward(*args, _home=home, _name=value.__name__, **kwargs):
                return getattr(_home, _name)(*args, **kwargs)
            setattr(module, name, forward)


def load_module(package: str, path: str) -> types.ModuleType:
    """Import the carried ``path`` (``vllm/v1/.../x.py``) as ``vllm.v1....x``; every carried file of the
    package is checked first."""
    import importlib

    from ops.triton_backend import interpreting

    for listed in SOURCES[package].files:
        if listed.endswith(".py"):
            carried_file(package, listed)
    _install_stand_ins(package)
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    if interpreting():
        _forward_builtin_aliases(module)
    return module


def load_function(package: str, path: str, name: str, namespace: dict):
    """The top-level function ``name`` of the carried ``path``, compiled alone under the file's name and line
    numbers (Triton reads a kernel's source from its file) in ``namespace`` (what its body refers to)."""
    found = carried_file(package, path)
    tree = ast.parse(found.read_text(), filename=str(found))
    nodes = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name]
    if len(nodes) != 1:
        raise ImportError(f"{found}: {len(nodes)} top-level functions named {name}, expected one")
    scope = dict(namespace)
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(found), "exec"), scope)  # noqa: S102 - the carried kernel
    return scope[name]


# -- taking the files out of the wheel (where PyPI is reachable) ----------------------------------------
def materialize(package: str, wheel: pathlib.Path | None = None) -> pathlib.Path:
    """Extract ``package``'s listed files from its wheel (downloaded with pip unless given) into
    ``.thirdparty/``; RuntimeError when the wheel or a file is not the one the manifest names."""
    sources = SOURCES[package]
    with tempfile.TemporaryDirectory() as scratch:
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--implementation", "cp", "--platform",
                            "manylinux_2_28_x86_64", "-d", scratch, sources.requirement], check=True)
            wheel = pathlib.Path(scratch) / sources.wheel
        digest = hashlib.sha256()
        with open(wheel, "rb") as handle:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
        if digest.hexdigest() != sources.wheel_sha256:
            raise RuntimeError(f"{wheel}: sha256 {digest.hexdigest()} is not {sources.requirement}'s in the manifest")
        with zipfile.ZipFile(wheel) as archive:
            for path, expected in sources.files.items():
                data = archive.read(path)
                if sha256(data) != expected:
                    raise RuntimeError(f"{path} in {wheel.name}: sha256 differs from the manifest")
                target = sources.folder / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
    return sources.folder


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in SOURCES:
        print(f"usage: python -m suites.thirdparty.vendored {{{','.join(SOURCES)}}} [WHEEL]", file=sys.stderr)
        sys.exit(2)
    folder = materialize(sys.argv[1], pathlib.Path(sys.argv[2]) if len(sys.argv) == 3 else None)
    print(f"{SOURCES[sys.argv[1]].requirement}: {len(SOURCES[sys.argv[1]].files)} files in {folder}")
