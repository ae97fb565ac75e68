"""The implementation host: the process where an implementation under judgement runs, apart from its judge.

The judge (``tools/engine/impl_executor.py``) starts it as ``python -u -c <bootstrap>`` — nothing on the command
line says what it is for — with an environment from which the platform's variables are removed, and
talks to it over the socket that is its stdin.  It imports torch and the implementation, nothing else
of the project: no references, stock ops, oracles, Hypothesis or pytest.  The two pieces of judging
that must run beside the implementation (poisoned allocations, CUDA graph capture) are loaded from their
files under names of their own (``oracles/allocations.py``, ``oracles/capture.py`` import only torch),
so that no package of the judge is ever in ``sys.modules`` here.

Tensors cross by shared memory on the CPU (torch's ``file_system`` sharing) and by CUDA IPC on the GPU:
the judge's (copied) inputs are written in place here; outputs go back by CUDA IPC, or on the CPU by
value (the bytes of their storages: no shared-memory object per output).
Under compute-sanitizer (stream-ordered allocations, which CUDA IPC does not serve) device tensors cross
through shared host memory instead, each copied to an allocation of its own here, which the sanitizer
bounds tightly.  The
host reports facts — the exact type of each returned object, each output's margined buffer under
poisoned allocations, a copy of each output taken as the call returned — and decides nothing: the
judge checks them from its own side.

Messages, judge -> host: ``("load", {"paths": [...], "functions": {name: (module, attribute)}})``,
``("call", name, arguments, positional, poison or None, moved)``, ``("capture", name, kwargs)``, ``("replay",)``;
host -> judge: ``("loaded", {"missing": [...]})``, ``("returned", outputs)``, ``("captured", outputs)``,
``("replayed",)``, ``("raised", exception facts)`` (the implementation raised), ``("failed", exception facts)``
(the host's own code did, reading what a call returned: the judge's defect).  The host ends when its socket closes.
"""
import ctypes
import faulthandler
import importlib
import importlib.util
import os
import pathlib
import signal
import sys
import time
from multiprocessing.connection import Connection

import torch
import torch.multiprocessing

REPO = pathlib.Path(__file__).resolve().parents[2]
SETTLE_S = 0.002   # after the call returned and the device synchronized: how long a late writer has to show
PR_SET_PDEATHSIG = 1


def _load_beside(name: str):
    """``oracles/<name>.py`` as a module of its own (it imports only torch), never as ``oracles.<name>``."""
    spec = importlib.util.spec_from_file_location(f"host_{name}", REPO / "oracles" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


allocations = _load_beside("allocations")
capture = _load_beside("capture")


def type_name(value) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def exception_facts(error: BaseException) -> dict:
    return {"type": type_name(error), "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__],
            "message": str(error)[:4000]}


def _items(returned) -> tuple[str, list]:
    """How the call returned (``none``, ``tensor``, ``tuple`` or another type's name) and its items."""
    if returned is None:
        return "none", []
    if type(returned) is tuple:
        return "tuple", list(returned)
    if isinstance(returned, torch.Tensor):
        return "tensor", [returned]
    return type_name(returned), list(returned) if isinstance(returned, (list, tuple)) else []


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


def _storage(tensor: torch.Tensor, via_host_memory: bool):
    """A tensor's whole storage as it crosses: by CUDA IPC (the storage itself), or by value (its bytes:
    CPU outputs, which are small, and device outputs through host memory)."""
    data = _bytes_of(tensor)
    return data if data.is_cuda and not via_host_memory else data.cpu().numpy().tobytes()


def _sent(item, poisoned, via_host_memory: bool) -> tuple | None:
    """How one output crosses: its whole storage, or the whole margined buffer it lies in (with the
    margin), and where in it the output lies (None: not a strided torch.Tensor, which has no storage)."""
    if type(item) is not torch.Tensor or item.layout != torch.strided:
        return None
    geometry = (item.dtype, item.storage_offset(), tuple(item.shape), tuple(item.stride()), item.device)
    placed = poisoned.buffer_of(item) if poisoned is not None else None
    if placed is not None:
        buffer, margin = placed
        return ("margined", _storage(buffer, via_host_memory), margin, *geometry)
    return ("storage", _storage(item, via_host_memory), *geometry)


def _to_devices(kwargs: dict, moved: dict) -> tuple[dict, list]:
    """The arguments that came through host memory, on their devices (views of one storage stay views of
    one copy); and (shared bytes, device bytes) pairs to copy back after the call."""
    on_device, back, placed = {}, [], dict(kwargs)
    for name, device in moved.items():
        value = kwargs[name]
        key = value.untyped_storage().data_ptr()
        if key not in on_device:
            shared = _bytes_of(value)
            on_device[key] = shared.to(device)
            back.append((shared, on_device[key]))
        placed[name] = torch.empty(0, dtype=value.dtype, device=device).set_(
            on_device[key].untyped_storage(), value.storage_offset(), value.shape, value.stride())
    return placed, back


def storage_key(value) -> tuple[str, int] | None:
    """Which storage a tensor lies in, here (None for an empty one or a non-strided tensor)."""
    if type(value) is not torch.Tensor or value.layout != torch.strided or not value.untyped_storage().nbytes():
        return None
    return str(value.device), value.untyped_storage().data_ptr()


def outputs(returned, poisoned=None, copies=None, via_host_memory: bool = False, arguments=None) -> dict:
    """The facts of what the call returned.  ``arguments`` (the call's, by name): each output's storage and
    each argument's go with them, so that the judge sees outputs aliasing an input or each other."""
    structure, items = _items(returned)
    facts = {"structure": structure, "types": [type_name(item) for item in items],
             "layouts": [str(getattr(item, "layout", "")) for item in items],
             "tensors": [_sent(item, poisoned, via_host_memory) for item in items],
             "copies": [_sent(copy, None, via_host_memory) for copy in copies] if copies is not None else None,
             "overwritten": poisoned.overwritten_margins() if poisoned is not None else []}
    if arguments is not None:
        facts["storages"] = [storage_key(item) for item in items]
        facts["argument_storages"] = {str(name): storage_key(value) for name, value in arguments.items()
                                      if storage_key(value) is not None}
    return facts


class Host:
    def __init__(self, channel: Connection):
        self.channel = channel
        self.functions = {}
        self.graph = None   # (graph, static inputs, what the captured call returned): kept alive for replays

    def load(self, request: dict) -> tuple:
        sys.path[:0] = [path for path in request["paths"] if path not in sys.path]
        missing = []
        for name, (module_name, attribute) in request["functions"].items():
            found = importlib.import_module(module_name)
            for part in attribute.split("."):
                found = getattr(found, part, None)
            if callable(found):
                self.functions[name] = found
            else:
                missing.append(name)
        return ("loaded", {"missing": missing})

    def call(self, name: str, arguments: dict, positional: int, poison: int | None, moved: dict | None) -> tuple:
        """``arguments``: the positional ones keyed 0..``positional``-1, then the keyword ones.  ``moved``:
        None when tensors cross by CUDA IPC; else the arguments that crossed through host memory, with their
        devices (and the outputs go back the same way)."""
        kwargs, back = _to_devices(arguments, moved) if moved else (dict(arguments), [])
        passed = dict(kwargs)
        args = [kwargs.pop(index) for index in range(positional)]
        poisoned = allocations.PoisonedAllocations(poison) if poison is not None else None
        if poisoned is not None:
            with poisoned:
                returned = self.functions[name](*args, **kwargs)
        else:
            returned = self.functions[name](*args, **kwargs)
        # what the outputs hold as the call returns, on the current stream: work still running on another
        # stream, or a write from a thread, lands after this copy and shows as a difference to the judge
        # (an error of the implementation's device work surfaces here or in the settling: still its own)
        copies = [item.clone() if type(item) is torch.Tensor and item.layout == torch.strided else None
                  for item in _items(returned)[1]]
        self._settle([*args, *kwargs.values()])
        for shared, on_device in back:
            shared.copy_(on_device)
        try:
            return ("returned", outputs(returned, poisoned, copies, via_host_memory=moved is not None,
                                        arguments=passed))
        except Exception as error:  # noqa: BLE001 - its work is done and settled: what fails now is ours
            return ("failed", exception_facts(error))

    def capture(self, name: str, static: dict) -> tuple:
        graph, returned = capture.capture_call(self.functions[name], static)
        self.graph = (graph, static, returned)
        torch.cuda.synchronize()
        return ("captured", outputs(returned))

    def replay(self) -> tuple:
        self.graph[0].replay()
        torch.cuda.synchronize()
        return ("replayed",)

    @staticmethod
    def _settle(arguments: list) -> None:
        if any(isinstance(v, torch.Tensor) and v.is_cuda for v in arguments):
            torch.cuda.synchronize()
        time.sleep(SETTLE_S)

    def serve(self) -> None:
        while True:
            try:
                message = self.channel.recv()
            except (EOFError, OSError):
                return
            handler = getattr(self, message[0])
            try:
                reply = handler(*message[1:])
            except Exception as error:  # noqa: BLE001 - the judge decides what an exception means
                reply = ("raised", exception_facts(error))
            self.channel.send(reply)


def main() -> None:
    # ended with its judge, however the judge ends (a kill leaves nothing to close its socket)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    faulthandler.enable()   # a crash prints its Python stack to the log the judge quotes
    torch.multiprocessing.set_sharing_strategy("file_system")
    channel = Connection(os.dup(0))
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    Host(channel).serve()


if __name__ == "__main__":
    main()
