"""The judge's side of running an implementation apart from it: the host process and its functions.

An implementation under judgement (an ``--impl``, or the catalog's own kernels) runs in an
*implementation host* (``tools/engine/impl_host.py``): a process that holds nothing of the judge, started once
per implementation and reused for every call.  Here, each of its functions is a :class:`HostedFunction`,
a callable the oracles use as they would the function itself:

- the judge copies every tensor argument (whole storages, aliasing kept) into memory it shares with the
  host (shared memory on the CPU; CUDA IPC from a pool of the judge's own on the GPU, so no other tensor
  of the judge lies in a segment the host can map), and after the call copies each storage back into the
  judge's tensor: in-place writes land where the oracles look, and the host never maps memory the judge
  keeps;
- what comes back is unpickled by an allow-list (plain tensors and storages, dtypes, devices): an object
  of the implementation's own class cannot even be rebuilt here, and is reported by its type name;
- outputs are copied into the judge's memory as they arrive, and compared with the copy the host took
  as the call returned: a difference is a write after the return (a side stream, a thread);
- under the write guards the host poisons allocations with the pattern the judge chose and sends each
  output's whole margined buffer, whose canaries the judge checks;
- a host that exits (any status), crashes or outlives the call limit fails the call — and, sticky,
  every later one — naming what ran; the cell's runner retires it and the next cell gets a fresh host.

The in-process way (``oracles.battery.Implementation`` holding plain functions) remains for the oracles'
unit tests and the suites' fast judging of their many controls; certification always runs hosted.
"""
from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import functools
import importlib
import io
import os
import pathlib
import pickle
import pkgutil
import pwd
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import Callable

import numpy
import torch
import torch.multiprocessing

from oracles.aliasing import aliasing
from oracles.allocations import margins_intact, pooled_bytes
from oracles.bitwise import bit_pattern
from oracles.failures import OracleFailure
from oracles.judge_errors import JudgeError, judge_error, out_of_memory_line
from oracles.tensors import storage_bytes
from tools.cli import PROJECT_PACKAGES
from tools.engine.activity import Activity
from tools.engine.sessions import keep_niceness

REPO = pathlib.Path(__file__).resolve().parents[2]
HOST = REPO / "tools" / "engine" / "impl_host.py"
LAUNCHER = REPO / "tools" / "engine" / "impl_launch.py"
PLATFORM_ENV_PREFIXES = ("KPARITY_", "PYTEST", "_PYTEST", "HYPOTHESIS", "COV_CORE_", "PYTHONPYCACHEPREFIX")
START_LIMIT_S = 300     # importing torch (and, for the catalog, Triton) in a fresh interpreter
END_CELL_LIMIT_S = 10   # dropping buffers, reading two allocator counters: a host slower says nothing of its memory
POLL_S = 0.5
NO_ORACLE = "implementation host"   # what a finding names before any oracle has begun
# Warm-up calls before the first judged one: log-uniform over 0..2**16 - 1, so that no call count is safe
# for "right for the first N calls", within a time limit per device (an interpreted kernel makes few; the
# CPU's hosts are many in CI, whose budget is minutes).
WARMUP_MAX_LOG2 = 16
WARMUP_LIMIT_S = {"cpu": 0.25, "cuda": 2.0}
# What the judge imports before its first host starts (besides what it imported already): the modules it
# loads later, which a host must not get to plant code for.
JUDGE_PACKAGES = ("oracles", "references.strategies")
JUDGE_MODULES = ("ops.quarantine", "ops.strict_yaml", "oracles.battery")
# How a host is kept from writing the judge's code, in the order tried (``tools/engine/impl_launch.py``), per
# device: a private mount namespace, else (the judge being root) a separate unprivileged uid on the CPU —
# not on a GPU, where inputs cross by CUDA IPC, whose reference counts live in torch's shared memory, which
# another uid cannot open; with none an --impl is refused.
PROTECTIONS = {"cpu": ("namespace", "uid"), "cuda": ("namespace",)}
SEPARATE_UID = "a separate uid"   # how the launcher names the second
HOST_USER = "nobody"   # the uid a host runs as where it takes a separate one: it owns none of the judge's files
_WALKED: set = set()   # (uid, read-only paths) a separate-uid host of this process found it could not write


def draw_warmup() -> int:
    return int(2 ** secrets.SystemRandom().uniform(0, WARMUP_MAX_LOG2)) - 1


def import_judge() -> None:
    """Import every module the judge will use, before a host can write anything (the packages it reads
    code from are read-only to a host; this is for a machine where they cannot be made so)."""
    for name in JUDGE_MODULES:
        importlib.import_module(name)
    for package in JUDGE_PACKAGES:
        for module in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
            importlib.import_module(module.name)


def read_only_paths() -> list[str]:
    """What the judge reads code from, which a host sees read-only: the project tree, every folder of this
    interpreter's path (the packages, the standard library, an editable install's source), its prefixes,
    the bytecode cache of the tools (``sys.pycache_prefix``) and the launcher's folder."""
    # (the working directory, sys.path's "", is left writable: it may be a home folder the host's caches
    # are in, and the judge's code there is the tree's, which is bound on its own)
    found = [REPO, pathlib.Path(sys.prefix), pathlib.Path(sys.base_prefix), _launcher().parent,
             *(pathlib.Path(entry) for entry in sys.path if entry)]
    if sys.pycache_prefix:
        found.append(pathlib.Path(sys.pycache_prefix))
    folders = sorted({path.resolve() for path in found if path.resolve().is_dir()}, key=lambda p: len(p.parts))
    kept = []
    for folder in folders:   # one bind mount covers what lies under it
        if not any(folder.is_relative_to(outer) for outer in kept):
            kept.append(folder)
    return [str(folder) for folder in kept]


def own_caches() -> list[str]:
    """Folders each host gets as its own (``tools/engine/impl_launch.py``): Triton's kernel cache, as the host's
    environment names it.  Shared, a host could plant a kernel binary under the key of a kernel a later host
    compiles — a catalog kernel then judged, and certified, on code not its own.  Made here if missing, so
    that the host's overlay has the judge's folder beneath it."""
    from triton import knobs

    folder = os.path.realpath(knobs.cache.dir)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:   # a folder the judge cannot make, its hosts cannot make either: nothing to share
        return []
    return [folder]


def host_ids() -> tuple[int, int] | None:
    """(uid, gid) of :data:`HOST_USER`, or None where this machine has no such user."""
    try:
        user = pwd.getpwnam(HOST_USER)
    except KeyError:
        return None
    return user.pw_uid, user.pw_gid


@functools.lru_cache(maxsize=None)
def _files_for(uid: int, gid: int) -> pathlib.Path:
    """A folder of this process's (in shared memory where there is some) for the staging buffers of the hosts
    running as ``uid``, which cannot open torch's shared memory (its manager's socket is the judge's alone)."""
    folder = pathlib.Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    os.chown(folder, uid, gid)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _file_buffer(nbytes: int, ids: tuple[int, int]) -> tuple[torch.Tensor, tuple]:
    """A staging buffer of ``nbytes`` in a file ``ids`` (uid, gid) owns, and how a host maps it."""
    uid, gid = ids
    path = _files_for(uid, gid) / secrets.token_hex(8)
    descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(descriptor, nbytes)
        os.fchown(descriptor, uid, gid)
    finally:
        os.close(descriptor)
    return torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8), ("file", str(path), nbytes)


@functools.lru_cache(maxsize=None)
def _launcher() -> pathlib.Path:
    """The launcher, copied into a private folder of this process: the host's command line names no file of
    the project."""
    folder = pathlib.Path(tempfile.mkdtemp())
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    script = folder / "main.py"
    script.write_bytes(LAUNCHER.read_bytes())
    return script


class _HostProcess:
    """The host as the judge sees it, though it is not the judge's child: the process group to end, and
    how it ended, as its guardian tells (a ``subprocess.Popen``'s ``pid``, ``poll``, ``wait``, ``returncode``)."""

    def __init__(self, group: int, guardian: socket.socket):
        self.pid, self.guardian, self.returncode = group, guardian, None

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None and self._ended(0) else self.returncode

    def _ended(self, timeout: float | None) -> bool:
        return bool(select.select([self.guardian], [], [], timeout)[0])

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._ended(timeout):
                raise subprocess.TimeoutExpired("implementation host", timeout)
            told = self.guardian.recv(64)
            # nothing told: the guardian was killed with its group
            self.returncode = os.waitstatus_to_exitcode(int(told)) if told else -signal.SIGKILL
            self.guardian.close()
        return self.returncode


def neutral_environment() -> dict:
    """This process's environment without the platform's and the test harness's variables.

    ``TRITON_INTERPRET`` stays: on a machine without CUDA the Triton interpreter is how kernels run."""
    return {name: value for name, value in os.environ.items() if not name.upper().startswith(PLATFORM_ENV_PREFIXES)}


class HostFault(Exception):
    """The host ended, or did not answer in time: the implementation's finding, never the judge's."""

    def __init__(self, kind: str, message: str, exit_status: int | None, log_tail: list[str]):
        super().__init__(message)
        self.kind, self.exit_status, self.log_tail = kind, exit_status, log_tail


class _Unpickler(pickle.Unpickler):
    """Rebuilds plain tensors, storages, dtypes and devices, and nothing else: no class of the
    implementation's, no function of anyone's."""

    REBUILDERS = {"rebuild_tensor", "rebuild_typed_storage", "rebuild_storage_filename", "rebuild_storage_empty",
                  "rebuild_cuda_tensor", "rebuild_typed_storage_child"}

    def find_class(self, module: str, name: str):
        if module == "torch.multiprocessing.reductions" and name in self.REBUILDERS:
            return getattr(torch.multiprocessing.reductions, name)
        if module in ("torch", "torch.storage") and name in ("Tensor", "UntypedStorage", "TypedStorage", "device",
                                                             "Size"):
            return getattr(torch, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module == "builtins" and name == "slice":
            return slice
        raise pickle.UnpicklingError(f"the host sent an object of {module}.{name}, which the judge does not rebuild")


def _exception(facts: dict) -> Exception:
    """The host's exception as one of the judge's classes: the first of its bases that the judge already
    has loaded (a builtin, or the contract's own error), with the host's message.  Never one of this project's
    classes: the implementation names its classes as it likes, and one named the judge's own error would end
    the run as the judge's failure, concluding nothing about it.  Both by module and by class: a verdict class
    is found under other modules' names too (a tool's ``__main__`` imports JudgeError)."""
    for qualified in facts["mro"]:
        module, _, name = qualified.rpartition(".")
        if module.partition(".")[0] in PROJECT_PACKAGES:
            continue
        found = getattr(builtins, name, None) if module == "builtins" else getattr(sys.modules.get(module), name, None)
        if isinstance(found, type) and issubclass(found, Exception) \
                and not issubclass(found, (JudgeError, OracleFailure, HostFault)):
            try:
                return found(facts["message"])
            except TypeError:
                continue
    return RuntimeError(f"{facts['type']}: {facts['message']}")


# -- what the host may answer -------------------------------------------------------------------------
# Everything a host sends comes from the implementation's process, where the implementation can reach the
# channel and send what it likes: an answer is read only once its shape is the protocol's (below), and one
# that is not is the implementation's finding, never the judge's failure (which would conclude nothing).
def _is_int(value) -> bool:
    return type(value) is int


def _is_key(value) -> bool:   # a storage as the host names it: (device, address)
    return type(value) is tuple and len(value) == 2 and type(value[0]) is str and _is_int(value[1])


def _is_strings(value) -> bool:
    return type(value) is list and all(type(item) is str for item in value)


def exception_facts_problem(facts) -> str | None:
    """None when ``facts`` are an exception's as the host sends them (``type``, ``mro``, ``message``)."""
    if type(facts) is not dict or type(facts.get("type")) is not str or type(facts.get("message")) is not str \
            or not _is_strings(facts.get("mro")):
        return "exception facts that are not its type, classes and message as strings"
    return None


def sent_output_problem(item, buffers: dict) -> str | None:
    """None when ``item`` is one output as the host sends it (``impl_host._sent``) and lies inside the bytes
    it came with (``buffers``: the host's shared buffers by number); else what is wrong with it."""
    if type(item) is not tuple or (item[:1], len(item)) not in ((("storage",), 7), (("margined",), 8)):
        return "an output that is not (storage or margined, data, [margin,] dtype, offset, shape, stride, device)"
    kind, data, *margin, dtype, offset, shape, stride, device = item
    if type(data) is bytes:
        length = len(data)
    elif type(data) is torch.Tensor and data.dtype == torch.uint8 and data.dim() == 1:
        length = data.numel()
    elif type(data) is tuple and len(data) == 2 and _is_int(data[0]) and _is_int(data[1]) and data[1] >= 0:
        if data[0] not in buffers:
            return f"an output in buffer {data[0]}, which it never shared with the judge in this cell"
        length = min(data[1], buffers[data[0]].numel())
    else:
        return "an output whose bytes are neither bytes, a byte tensor nor (buffer, length)"
    if margin and not (_is_int(margin[0]) and margin[0] >= 0):
        return "a margined output whose margin is not a count of bytes"
    if type(dtype) is not torch.dtype or type(device) is not torch.device or not _is_int(offset) or offset < 0 \
            or type(shape) is not tuple or type(stride) is not tuple or len(shape) != len(stride) \
            or not all(_is_int(value) and value >= 0 for value in (*shape, *stride)):
        return "an output whose dtype, offset, shape, strides or device are not a tensor's"
    extent = 0 if 0 in shape else offset + 1 + sum((size - 1) * step for size, step in zip(shape, stride))
    if extent * dtype.itemsize > length:
        return (f"an output of shape {shape}, strides {stride} at offset {offset} ({dtype}) outside the {length} "
                f"bytes it came in")
    return None


def outputs_problem(sent, buffers: dict) -> str | None:
    """None when ``sent`` are the facts of what a call returned as the host sends them
    (``impl_host.outputs``); else what is wrong with them."""
    if type(sent) is not dict or type(sent.get("structure")) is not str or not _is_strings(sent.get("types")) \
            or not _is_strings(sent.get("layouts")) or type(sent.get("tensors")) is not list \
            or not _is_strings(sent.get("overwritten")) \
            or not len(sent["types"]) == len(sent["layouts"]) == len(sent["tensors"]):
        return "facts of the outputs that are not the protocol's"
    copies = sent.get("copies")
    if copies is not None and (type(copies) is not list or len(copies) != len(sent["tensors"])):
        return "copies of the outputs that are not one for each output"
    if "storages" in sent and not (type(sent["storages"]) is list and len(sent["storages"]) == len(sent["tensors"])
                                   and all(key is None or _is_key(key) for key in sent["storages"])):
        return "storages of the outputs that are not one for each output"
    arguments = sent.get("argument_storages", {})
    if ("storages" in sent) != ("argument_storages" in sent) or type(arguments) is not dict \
            or not all(type(name) is str and _is_key(key) for name, key in arguments.items()):
        return "storages of the arguments that are not the protocol's"
    for item in [*sent["tensors"], *(copies or [])]:
        problem = None if item is None else sent_output_problem(item, buffers)
        if problem:
            return problem
    return None


def answer_problem(reply) -> str | None:
    """None when ``reply`` has the shape every answer has (a tuple led by its kind; an exception's facts
    where it raised or failed); the rest of it is checked where it is read."""
    if type(reply) is not tuple or not reply or type(reply[0]) is not str:
        return f"an answer that is not a tuple led by its kind: {type(reply).__name__}"
    if reply[0] in ("raised", "failed"):
        return exception_facts_problem(reply[1]) if len(reply) == 2 else "an exception answered in other than two parts"
    return None


def _raised_class(reply) -> str | None:
    """The name of the class the implementation's last call raised, where the host's answer says it raised
    (alone, or the last of several calls), else None: for the worker's activity record, which keeps how the
    call ended.  The answer is checked later; this reads it without trusting its shape."""
    if isinstance(reply, tuple) and len(reply) == 3 and reply[0] == "returned" and isinstance(reply[2], list) \
            and reply[2]:
        reply = reply[2][-1]
    if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "raised" and isinstance(reply[1], dict):
        return str(reply[1].get("type", "")).rpartition(".")[2]
    return None


def _copy_bytes(destination: torch.Tensor, source: torch.Tensor) -> None:
    """``destination.copy_(source)`` for uint8 storages; between CPU ones by one plain memcpy (torch's
    copy splits a few hundred kilobytes over its threads, which costs milliseconds on a busy machine)."""
    if destination.is_cuda or source.is_cuda:
        destination.copy_(source)
    else:
        numpy.copyto(destination.numpy(), source.numpy())


def _rebuilt(item: tuple, copy: bool = True, buffers: dict | None = None) -> tuple[torch.Tensor, tuple | None]:
    """An output as the host sent it, in the judge's own memory (``copy``; else a live view of what the
    host shares); and (buffer, margin) when it came in its margined buffer.  ``buffers``: the host's output
    buffers by number, for an output sent as (buffer number, length)."""
    kind, data, *margin, dtype, offset, shape, stride, device = item
    if isinstance(data, bytes):
        data = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    elif isinstance(data, tuple):
        number, length = data
        data = buffers[number][:length]
    own = data.to(device, copy=copy)
    output = torch.empty(0, dtype=dtype, device=device).set_(own.untyped_storage(), offset, shape, stride)
    return output, ((own, margin[0]) if kind == "margined" else None)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one shape and dtype hold the same bits, element by element, whatever their
    strides and offsets (a column view ``pair[:, 0]`` cannot be viewed as bytes)."""
    return torch.equal(bit_pattern(a), bit_pattern(b))


class ImplementationHost:
    """One host process, serving one implementation's functions to the oracles of this process."""

    def __init__(self, device: str, call_limit_s: float | None = None, via_host_memory: bool = False,
                 warmup: int | None = None):
        """``via_host_memory``: device tensors cross through shared host memory instead of CUDA IPC (under
        compute-sanitizer, whose stream-ordered allocations CUDA IPC does not serve); no graph capture.
        It concerns this side only: a host started early may be given either way before its first call.
        ``warmup``: calls before the first judged one (None: drawn at random).  ``unprotected``: None when
        the host sees the judge's code read-only, else why not.  ``separate_uid``: the (uid, gid) the host
        runs as where it has a uid of its own instead of a mount namespace (the CPU's only), else None: its
        staging buffers are then files that uid owns."""
        torch.multiprocessing.set_sharing_strategy("file_system")
        self.device = device
        self.via_host_memory = via_host_memory
        self._no_cell_buffers()
        self.call_limit_s = call_limit_s
        self.activity = Activity()   # a worker's record of what it is doing (tools/engine/activity.py)
        self.oracle, self.recipe = NO_ORACLE, None   # told by the battery: what a finding names
        self.fault: HostFault | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="kparity-host-", suffix=".log", delete=False)
        self.separate_uid: tuple[int, int] | None = None
        self._files: list[str] = []   # the files of this host's staging buffers, where it has a uid of its own
        self.scratch = tempfile.mkdtemp(prefix="kparity-cache-")   # where the host's own caches write
        self.process, self.channel, self.unprotected = self._start(warmup)
        _LIVE.add(self)
        _end_hosts_on_sigterm()

    def _start(self, warmup: int | None) -> tuple[_HostProcess, Connection, str | None]:
        """Start the host: the launcher, in a session of its own, makes the judge's code read-only, leaves
        a guardian and the host (its child), and ends; the host says whether the code is read-only."""
        if not _JUDGE_IMPORTED:
            import_judge()
            _JUDGE_IMPORTED.append(True)
        ours, theirs = socket.socketpair()
        guardian, guarding = socket.socketpair()
        launcher = subprocess.Popen([sys.executable, "-u", str(_launcher())], stdin=theirs, stdout=self.log,
                                    stderr=self.log, env=neutral_environment(), start_new_session=True,
                                    pass_fds=(guarding.fileno(),))
        keep_niceness(launcher.pid)
        theirs.close()
        channel = Connection(ours.detach())
        paths, ids = read_only_paths(), host_ids()
        channel.send((HOST.read_text(), {
            "repo": str(REPO), "read_only": paths, "own_caches": own_caches(), "cache_scratch": self.scratch,
            "guardian_fd": guarding.fileno(),
            "means": PROTECTIONS[self.device], "host_ids": ids, "walked": (ids, tuple(paths)) in _WALKED,
            "warmup": draw_warmup() if warmup is None else warmup, "warmup_limit_s": WARMUP_LIMIT_S[self.device]}))
        guarding.close()
        self.process, self.channel = _HostProcess(launcher.pid, guardian), channel
        try:
            started = self._receive(START_LIMIT_S)
        except HostFault as fault:   # the first call reports it, as a host that dies later
            self.fault, started = fault, ("started", {"unprotected": f"the host did not start: {fault}"})
        launcher.wait()
        if started[1].get("protection") == SEPARATE_UID:
            self.separate_uid = ids
            _WALKED.add((ids, tuple(paths)))
        return self.process, channel, started[1]["unprotected"]

    def _no_cell_buffers(self) -> None:
        """No buffer shared with the host, and none of its held open: as a host starts, and as each cell ends."""
        self._pool = None
        self._buffers: dict[int, torch.Tensor] = {}    # staging buffers by number (the host keeps each open)
        self._free: dict[tuple, list[int]] = {}        # (device, size class) -> numbers, least recently used first
        self._unsent: dict[int, torch.Tensor] = {}     # buffers the host has not been sent yet
        self._captured: list[int] = []                 # the static buffers of the last graph capture
        self._host_buffers: dict[int, torch.Tensor] = {}   # the host's output buffers, by number

    @property
    def pool(self):
        """The judge's own CUDA memory pool for what it shares with the host (made on first use)."""
        if self._pool is None and self.device == "cuda":
            self._pool = torch.cuda.MemPool()
        return self._pool

    def _stage(self, kwargs: dict) -> tuple[dict, dict, list, dict]:
        """``kwargs`` as they cross: the plain values, and each tensor as a view of a staging buffer holding a
        copy of its whole storage (views of one storage stay views of one copy); (judge's storage bytes,
        buffer number) pairs to copy back after the call; and the device tensors that crossed through host
        memory, by name, with their devices."""
        copies, pairs, plain, views, moved = {}, [], {}, {}, {}
        for name, value in kwargs.items():
            if not isinstance(value, torch.Tensor):
                plain[name] = value
                continue
            on_device = value.is_cuda and not self.via_host_memory
            key = (value.device, value.untyped_storage().data_ptr(), value.untyped_storage().nbytes())
            if key not in copies:
                original = storage_bytes(value)
                number = self._take(value.device if on_device else torch.device("cpu"), original.numel())
                if number is not None:
                    _copy_bytes(self._buffers[number][:original.numel()], original)
                copies[key] = number
                pairs.append((original, number))
            if value.is_cuda and not on_device:
                moved[name] = str(value.device)
            views[name] = (copies[key], value.dtype, value.storage_offset(), tuple(value.shape), tuple(value.stride()),
                           value.device if on_device else torch.device("cpu"))
        return plain, views, pairs, moved

    def _take(self, device: torch.device, nbytes: int) -> int | None:
        """A staging buffer of at least ``nbytes`` (None for none at all): the least recently used free one of
        its size class, else a new one (made once: a shared-memory object or an IPC handle costs far more than
        the call it carries).  Each use of a class takes another buffer than the use before it (a class keeps
        two free at least): the determinism oracle's second call never sees its inputs at the first one's
        address (an implementation caching results by input address would pass on its cache), while later
        calls of a size come back to earlier addresses with other contents (where such a cache answers stale:
        what a serving engine's reused buffers do to it)."""
        if nbytes == 0:
            return None
        key = (device, pooled_bytes(nbytes))
        free = self._free.setdefault(key, [])
        if len(free) >= 2:
            return free.pop(0)
        number = len(self._buffers)
        if device.type == "cuda":
            with torch.cuda.use_mem_pool(self.pool):
                self._buffers[number] = self._unsent[number] = torch.empty(key[1], dtype=torch.uint8, device=device)
        elif self.separate_uid is not None:
            self._buffers[number], self._unsent[number] = _file_buffer(key[1], self.separate_uid)
            self._files.append(self._unsent[number][1])
        else:
            self._buffers[number] = self._unsent[number] = torch.empty(0, dtype=torch.uint8).set_(
                torch.UntypedStorage(key[1]).share_memory_())
        return number

    def _give_back(self, number: int | None) -> None:
        if number is not None:
            buffer = self._buffers[number]
            self._free[(buffer.device, buffer.numel())].append(number)

    def _shares(self) -> dict[int, torch.Tensor | tuple]:
        shares, self._unsent = self._unsent, {}
        return shares

    def _unstage(self, pairs: list) -> None:
        """Copy the staged copies back into the judge's storages; the buffers serve later calls."""
        for original, number in pairs:
            if number is not None:
                _copy_bytes(original, self._buffers[number][:original.numel()])
                self._give_back(number)

    def view(self, staged: tuple) -> torch.Tensor:
        """The judge's own view of a staged tensor (what the host sees)."""
        number, dtype, offset, shape, stride, device = staged
        storage = self._buffers[number].untyped_storage() if number is not None else \
            torch.UntypedStorage(0, device=device)
        return torch.empty(0, dtype=dtype, device=device).set_(storage, offset, shape, stride)

    # -- the battery's side -------------------------------------------------------------------------
    def watch(self, oracle: str, recipe: dict) -> None:
        self.oracle, self.recipe = oracle, recipe

    def load(self, paths: list[str], functions: dict[str, tuple[str, str]]) -> list[str]:
        """Import ``{name: (module, attribute)}`` there (``paths`` first on its ``sys.path``); returns the
        names that are not callable there.  An import that fails raises its exception (as one of the
        judge's classes); a host that dies meanwhile raises an OracleFailure."""
        loaded = self._ask(("load", {"paths": paths, "functions": functions}), "loaded", START_LIMIT_S)
        if type(loaded) is not dict or not _is_strings(loaded.get("missing")):
            raise self._not_accepted("an answer to load that does not list the missing names")
        return loaded["missing"]

    def function(self, name: str) -> "HostedFunction":
        return HostedFunction(self, name)

    def end_cell(self) -> int | None:
        """After a cell's verdict: the most the host's caching allocator reserved since the last cell ended (or
        its start), as the host says, and every buffer of the cell let go on both sides (the host's end_cell;
        here the staging buffers, their pool, and the host's buffers held open), so that the next cell on
        another slot of this GPU finds the memory free; the next call makes its buffers afresh.  The
        implementation's process may say anything, so the figure only orders cells (``isolation.py``), and
        any answer but a non-negative int, or none, is None (unknown).  A host that fails to answer is
        retired like any faulted host, and fails nothing; one that answers but keeps its buffers only costs
        memory: an output it sends in a buffer the judge no longer holds open fails its call."""
        if self.fault is not None:
            return None
        # the host's buffers closed here first: CUDA IPC keeps a buffer the host frees while this process holds
        # it open (its "limbo"), and the host's cache could not give it back
        self._host_buffers = {}
        try:
            peak = self._ask(("end_cell",), "cell_ended", END_CELL_LIMIT_S)
        except Exception as error:  # noqa: BLE001 - whatever the host did instead of answering, its figure is unknown
            peak = None
            if self.fault is None:   # retired before the next cell, as a host that ended is (its verdict stands)
                self.fault = HostFault("protocol", f"the implementation's process did not end its cell: {error}",
                                       None, [])
        finally:
            self._no_cell_buffers()
            if self.device == "cuda":
                torch.cuda.ipc_collect()   # staging buffers the host held open as this side let go of them
        return peak if _is_int(peak) and peak >= 0 else None

    def close(self) -> None:
        """End the host and everything it started (its process group)."""
        _LIVE.discard(self)
        self.channel.close()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        self.log.close()
        os.unlink(self.log.name)
        shutil.rmtree(self.scratch, ignore_errors=True)   # its mount namespace ended with it
        for path in self._files:   # (at exit their folder may be gone already)
            pathlib.Path(path).unlink(missing_ok=True)

    # -- the channel ---------------------------------------------------------------------------------
    def _ask(self, message: tuple, expected: str, limit_s: float | None = None):
        if self.fault is not None:
            raise self._failure(self.fault)
        if self.device == "cuda":
            torch.cuda.synchronize()   # what the judge wrote into shared buffers is there before the host reads
        try:
            with self.activity.implementation_call(host_failure=HostFault):
                self._send(message)
                reply = self._receive(limit_s or self.call_limit_s)
                self.activity.implementation_raised(_raised_class(reply))
        except HostFault as fault:
            self.fault = fault
            raise self._failure(fault) from None
        problem = answer_problem(reply)
        if problem:
            raise self._not_accepted(problem)
        if reply[0] == "raised":
            raise _exception(reply[1])
        if reply[0] == "failed":
            # the host's own code raised after the implementation returned; it ran in the implementation's
            # process, beside objects and patches of the implementation's, and the answer saying so may be the
            # implementation's own: no more the judge's than a host that crashed (HostFault), but for memory
            message = f"{reply[1]['type']}: {reply[1]['message']}"
            if out_of_memory_line([message]):
                raise JudgeError(f"the implementation host ran out of memory reading what the call returned: "
                                 f"{message}", self.oracle, self.recipe)
            raise OracleFailure(self.oracle, f"reading what the call returned in the implementation's process "
                                             f"raised {message}")
        if reply[0] != expected:
            raise OracleFailure(self.oracle, f"the implementation's process answered {reply[0]!r} to "
                                             f"{message[0]!r}")
        return reply[1] if len(reply) == 2 else (reply[1:] or None)

    def _send(self, message: tuple) -> None:
        try:
            self.channel.send(message)
        except OSError:
            pass   # the host has ended: receiving says how
        except Exception as error:  # noqa: BLE001 - the judge could not serialize its own message
            raise judge_error(f"sending {message[0]!r} to the implementation host", error, self.oracle) from error

    def _receive(self, limit_s: float | None):
        deadline = None if limit_s is None else time.monotonic() + limit_s
        while not self.channel.poll(POLL_S):
            if self.process.poll() is not None:
                break
            if deadline is not None and time.monotonic() > deadline:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
                raise self._fault("hang", f"no answer within {limit_s:g}s")
        try:
            data = self.channel.recv_bytes()
        except (EOFError, OSError):
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            kind = "crash" if self.process.returncode < 0 else "exit"
            raise self._fault(kind, "ended") from None
        try:
            return _Unpickler(io.BytesIO(data)).load()
        except Exception as error:  # noqa: BLE001 - whatever it sent that cannot be read is its finding
            raise self._not_accepted(str(error)) from None

    def _not_accepted(self, problem: str) -> OracleFailure:
        return OracleFailure(self.oracle, f"the implementation's process sent what the judge does not accept: "
                                          f"{problem}")

    def _fault(self, kind: str, what: str) -> HostFault:
        from tools.engine.process_end import exit_in_words, last_words

        status = self.process.poll()
        self.log.flush()
        words = f"{what} ({exit_in_words(status)})" if kind != "hang" else what
        return HostFault(kind, f"the implementation's process {words} while the {self.oracle} oracle ran"
                         + (f" on {self.recipe}" if self.recipe else ""), status, last_words(pathlib.Path(self.log.name)))

    def _failure(self, fault: HostFault) -> OracleFailure | JudgeError:
        """A host that ended or hung is the implementation's finding; one that ended with running out of
        memory as its last words (its CUDA context, or the call, beside other processes) is the machine's."""
        words = out_of_memory_line(fault.log_tail) if fault.kind != "hang" else None
        if words:
            return JudgeError(f"{fault}, out of memory: {words}", self.oracle, self.recipe)
        return OracleFailure(self.oracle, str(fault))

    # -- outputs ---------------------------------------------------------------------------------------
    def _outputs(self, sent: dict, poisoned: bool) -> tuple[tuple, list[str]]:
        """The outputs as the judge's own tensors, after checking the facts the host sent."""
        problem = outputs_problem(sent, self._host_buffers)
        if problem:
            raise self._not_accepted(problem)
        if sent["structure"] not in ("none", "tensor", "tuple") or any(t != "torch.Tensor" for t in sent["types"]):
            shown = sent["structure"] if sent["structure"] != "tuple" else f"a tuple of ({', '.join(sent['types'])})"
            if sent["structure"] == "tensor":
                shown = sent["types"][0]
            raise OracleFailure(self.oracle, f"returned {shown}: the contract's outputs are exactly torch.Tensor "
                                             f"(no subclass), several in a tuple")
        outputs, overwritten = [], list(sent["overwritten"])
        for index, item in enumerate(sent["tensors"]):
            if item is None:  # a torch.Tensor of another layout (sparse, mkldnn): no storage to send
                raise OracleFailure(self.oracle, f"returned output {index} of layout {sent['layouts'][index]}: the "
                                                 f"contract's outputs are strided tensors")
            for sent_as in (item, sent["copies"][index] if sent["copies"] else None):
                if sent_as is not None and sent_as[-1].type != self.device:
                    raise OracleFailure(self.oracle, f"returned output {index} on {sent_as[-1]}: the call ran on "
                                                     f"{self.device}")
            output, margined = _rebuilt(item, buffers=self._host_buffers)
            if margined is not None and not margins_intact(*margined):
                overwritten.append(f"output {index} (shape {tuple(output.shape)} {output.dtype})")
            copy = _rebuilt(sent["copies"][index], buffers=self._host_buffers)[0] \
                if sent["copies"] and sent["copies"][index] else None
            if copy is not None and not _same_bytes(output, copy):
                raise OracleFailure(self.oracle, f"output {index} changed after the call returned (work left "
                                                 f"running on another stream, or a delayed write)")
            outputs.append(output)
        if not poisoned and overwritten:
            raise OracleFailure(self.oracle, f"wrote outside the bounds of {'; '.join(overwritten)}")
        # the outputs are the judge's copies now: whether they shared memory in the host is its facts' to say
        problem = aliasing(outputs, sent["storages"], sent["argument_storages"]) if "storages" in sent else None
        if problem:
            raise OracleFailure(self.oracle, problem)
        return tuple(outputs), overwritten

    def call(self, name: str, kwargs: dict, poison: int | None = None, args: tuple = ()) -> tuple[tuple, list[str]]:
        (result,) = self.calls(name, [(kwargs, args)], poison)
        if isinstance(result, Exception):
            raise result
        return result

    def calls(self, name: str, calls: list[tuple[dict, tuple] | None], poison: int | None = None) -> list:
        """Several calls of ``name`` (each ``(kwargs, args)``, or None: replay the captured graph) in one
        message, run there in order: each one's (outputs, overwritten allocations), or the exception it
        raised (as one of the judge's classes; the calls after it did not run).  What the checks of outputs
        find about any of them raises; the judge's own failure (staging, copying back, reading the outputs)
        raises as a JudgeError."""
        staged, pairs = [], []
        try:
            with self._judge_side("staging the arguments"):
                for call in calls:
                    if call is None:
                        staged.append(("replay",))
                        continue
                    kwargs, args = call
                    plain, views, its_pairs, moved = self._stage({**dict(enumerate(args)), **kwargs})
                    pairs += its_pairs
                    staged.append((name, plain, views, len(args), poison, moved if self.via_host_memory else None))
            answer = self._ask(("calls", self._shares(), staged), "returned")
        finally:
            with self._judge_side("copying the arguments back"):
                self._unstage(pairs)
        if type(answer) is not tuple or len(answer) != 2 or type(answer[0]) is not dict or type(answer[1]) is not list \
                or not all(_is_int(number) and type(buffer) is torch.Tensor for number, buffer in answer[0].items()):
            raise self._not_accepted("an answer to calls that is not (its buffers, a reply a call)")
        shares, replies = answer
        kinds = [reply[0] if type(reply) is tuple and reply else reply for reply in replies]
        if not (kinds == ["returned"] * len(calls) or (
                kinds and kinds[:-1] == ["returned"] * (len(kinds) - 1) and kinds[-1] == "raised"
                and len(kinds) <= len(calls))):
            raise OracleFailure(self.oracle, f"the implementation's process answered {kinds} to {len(calls)} calls")
        for reply in replies:
            problem = answer_problem(reply) or (None if len(reply) == 2 else "a reply of other than two parts")
            if problem:
                raise self._not_accepted(problem)
        self._host_buffers.update(shares)
        with self._judge_side("reading the outputs"):
            return [self._outputs(reply[1], poison is not None) if reply[0] == "returned" else _exception(reply[1])
                    for reply in replies]

    @contextlib.contextmanager
    def _judge_side(self, what: str):
        """What raises inside is the judge's own code failing (a finding passes as it is)."""
        try:
            yield
        except (OracleFailure, JudgeError):
            raise
        except Exception as error:  # noqa: BLE001 - never the implementation's: it is not running here
            raise judge_error(what, error, self.oracle) from error


@dataclasses.dataclass
class HostedFunction:
    """One function of the implementation, run by its host; called as the function itself would be."""

    host: ImplementationHost
    name: str

    def __call__(self, *args, **kwargs):
        outputs, _ = self.host.call(self.name, kwargs, args=args)
        return outputs[0] if len(outputs) == 1 else (outputs or None)

    def call_many(self, calls: list[dict]) -> list:
        """``self(**kwargs)`` for each of ``calls``, in one message: each one's return value, or the exception
        it raised (the calls after it did not run)."""
        results = self.host.calls(self.name, [(kwargs, ()) for kwargs in calls])
        return [result if isinstance(result, Exception) else
                (result[0][0] if len(result[0]) == 1 else (result[0] or None)) for result in results]

    def call_poisoned(self, kwargs: dict, poison: int) -> tuple[tuple, list[str]]:
        """For the write guards: the outputs, and the allocations whose canaries it overwrote."""
        return self.host.call(self.name, kwargs, poison)

    def capture_graph(self, static: dict) -> tuple[tuple, Callable[[], None]]:
        """For graph parity: capture the call there on shared copies of ``static`` (which then holds them:
        what the oracle copies into it, the graph reads); the captured outputs, read live, and the replay."""
        if self.host.via_host_memory:
            raise ValueError("graph capture needs the judge's buffers shared by CUDA IPC, not through host memory")
        host = self.host
        for number in host._captured:   # the last capture's graph is never replayed again
            host._give_back(number)
        with host._judge_side("staging the arguments"):
            plain, views, pairs, _ = host._stage(static)
        host._captured = [number for _, number in pairs]
        static.update({name: host.view(staged) for name, staged in views.items()})
        try:
            sent = host._ask(("capture", self.name, plain, views, host._shares()), "captured")
        except (OracleFailure, JudgeError):
            raise
        except Exception as error:  # noqa: BLE001 - a call that cannot be captured is the finding
            raise OracleFailure("graph_parity", f"the call cannot be captured in a CUDA graph: "
                                                f"{type(error).__name__}: {error}") from None
        if type(sent) is not dict:
            raise host._not_accepted("facts of the captured outputs that are not the protocol's")
        host._outputs({**sent, "copies": None}, poisoned=False)   # the type facts
        outputs = tuple(_rebuilt(item, copy=False, buffers=host._host_buffers)[0] for item in sent["tensors"])
        return outputs, _Replay(self)


@dataclasses.dataclass
class _Replay:
    """The replay of the graph a host captured; ``between`` sends calls around it in the same message."""

    function: HostedFunction

    def __call__(self) -> None:
        self.function.host._ask(("replay",), "replayed")

    def between(self, before: list[dict], after: list[dict]) -> list[tuple]:
        """Call on each of ``before``, replay, call on each of ``after``: the outputs of the calls after."""
        results = self.function.host.calls(self.function.name, [*((kwargs, ()) for kwargs in before), None,
                                                                *((kwargs, ()) for kwargs in after)])
        for result in results:
            if isinstance(result, Exception):
                raise result
        return [outputs for outputs, _ in results[len(before) + 1:]]


_LIVE: set[ImplementationHost] = set()
_JUDGE_IMPORTED: list[bool] = []


def _end_hosts_on_sigterm() -> None:
    """A SIGTERM ends the hosts' process groups before this process ends (its default end runs no atexit
    hook); a handler someone installed already is left alone (it ends the process by ``sys.exit``, which
    runs :func:`_close_all`)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def end(signum, frame):
        _close_all()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, end)


@atexit.register
def _close_all() -> None:
    """No host outlives its judge (a killed judge's hosts get SIGKILL from the kernel: PR_SET_PDEATHSIG)."""
    for host in list(_LIVE):
        host.close()
