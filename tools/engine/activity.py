"""What a certification worker is doing, kept where its parent can read it after killing it.

A cell past ``--cell-timeout`` is killed, and whose delay it was decides what that means: a kernel that
never ends is the implementation's finding; the judge's own float64 truth outlasting the limit on a large
example is the judge's internal error, concluding nothing about the implementation.  So a worker keeps,
in a few bytes it shares with its parent, whether it is waiting on the implementation's call or running
the judge's own code (and which part of it), since when, how many examples it finished, and how the
implementation's last call ended (it returned, it raised, or its host failed), so that a timeout after it
names that end and infers none.  Writing
them is a few stores per call, never a message.  The memory is a ``memfd`` the parent made and passed to
the worker alone, no file in a folder: the implementation's host, started with none of the worker's
descriptors, has no name to open it by.  (Were it to write "the judge" there during its own hang, it would
only trade its finding for an internal error: neither certifies.)
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import mmap
import os
import struct
import time
from typing import Callable

# state, examples finished, since (CLOCK_MONOTONIC: one clock for every process), the implementation's
# seconds in this cell, what the judge runs (UTF-8), how the last call ended, the class that ended it (UTF-8)
_RAISED_SIZE = 47
_LAYOUT = struct.Struct(f"<BIdd96sB{_RAISED_SIZE}s")
NOTHING, JUDGE, IMPLEMENTATION = 0, 1, 2
NO_CALL, RETURNED, RAISED, HOST_FAILED = 0, 1, 2, 3   # how the cell's last implementation call ended
NAME = "kparity-worker-activity"
SETUP = "setup of the cell (starting a host, loading the implementation)"


@dataclasses.dataclass(frozen=True)
class Doing:
    """What a worker was doing when its parent read the record, and how the implementation's last call in
    the cell ended: ``RETURNED`` only where it answered and the implementation did not raise."""

    state: int                # NOTHING (never written), JUDGE or IMPLEMENTATION
    examples: int             # examples the cell finished
    since: float              # time.monotonic() when the state began
    implementation_s: float   # the implementation's calls' time in this cell, up to the last one that ended
    what: str                 # the judge's part running (or, in a call, that called)
    ended: int                # how the cell's last call ended: NO_CALL (none has), RETURNED, RAISED or HOST_FAILED
    raised: str               # the class that ended it (RAISED, HOST_FAILED), "" if its name did not fit

    def for_s(self) -> float:
        return time.monotonic() - self.since

    def last_call_ended(self) -> str:
        """How the cell's last call ended, in words: ``it returned``, ``it raised ValueError``, ``its host
        failed``."""
        return {NO_CALL: "the record says no call ended", RETURNED: "it returned", HOST_FAILED: "its host failed",
                RAISED: f"it raised {self.raised or 'an exception'}"}[self.ended]


def shared_record() -> tuple[int, mmap.mmap]:
    """The parent's side: a descriptor to pass to one worker, and the memory to read (:func:`read`)."""
    descriptor = os.memfd_create(NAME)
    os.ftruncate(descriptor, _LAYOUT.size)
    return descriptor, mmap.mmap(descriptor, _LAYOUT.size)


def read(record: mmap.mmap) -> Doing:
    state, examples, since, implementation_s, what, ended, raised = _LAYOUT.unpack_from(record)
    return Doing(state, examples, since, implementation_s, what.rstrip(b"\0").decode(errors="replace"), ended,
                 raised.rstrip(b"\0").decode(errors="replace"))


class Activity:
    """The worker's side.  Without a descriptor (a run in one process) it keeps nothing anywhere."""

    def __init__(self, descriptor: int | None = None):
        self._record = None
        # a wrapper (compute-sanitizer) may not pass the descriptor through, or hold another file under its
        # number: the parent then reads NOTHING, and reports a timeout as a hang, as it did before this record
        try:
            if descriptor is not None and os.readlink(f"/proc/self/fd/{descriptor}").startswith(f"/memfd:{NAME}"):
                self._record = mmap.mmap(descriptor, _LAYOUT.size)
                os.close(descriptor)
        except OSError:
            pass
        self.state, self.since, self.examples, self.implementation_s, self.what = NOTHING, 0.0, 0, 0.0, ""
        self.ended, self.raised, self._answered_raised = NO_CALL, b"", None

    def cell(self) -> None:
        """A cell begins."""
        self.examples, self.implementation_s, self.ended, self.raised = 0, 0.0, NO_CALL, b""
        self.judge(SETUP)

    def judge(self, what: str) -> None:
        """The judge's own ``what`` runs from now (``the parity oracle``, ``float64 truth``)."""
        self.what = what
        self._write(JUDGE, time.monotonic())

    def example_finished(self) -> None:
        self.examples += 1
        self._write(self.state, self.since)

    def labelled(self, what: str, function: Callable) -> Callable:
        """``function``, a part of the judge, recorded as ``what`` while it runs."""
        @functools.wraps(function)
        def run(*args, **kwargs):
            outer = self.what
            self.judge(what)
            try:
                return function(*args, **kwargs)
            finally:
                self.judge(outer)

        return run

    @contextlib.contextmanager
    def implementation_call(self, host_failure: type[BaseException] | tuple[type[BaseException], ...] = ()):
        """The implementation runs (the judge waits on its host) inside.  The record keeps how the call ended:
        returned; raised, by an exception raised inside or one its host answered with (named inside by
        :meth:`implementation_raised`); or its host failed (an instance of ``host_failure`` raised inside)."""
        started = time.monotonic()
        self._write(IMPLEMENTATION, started)
        self._answered_raised = None
        try:
            yield
        except BaseException as error:
            self._ended(HOST_FAILED if isinstance(error, host_failure) else RAISED, type(error).__name__)
            raise
        else:
            answered = self._answered_raised
            self._ended(RETURNED if answered is None else RAISED, answered or "")
        finally:
            self.implementation_s += time.monotonic() - started
            self._write(JUDGE, time.monotonic())

    def implementation_raised(self, name: str | None) -> None:
        """Inside :meth:`implementation_call`: its host answered that the implementation raised class ``name``
        (None: it did not)."""
        self._answered_raised = name

    def _ended(self, how: int, name: str) -> None:
        encoded = name.encode(errors="replace")
        self.ended = how
        self.raised = encoded if len(encoded) <= _RAISED_SIZE else b""   # a name cut short might name another class

    def _write(self, state: int, since: float) -> None:
        self.state, self.since = state, since
        if self._record is not None:
            _LAYOUT.pack_into(self._record, 0, state, self.examples, since, self.implementation_s, self.what.encode(),
                              self.ended, self.raised)
