"""Reading the project's own files (certificates, reports, the quarantine ledger, test lists): regular files
only.  A FIFO, a device or a directory in their place would block a reader forever (a FIFO with no
writer) or never end (``/dev/zero``): each is refused with :class:`NotRegularFile` before a byte is read."""
from __future__ import annotations

import errno
import os
import stat


class NotRegularFile(OSError):
    """The path names something other than a regular file; ``strerror`` says what."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular_bytes(path: os.PathLike | str) -> bytes:
    """The contents of ``path``; NotRegularFile when it is not a regular file.  Opened non-blocking, so a FIFO
    is refused at once instead of waiting for a writer (O_NONBLOCK changes nothing for a regular file)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = _kind(mode)
            raise NotRegularFile(errno.EINVAL, f"{kind}, not a regular file" if kind.startswith("a ") else kind,
                                 str(path))
        with os.fdopen(descriptor, "rb", closefd=True) as file:
            descriptor = None
            return file.read()
    finally:
        if descriptor is not None:
            os.close(descriptor)
