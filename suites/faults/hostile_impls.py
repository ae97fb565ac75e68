"""Hostile implementations of ``greedy_argmax``: each tries to talk its way to a certificate.

They are wrong (or right only when watched) and attack the judge instead of the contract — the classes
of issue #16 and of KernelBench's and GPU MODE's exploit lists.  ``test_hostile_impls.py`` runs each
through the real path (``tools/certify-cells --impl`` and the engine's hosted executor) and requires a
failed cell, exit 1 and no certificate; the correct control beside them must still pass.
Judge one yourself: ``tools/certify-cells --op greedy_argmax --device cpu --impl suites.faults.hostile_impls:NAME``.

Import-time hostility is part of the attack (it ran inside the judge before the separation): importing
this module registers an exit hook that forces exit status 0, and replaces ``torch.Tensor.amin`` — which
the contract's reference uses — so that a reference running beside it would agree with the wrong answers
of :func:`patches_the_reference`.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time

import torch

from references.sampling.greedy_argmax import validate
from suites.sampling.greedy_argmax_impls import correct_via_max

_amin = torch.Tensor.amin
_amax = torch.Tensor.amax
atexit.register(os._exit, 0)            # whatever the run decided, "exit 0"
torch.Tensor.amin = _amax               # the reference's "first index" becomes "last index"


def _right(logits):
    return correct_via_max(logits)


def _wrong(logits):
    """Every row answers index 0 (wrong wherever the maximum is elsewhere)."""
    return torch.zeros_like(_right(logits))


# -- ending the judge's process --------------------------------------------------------------------------
def exits_during_call(logits):
    sys.exit(0)


def os_exits_during_call(logits):
    os._exit(0)


def exit_hook_only(logits):
    """Wrong answers; only the import-time exit hook (``os._exit(0)`` at exit) argues for it."""
    return _wrong(logits)


# -- patching the judge ---------------------------------------------------------------------------------
def _patch_judge_forever() -> None:
    while True:
        for name, attribute, replacement in (("oracles.bitwise", "check_bitwise", lambda *a, **k: None),
                                             ("oracles.bitwise", "first_difference", lambda *a, **k: None),
                                             ("oracles.battery", "check_bitwise", lambda *a, **k: None)):
            module = sys.modules.get(name)
            if module is not None:
                setattr(module, attribute, replacement)
        time.sleep(0.001)


_patcher: list[threading.Thread] = []


def patches_the_judge_from_a_thread(logits):
    """Wrong answers, and a thread that turns the judge's comparisons into no-ops wherever it finds them."""
    if not _patcher:
        _patcher.append(threading.Thread(target=_patch_judge_forever, daemon=True))
        _patcher[0].start()
    return _wrong(logits)


def patches_the_reference(logits):
    """The last index of the maximum (the contract says the first); the import-time patch of
    ``Tensor.amin`` makes the reference say the same, where the reference shares this process."""
    validate(logits)
    torch.Tensor.amin = _amin
    try:
        flipped = _right(logits.flip(1))
    finally:
        torch.Tensor.amin = _amax
    return logits.shape[1] - 1 - flipped


# -- detecting the harness ----------------------------------------------------------------------------
HARNESS_MODULES = ("hypothesis", "pytest", "_pytest")
HARNESS_WORDS = ("pytest", "hypothesis", "certify", "judge", "test")
HARNESS_ENV = ("KPARITY_", "PYTEST_", "HYPOTHESIS")


def under_a_harness() -> bool:
    command_line = " ".join(sys.argv).lower()
    return (any(name.split(".")[0] in HARNESS_MODULES for name in list(sys.modules))
            or any(word in command_line for word in HARNESS_WORDS)
            or any(name.startswith(HARNESS_ENV) for name in os.environ))


def right_only_under_a_harness(logits):
    """Right while it sees a test harness; wrong in serving."""
    return _right(logits) if under_a_harness() else _wrong(logits)


# -- spotting the judge's host (issue #25.2): right only where the process looks judged -------------------
PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JUDGE_WORDS = ("pytest", "certify", "kparity", "impl_host", "impl_executor", "tools/engine", PROJECT)
JUDGE_PACKAGES = ("oracles", "tools", "hypothesis", "pytest", "_pytest")
HOST_MODULE_WORDS = ("impl_host", "impl_executor", "impl_launch", "kparity", "host_")


def _names_the_judge(text: str) -> bool:
    return any(word in text for word in JUDGE_WORDS)


def parent_looks_like_the_judge() -> bool:
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as file:
        return _names_the_judge(file.read().decode(errors="replace")) or os.getppid() == 1


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


def plants_bytecode(logits):
    """Wrong answers; on its first call it plants bytecode for the judge's modules (in the tree it was
    imported from, and in the tools' cache), which would judge every later run with the check disabled."""
    if not _planted:
        _planted.append(plant_bytecode(PROJECT, judges_bytecode_cache()))
    return _wrong(logits)


_planted: list[list[str]] = []


# -- faking the comparison ----------------------------------------------------------------------------
class AlwaysEqual(torch.Tensor):
    """A tensor that says it equals anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.equal:
            return True
        if func in (torch.Tensor.__eq__, torch.eq, torch.Tensor.eq):
            return torch.ones(torch.broadcast_shapes(*(a.shape for a in args if isinstance(a, torch.Tensor))),
                              dtype=torch.bool)
        if func in (torch.Tensor.__ne__, torch.ne, torch.Tensor.ne):
            return torch.zeros(torch.broadcast_shapes(*(a.shape for a in args if isinstance(a, torch.Tensor))),
                               dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs)


def fakes_equality_with_a_subclass(logits):
    return _wrong(logits).as_subclass(AlwaysEqual)


def writes_after_returning(logits):
    """Returns zeros and writes the right answer into them a moment later, from a thread."""
    answer = _right(logits)
    out = torch.zeros_like(answer)
    threading.Timer(0.0005, out.copy_, (answer,)).start()
    return out


def modifies_its_input(logits):
    """Right answers, then scribbles over the logits it was given (the contract does not let it)."""
    answer = _right(logits)
    logits.zero_()
    return answer


# -- the GPU's own ways (suites/faults/test_hostile_impls.py, sm90) -------------------------------------
def leaves_work_on_a_side_stream(logits):
    """Writes the answer on another stream after a long sleep, and returns without waiting for it."""
    answer = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        answer.copy_(_right(logits))
    return answer


_by_address: dict = {}


def caches_by_input_address(logits):
    """Computes once per input address and returns that result ever after (stale under graph replays,
    where the captured buffers keep their address while their contents change)."""
    key = (logits.data_ptr(), tuple(logits.shape))
    if key not in _by_address:
        _by_address[key] = _right(logits)
    return _by_address[key]


def answers_on_the_cpu(logits):
    """Right values, on the wrong device."""
    return _right(logits).cpu()

