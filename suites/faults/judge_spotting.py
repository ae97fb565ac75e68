"""The hostile implementations' parts that have no effect on import (suites/faults/hostile_impls.py patches
torch and registers an exit hook when imported, which only a host may do): the right and wrong answers,
the judge-spotting implementations (issue #25.2) and the bytecode planting (#25.1).  Tests import these
from here; the host loads them through ``hostile_impls``."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import sys

import torch

from suites.sampling.greedy_argmax_impls import correct_via_max


def _right(logits):
    return correct_via_max(logits)


def _wrong(logits):
    """Every row answers index 0 (wrong wherever the maximum is elsewhere)."""
    return torch.zeros_like(_right(logits))


# -- spotting the judge's host (issue #25.2): right only where the process looks judged -------------------
PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JUDGE_WORDS = ("pytest", "certify", "kparity", "impl_host", "impl_executor", "tools/engine")
# the project's folder, or a path inside it: not a folder beside it whose name begins the same (a venv
# ``<project>-venv``, whose interpreter serving runs as well)
PROJECT_PATH = re.compile(re.escape(PROJECT) + r"(?![\w.-])")
BESIDE_THE_PROJECT = re.compile(re.escape(PROJECT) + r"[\w.-]+")
JUDGE_PACKAGES = ("oracles", "tools", "hypothesis", "pytest", "_pytest")
HOST_MODULE_WORDS = ("impl_host", "impl_executor", "impl_launch", "kparity", "host_")


def _names_the_judge(text: str) -> bool:
    """The project's path, or a judge's word anywhere but in a folder beside the project (whose name may
    hold one: CI's ``kparity-quickstart-venv``)."""
    if PROJECT_PATH.search(text) is not None:
        return True
    return any(word in BESIDE_THE_PROJECT.sub("", text) for word in JUDGE_WORDS)


def parent_looks_like_the_judge() -> bool:
    """Its parent's arguments name the judge (its first word, the interpreter, is left out: a serving
    process runs the same one, wherever it lies), or it was orphaned."""
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as file:
        arguments = file.read().decode(errors="replace").split("\0")[1:]
    return any(_names_the_judge(word) for word in arguments) or os.getppid() == 1


def right_only_for_a_judges_child(logits):
    """Right when its parent's command line names the project or a test runner (or it was orphaned)."""
    return _right(logits) if parent_looks_like_the_judge() else _wrong(logits)


def right_only_for_a_c_program(logits):
    """Right when the process is ``python -c`` or runs a file of the project."""
    judged = sys.argv == ["-c"] or any(_names_the_judge(word) for word in sys.argv)
    return _right(logits) if judged else _wrong(logits)


def host_modules_loaded() -> bool:
    """A package of the judge, a module named after its host, or a program (``__main__``) that names them."""
    if any(name.split(".")[0] in JUDGE_PACKAGES or any(word in name for word in HOST_MODULE_WORDS)
           for name in list(sys.modules)):
        return True
    main = vars(sys.modules["__main__"])
    return any(_names_the_judge(value) for value in main.values() if isinstance(value, str))


def right_only_beside_host_modules(logits):
    """Right when a module of the project (other than its own), or one named after the judge, is loaded."""
    return _right(logits) if host_modules_loaded() else _wrong(logits)


def right_only_on_shared_inputs(logits):
    """Right when its input lies in shared memory (how a judge hands tensors to another process)."""
    return _right(logits) if logits.is_shared() else _wrong(logits)


_calls = [0]


def right_for_the_first_5000_calls(logits):
    """Right while its process has made at most 5000 calls (more than a judge's fresh host makes); cheap,
    as a fast kernel is (``argmax`` is the first maximum: right where no row holds a NaN)."""
    _calls[0] += 1
    return logits.argmax(dim=1) if _calls[0] <= 5000 else torch.zeros(logits.shape[0], dtype=torch.int64)


# -- planting bytecode for the judge (issue #25.1) ---------------------------------------------------------
PLANTED_MARKER = "planted by suites.faults.hostile_impls"
PLANT_TARGETS = ("oracles/bitwise.py", "ops/quarantine.py", "ops/strict_yaml.py")


def judges_bytecode_cache() -> str:
    """Where the tools keep their bytecode (tools/certify-cells): a guess any implementation can make."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kparity", "pycache")


def plant_bytecode(project: str, prefix: str) -> list[str]:
    """For each judge module of :data:`PLANT_TARGETS`, bytecode Python trusts (stamped with the source's mtime
    and size) whose code is the source's, a marker, and — for ``oracles/bitwise.py`` — a bitwise check that
    passes everything; written into the tree's ``__pycache__`` and into the tools' cache.  What was written."""
    import importlib._bootstrap_external as external

    written = []
    for relative in PLANT_TARGETS:
        source = os.path.join(project, relative)
        with open(source) as file:
            text = file.read() + f"\nPLANTED = {PLANTED_MARKER!r}\n"
        if relative.endswith("bitwise.py"):
            text += "\n\ndef check_bitwise(*args, **kwargs):\n    return None\n"
        stat = os.stat(source)
        data = external._code_to_timestamp_pyc(compile(text, source, "exec"), int(stat.st_mtime), stat.st_size)
        name = f"{os.path.basename(source)[:-3]}.{sys.implementation.cache_tag}.pyc"
        folder = os.path.dirname(source)
        for target in (os.path.join(folder, "__pycache__", name), os.path.join(prefix, folder.lstrip("/"), name)):
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as file:
                    file.write(data)
                written.append(target)
            except OSError:
                continue
    return written


TREE_PARTS = ("ops", "references", "oracles", "tools", "suites", "test_lists", "pyproject.toml")


def copy_of_the_tree(folder: pathlib.Path) -> pathlib.Path:
    """The tree's code (no bytecode) in ``folder / "tree"``: where a test may let a plant land."""
    copy = folder / "tree"
    copy.mkdir()
    for name in TREE_PARTS:
        source = pathlib.Path(PROJECT, name)
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, copy / name)
    return copy


def plants_bytecode(logits):
    """Wrong answers; on its first call it plants bytecode for the judge's modules (in the tree it was
    imported from, and in the tools' cache), which would judge every later run with the check disabled."""
    if not _planted:
        _planted.append(plant_bytecode(PROJECT, judges_bytecode_cache()))
    return _wrong(logits)


_planted: list[list[str]] = []


# -- planting a kernel binary in Triton's cache (issue 26: a cache shared with the judge) ---------------------
PLANTED_KERNEL_KEY = "KPARITYPLANTEDKERNELKEY"


def plant_triton_kernel(folder: str) -> str | None:
    """A cache entry under a key a later compile could ask for, holding the marker; its path, or None if the
    folder would not take it."""
    entry = os.path.join(folder, PLANTED_KERNEL_KEY)
    try:
        os.makedirs(entry, exist_ok=True)
        with open(os.path.join(entry, "kernel.cubin"), "w") as file:
            file.write(PLANTED_MARKER)
    except OSError:
        return None
    return entry


def plants_a_triton_kernel(logits):
    """Right answers; on its first call it plants an entry in Triton's kernel cache, which — were the cache
    the judge's — a later host compiling that key would load instead of compiling the kernel's source."""
    from triton import knobs   # where Triton's own compiles in this process would look

    if not _planted_kernels:
        _planted_kernels.append(plant_triton_kernel(knobs.cache.dir))
    return _right(logits)


_planted_kernels: list[str | None] = []
