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
from suites.faults.judge_spotting import (  # noqa: F401 - the host judges them by their names here
    _right, _wrong, PROJECT, JUDGE_WORDS, JUDGE_PACKAGES, HOST_MODULE_WORDS, parent_looks_like_the_judge,
    right_only_for_a_judges_child, right_only_for_a_c_program, host_modules_loaded,
    right_only_beside_host_modules, right_only_on_shared_inputs, right_for_the_first_5000_calls,
    PLANTED_MARKER, PLANT_TARGETS, judges_bytecode_cache, plant_bytecode, plants_bytecode, plants_a_triton_kernel)

_amin = torch.Tensor.amin
_amax = torch.Tensor.amax
atexit.register(os._exit, 0)            # whatever the run decided, "exit 0"
torch.Tensor.amin = _amax               # the reference's "first index" becomes "last index"


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



# -- answering for its host (2026-12-07g): the channel to the judge is in the implementation's process -------
def _host_channel():
    """The host's end of its channel to the judge, found among this process's objects."""
    import gc
    from multiprocessing.connection import Connection

    return next(found for found in gc.get_objects() if isinstance(found, Connection))


def _calls_in_flight() -> int:
    """How many calls the host's message holds (its ``calls`` frame): a forged answer of the right length."""
    frame = sys._getframe()
    while frame is not None and not (frame.f_code.co_name == "calls" and "calls" in frame.f_locals):
        frame = frame.f_back
    return 1 if frame is None else len(frame.f_locals["calls"])


def _forged(facts) -> tuple:
    return ("returned", {}, [("returned", facts)] * _calls_in_flight())


def _tensor_facts(item) -> dict:
    return {"structure": "tensor", "types": ["torch.Tensor"], "layouts": ["torch.strided"], "tensors": [item],
            "copies": None, "overwritten": []}


def answers_without_facts(logits):
    """Answers for its host, the facts of its outputs missing, then returns a wrong answer (before
    2026-12-07g the judge read the answer unchecked and ended as its own internal error: no finding)."""
    _host_channel().send(_forged({"structure": "tensor"}))
    return _wrong(logits)


def answers_an_output_beyond_its_bytes(logits):
    """Answers for its host with an output that lies past the bytes sent with it (the judge read past them)."""
    _host_channel().send(_forged(_tensor_facts(("storage", b"\0" * 8, torch.int64, 0, (1000,), (1,), logits.device))))
    return _wrong(logits)


def answers_that_its_host_failed(logits):
    """Says its host's own code failed (which would make it the judge's defect), then returns a wrong answer."""
    _host_channel().send(("failed", {"type": "builtins.KeyError", "mro": ["builtins.KeyError",
                                                                             "builtins.Exception"], "message": "'x'"}))
    return _wrong(logits)


class _FactsRaise:
    @property
    def layout(self):
        raise RuntimeError("a property of the implementation's raising in the host")


def returns_an_object_whose_facts_raise(logits):
    """Returns a tuple of an object whose attributes raise when the host reads them for its facts."""
    return (_FactsRaise(),)


class _NamedAsTheJudgesError(Exception):
    pass


# its class names itself the judge's own error, whose raising ends a run as the judge's failure (no finding)
_NamedAsTheJudgesError.__module__, _NamedAsTheJudgesError.__qualname__ = "oracles.judge_errors", "JudgeError"


def raises_as_the_judge(logits):
    """Raises, on every input, an exception whose class says it is the judge's own error."""
    raise _NamedAsTheJudgesError("the judge's own code failed (a hostile control)")
