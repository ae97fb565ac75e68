"""The implementation host: the process where an implementation under judgement runs, apart from its judge.

The judge (``tools/engine/impl_executor.py``) starts it as ``python -u <temporary folder>/main.py``, a copy of
``tools/engine/impl_launch.py`` — nothing on the command line says what it is for — with an environment from
which the platform's variables are removed, and talks to it over the socket that is its stdin.  The
launcher makes the judge's code read-only (a mount namespace), detaches (the host is not the judge's
child) and runs this code, sent over the socket, in a namespace of its own: no module of this file.  It imports torch and the implementation, nothing else
of the project: no references, stock ops, oracles, Hypothesis or pytest.  The two pieces of judging
that must run beside the implementation (poisoned allocations, CUDA graph capture) are loaded from their
files under names of their own (``oracles/allocations.py``, ``oracles/capture.py`` import only torch),
so that no package of the judge is ever in ``sys.modules`` here; so is the patch that makes the Triton
interpreter compute as the GPU (``oracles/triton_interpreter.py``), where the interpreter runs.

Tensors cross by shared memory on the CPU (torch's ``file_system`` sharing) and by CUDA IPC on the GPU,
through *staging buffers* shared once and reused: the judge's copies of the inputs lie in buffers of its
own, each sent (shared) with the first message that uses it and named by its number after that; the host
keeps each one it was sent for its whole life, so no call opens an IPC handle or maps a file.  Outputs go
back the same way from the host's own buffers on the GPU (copied there after the call), and on the CPU by
value (the bytes of their storages).
The judge's copies are copied again here, into private memory, for the call (what the implementation
sees is never shared memory), and written back after it.  Before its first judged call the host makes a
number of warm-up calls the judge drew at random (on private copies of that call's inputs, outputs
discarded): an implementation cannot tell its judged calls by counting.
Under compute-sanitizer (stream-ordered allocations, which CUDA IPC does not serve) device tensors cross
through shared host memory instead, each copied to an allocation of its own here, which the sanitizer
bounds tightly.  The
host reports facts — the exact type of each returned object, each output's margined buffer under
poisoned allocations, a copy of each output taken as the call returned — and decides nothing: the
judge checks them from its own side.

Messages, judge -> host: ``("load", {"paths": [...], "functions": {name: (module, attribute)}})``,
``("calls", shares, [(name, plain, views, positional, poison or None, moved) or ("replay",), ...])``
(several calls in one message, run in order, a replay of the captured graph among them; one settle
after the last), ``("capture", name, plain, views, shares)``,
``("replay",)``, ``("end_cell",)``; host -> judge: ``("started", {"unprotected": None or why not})`` first,
``("loaded", {"missing": [...]})``, ``("returned", shares, [("returned",
outputs) or ("raised", exception facts), ...])`` (the calls after a raising one do not run),
``("captured", outputs)``, ``("replayed",)``, ``("cell_ended", bytes)`` (its caching allocator's most reserved
since the last cell ended; every buffer of the cell let go on both sides, whose numbers start again from
nothing), ``("raised", exception facts)`` (the implementation raised),
``("failed", exception facts)`` (the host's own code did, reading what a call returned; in the
implementation's process, so the judge holds it against the implementation, as a crash).  ``shares``: {buffer number:
uint8 tensor} for the buffers the other side has not been sent yet; ``views``: {argument: (buffer number or
None for an empty storage, dtype, storage offset, shape, stride, device)}; ``plain``: the other arguments.
The host ends when its socket closes.
"""
import faulthandler
import importlib
import importlib.util
import os
import pathlib
import sys
import time
from multiprocessing.connection import Connection

import torch
import torch.multiprocessing

SETTLE_S = 0.002   # after the call returned and the device synchronized: how long a late writer has to show
allocations = capture = None   # oracles/allocations.py and oracles/capture.py, loaded by serve()


def _load_beside(repo: str, name: str):
    """``oracles/<name>.py`` as a module of its own (it imports only torch), never in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(name, pathlib.Path(repo) / "oracles" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def type_name(value) -> str:
    kind = type(value)
    try:   # a class of the implementation's may answer its own names, or raise
        return f"{kind.__module__}.{kind.__qualname__}"
    except Exception:  # noqa: BLE001 - its name is not the judge's to read then
        return "a class whose name cannot be read"


def exception_facts(error: BaseException) -> dict:
    return {"type": type_name(error), "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__],
            "message": str(error)[:4000]}


def _items(returned) -> tuple[str, list]:
    """How the call returned (``none``, ``tensor``, ``tuple`` or another type's name) and its items.  Exact
    types only: reading an object of the implementation's classes (a subclass's iteration, a property) runs
    its code here, which could make the host's own code raise."""
    if returned is None:
        return "none", []
    if type(returned) is tuple:
        return "tuple", list(returned)
    if type(returned) is torch.Tensor:
        return "tensor", [returned]
    return type_name(returned), list(returned) if type(returned) is list else []


def _opened(shares: dict) -> dict[int, torch.Tensor]:
    """The judge's staging buffers: as sent, or mapped from the file it named (``("file", path, bytes)``:
    for a host under a uid of its own, which cannot open the judge's torch shared memory)."""
    return {number: torch.from_file(buffer[1], shared=True, size=buffer[2], dtype=torch.uint8)
            if isinstance(buffer, tuple) else buffer for number, buffer in shares.items()}


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


class OutputBuffers:
    """The host's own buffers for outputs that cross by CUDA IPC: one per size class and message slot, made
    once and kept (the judge keeps each one open: no IPC handle per call).  Those of a message are free
    again when the next message arrives: the judge copied out of them before it sent that one."""

    def __init__(self):
        self.buffers: dict[int, torch.Tensor] = {}
        self.free: dict[tuple, list[int]] = {}
        self.busy: list[tuple] = []
        self.unsent: dict[int, torch.Tensor] = {}

    def holding(self, data: torch.Tensor) -> tuple[int, int]:
        """A buffer holding a copy of the uint8 ``data`` (on the current stream): (its number, the length)."""
        key = (data.device, allocations.pooled_bytes(data.numel()))
        free = self.free.get(key)
        if free:
            number = free.pop()
        else:
            number = len(self.buffers)
            self.buffers[number] = self.unsent[number] = torch.empty(key[1], dtype=torch.uint8, device=key[0])
        self.buffers[number][:data.numel()].copy_(data)
        self.busy.append((key, number))
        return number, data.numel()

    def release(self) -> None:
        for key, number in self.busy:
            self.free.setdefault(key, []).append(number)
        self.busy = []

    def shares(self) -> dict[int, torch.Tensor]:
        """The buffers made since the last reply (sent once; the judge keeps them)."""
        shares, self.unsent = self.unsent, {}
        return shares


def _storage(tensor: torch.Tensor, via_host_memory: bool, pool: OutputBuffers | None):
    """A tensor's whole storage as it crosses: a copy in one of the host's ``pool`` buffers (number, length),
    the storage itself by CUDA IPC (no ``pool``: a captured graph's outputs, read live), or by value (its
    bytes: CPU outputs, which are small, and device outputs through host memory)."""
    data = _bytes_of(tensor)
    if not data.is_cuda or via_host_memory:
        return data.cpu().numpy().tobytes()
    if pool is None:
        return data
    return pool.holding(data) if data.numel() else b""


def _sent(item, poisoned, via_host_memory: bool, pool: OutputBuffers | None) -> tuple | None:
    """How one output crosses: its whole storage, or the whole margined buffer it lies in (with the
    margin), and where in it the output lies (None: not a strided torch.Tensor, which has no storage)."""
    if type(item) is not torch.Tensor or item.layout != torch.strided:
        return None
    geometry = (item.dtype, item.storage_offset(), tuple(item.shape), tuple(item.stride()), item.device)
    placed = poisoned.buffer_of(item) if poisoned is not None else None
    if placed is not None:
        buffer, margin = placed
        return ("margined", _storage(buffer, via_host_memory, pool), margin, *geometry)
    return ("storage", _storage(item, via_host_memory, pool), *geometry)


def _private(kwargs: dict, moved: dict) -> tuple[dict, list]:
    """The tensor arguments copied out of the memory shared with the judge into this process's own (on
    their devices, for those that came through host memory; views of one storage stay views of one copy);
    and (shared bytes, private bytes) pairs to copy back after the call."""
    private, back, placed = {}, [], dict(kwargs)
    for name, value in kwargs.items():
        if type(value) is not torch.Tensor:
            continue
        device = torch.device(moved.get(name, value.device))
        key = (value.device, value.untyped_storage().data_ptr())
        if key not in private:
            shared = _bytes_of(value)
            private[key] = shared.to(device, copy=True)
            back.append((shared, private[key]))
        placed[name] = torch.empty(0, dtype=value.dtype, device=device).set_(
            private[key].untyped_storage(), value.storage_offset(), value.shape, value.stride())
    return placed, back


def storage_key(value) -> tuple[str, int] | None:
    """Which storage a tensor lies in, here (None for an empty one or a non-strided tensor)."""
    if type(value) is not torch.Tensor or value.layout != torch.strided or not value.untyped_storage().nbytes():
        return None
    return str(value.device), value.untyped_storage().data_ptr()


def outputs(returned, poisoned=None, copies=None, via_host_memory: bool = False,
            pool: OutputBuffers | None = None, arguments=None) -> dict:
    """The facts of what the call returned.  ``arguments`` (the call's, by name): each output's storage and
    each argument's go with them, so that the judge sees outputs aliasing an input or each other."""
    structure, items = _items(returned)
    facts = {"structure": structure, "types": [type_name(item) for item in items],
             "layouts": [str(item.layout) if type(item) is torch.Tensor else "" for item in items],
             "tensors": [_sent(item, poisoned, via_host_memory, pool) for item in items],
             "copies": [_sent(copy, None, via_host_memory, pool) for copy in copies] if copies is not None else None,
             "overwritten": poisoned.overwritten_margins() if poisoned is not None else []}
    if arguments is not None:
        facts["storages"] = [storage_key(item) for item in items]
        facts["argument_storages"] = {str(name): storage_key(value) for name, value in arguments.items()
                                      if storage_key(value) is not None}
    return facts


class Host:
    def __init__(self, channel: Connection, warmup: int = 0, warmup_limit_s: float = 0.0):
        self.channel = channel
        self.functions = {}
        self.warmup, self.warmup_limit_s = warmup, warmup_limit_s
        self._no_cell_buffers()

    def _no_cell_buffers(self) -> None:
        """What a cell's calls keep, none of it yet: as the host starts, and as each cell ends."""
        self.graph = None   # (graph, static inputs, what the captured call returned): kept alive for replays
        self.staged: dict[int, torch.Tensor] = {}   # the judge's staging buffers, by number: kept open
        self.output_buffers = OutputBuffers()
        self.held: list = []   # the last message's private copies of its inputs (``calls``)

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

    def _arguments(self, plain: dict, views: dict) -> dict:
        """The call's arguments: ``plain`` ones as sent, tensors as views of the judge's staging buffers."""
        arguments = dict(plain)
        for name, (number, dtype, offset, shape, stride, device) in views.items():
            storage = self.staged[number].untyped_storage() if number is not None else \
                torch.UntypedStorage(0, device=device)
            arguments[name] = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, shape, stride)
        return arguments

    def _run(self, name: str, plain: dict, views: dict, positional: int, poison: int | None,
             moved: dict | None) -> tuple:
        """One call: (what it returned, its poisoned allocations, copies of its outputs taken as it returned,
        pairs to copy back into host memory, whether tensors crossed through host memory)."""
        arguments = self._arguments(plain, views)
        if self.warmup:
            self._warm_up(name, arguments, positional, moved or {})
        kwargs, back = _private(arguments, moved or {})
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
        copies = [item.clone() if type(item) is torch.Tensor and item.layout == torch.strided else None
                  for item in _items(returned)[1]]
        return returned, poisoned, copies, back, moved is not None, passed

    def _warm_up(self, name: str, arguments: dict, positional: int, moved: dict) -> None:
        """Once, before the first judged call: the drawn number of calls on private copies of its inputs,
        outputs discarded, for at most ``warmup_limit_s`` (a slow kernel makes fewer)."""
        count, self.warmup = self.warmup, 0
        deadline = time.monotonic() + self.warmup_limit_s
        for _ in range(count):
            kwargs, _ = _private(arguments, moved)
            self.functions[name](*[kwargs.pop(index) for index in range(positional)], **kwargs)
            if time.monotonic() > deadline:
                break

    def calls(self, shares: dict, calls: list) -> tuple:
        """Run ``calls`` in order (up to the first that raises); one settle after the last, then the outputs
        of each, read after the settle, beside the copies taken as each returned."""
        self.output_buffers.release()
        self.staged.update(_opened(shares))
        ran, replies = [], []
        for call in calls:
            try:
                ran.append(self._replay_step() if call == ("replay",) else self._run(*call))
            except Exception as error:  # noqa: BLE001 - the judge decides what an exception means
                replies.append(("raised", exception_facts(error)))
                break
        if ran:
            self._settle()
        for returned, poisoned, copies, back, via_host_memory, _ in ran:
            for shared, on_device in back:
                shared.copy_(on_device)
        try:
            replies[:0] = [("returned", outputs(returned, poisoned, copies, via_host_memory, self.output_buffers,
                                                arguments=passed))
                           for returned, poisoned, copies, _, via_host_memory, passed in ran]
        except Exception as error:  # noqa: BLE001 - its work is done and settled: what fails now is ours
            return ("failed", exception_facts(error))
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()   # the copies into the output buffers are there before the judge reads
            allocations.give_back_cache()
        # this message's private inputs stay alive until the next message's exist: no call meets its inputs
        # at the address of the call just before it (a cache keyed on addresses answers stale or anew)
        self.held = [back for *_, back, _, _ in ran]
        return ("returned", self.output_buffers.shares(), replies)

    def capture(self, name: str, plain: dict, views: dict, shares: dict) -> tuple:
        self.staged.update(_opened(shares))
        static = self._arguments(plain, views)
        graph, returned = capture.capture_call(self.functions[name], static)
        self.graph = (graph, static, returned)
        torch.cuda.synchronize()
        return ("captured", outputs(returned))

    def _replay_step(self) -> tuple:
        """A replay among calls: what ``_run`` returns, for a step that returns nothing."""
        self.graph[0].replay()
        return None, None, [], [], False, {}

    def replay(self) -> tuple:
        self.graph[0].replay()
        torch.cuda.synchronize()
        return ("replayed",)

    def end_cell(self) -> tuple:
        """A cell ended: the most this process's caching allocator reserved since the last cell ended (or the
        start), the peak then reset: what the judge schedules cells by (nothing reserved where CUDA was never
        used).  What the process kept for the cell's calls is let go with its cache — the judge's staging
        buffers opened here, its own output buffers, the last message's inputs, a captured graph — so that a
        cell started on another slot of this GPU finds that memory free (the judge lets go of its side too)."""
        self._no_cell_buffers()
        if not torch.cuda.is_initialized():
            return ("cell_ended", 0)
        peak = torch.cuda.max_memory_reserved()
        torch.cuda.synchronize()
        # the output buffers the judge held open (it closed them before asking) wait in CUDA IPC's limbo until
        # collected; only then can the cache give them back
        torch.cuda.ipc_collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return ("cell_ended", peak)

    @staticmethod
    def _settle() -> None:
        """Work left on any stream ends, and a late writer has a moment to show (once per message)."""
        if torch.cuda.is_initialized():
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


def serve(channel: Connection, settings: dict) -> None:
    """The host's life, once the launcher has detached it (``tools/engine/impl_launch.py``)."""
    global allocations, capture
    faulthandler.enable()   # a crash prints its Python stack to the log the judge quotes
    torch.multiprocessing.set_sharing_strategy("file_system")
    allocations, capture = _load_beside(settings["repo"], "allocations"), _load_beside(settings["repo"], "capture")
    if os.environ.get("TRITON_INTERPRET") == "1":
        # the implementation's Triton kernels, ours or anyone's, computing bf16/fp8 as the GPU does (imports
        # only numpy, ml_dtypes and Triton, and Triton only when the implementation does)
        _load_beside(settings["repo"], "triton_interpreter").install_when_imported()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    Host(channel, settings["warmup"], settings["warmup_limit_s"]).serve()
