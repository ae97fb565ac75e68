"""The first code of an implementation host, copied outside the tree and run there as a plain script.

Its socket (stdin) brings ``(source, settings)``: the host's code and how to start it.  It makes the
paths of ``settings["read_only"]`` read-only in a mount namespace of its own (the project tree, the
packages, every bytecode cache: what the judge reads code from), then detaches: this process ends, its
child (the guardian) is no longer the judge's child, and the guardian's child runs ``source`` — the host.
The guardian waits for the host to end and tells the judge how (``settings["guardian_fd"]``), or ends the
process group when the judge goes.  It imports nothing but the standard library.
"""
import ctypes
import os
import select
import signal
import socket
from multiprocessing.connection import Connection

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1


def _call(libc, what: str, *arguments) -> None:
    if getattr(libc, what)(*arguments) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _user_namespace(libc) -> None:
    """Without root: a user namespace of one uid (itself) in which a mount namespace is allowed."""
    uid, gid = os.getuid(), os.getgid()
    _call(libc, "unshare", CLONE_NEWUSER | CLONE_NEWNS)
    with open("/proc/self/setgroups", "w") as file:
        file.write("deny")
    with open("/proc/self/uid_map", "w") as file:
        file.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as file:
        file.write(f"{gid} {gid} 1")


def read_only(paths: list[str]) -> str | None:
    """Make ``paths`` read-only for this process and its children; None, or why it could not be done."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        try:
            _call(libc, "unshare", CLONE_NEWNS)
        except OSError:
            _user_namespace(libc)
        _call(libc, "mount", b"none", b"/", None, MS_REC | MS_PRIVATE, None)
        for path in paths:
            encoded = os.fsencode(path)
            _call(libc, "mount", encoded, encoded, None, MS_BIND | MS_REC, None)
            _call(libc, "mount", None, encoded, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
        writable = [path for path in paths if os.access(path, os.W_OK)]
        return f"{writable[0]} is still writable" if writable else None
    except OSError as error:
        return f"no mount namespace here ({error.strerror or error})"


def detach(channel: Connection, guardian_fd: int) -> None:
    """Return in the host: a grandchild of this process, whose parent (the guardian) is not the judge."""
    if os.fork():
        os._exit(0)
    host = os.fork()
    if host == 0:
        os.close(guardian_fd)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)   # a guardian that is killed takes the host along
        if os.getppid() == 1:
            os._exit(1)
        return
    os.close(0)
    channel.close()   # the host's socket ends with the host alone
    guardian = socket.socket(fileno=guardian_fd)
    ended = os.pidfd_open(host)
    ready, _, _ = select.select([guardian, ended], [], [])
    if guardian in ready:   # the judge ended (its end of the socket closed): so does everything it started
        os.killpg(0, signal.SIGKILL)
    _, status = os.waitpid(host, 0)
    guardian.sendall(str(status).encode())
    os._exit(0)


def main() -> None:
    channel = Connection(os.dup(0))
    source, settings = channel.recv()
    settings["unprotected"] = read_only(settings["read_only"])
    detach(channel, settings["guardian_fd"])
    channel.send(("started", {"unprotected": settings["unprotected"]}))
    namespace = {"__name__": "__serve__"}
    exec(compile(source, __file__, "exec"), namespace)
    namespace["serve"](channel, settings)


if __name__ == "__main__":
    main()
