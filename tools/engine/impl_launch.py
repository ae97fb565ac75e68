"""The first code of an implementation host, copied outside the tree and run there as a plain script.

Its socket (stdin) brings ``(source, settings)``: the host's code and how to start it.  It makes the
paths of ``settings["read_only"]`` (the project tree, the packages, every bytecode cache: what the judge
reads code from) unwritable for itself and its children by the first of ``settings["means"]`` the machine
allows: ``"namespace"``, a mount namespace of its own where they are read-only (as root, else in a user
namespace), and where each folder of ``settings["own_caches"]`` (Triton's kernel cache) is the host's own:
the judge's entries seen through an overlay whose writes land in a scratch folder (else an empty scratch
folder in its place), so that nothing a host compiles, or plants, reaches the judge's cache; ``"uid"``,
where no namespace can be made but it runs as root, a separate unprivileged uid (``settings["host_ids"]``)
that can write none of them (walked, file by file, unless the judge says an earlier host walked them:
``settings["walked"]``), with no way back to privileges.  Then it detaches:
this process ends, its child (the guardian) is no longer the judge's child, and the guardian's child runs
``source`` — the host.  The guardian waits for the host to end and tells the judge how
(``settings["guardian_fd"]``), or ends the process group when the judge goes.  It imports nothing but the
standard library.
"""
import ctypes
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
from multiprocessing.connection import Connection

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
PRIVATE_HOME: list[str] = []   # the home made for a separate uid, which the guardian removes at the end


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


def own_cache(libc, folder: str, scratch_root: str) -> None:
    """In this mount namespace, ``folder`` becomes an overlay of itself whose writes land in a scratch folder
    under ``scratch_root`` (the judge's, who removes it when the host has ended): the judge's kernels seen,
    none of the host's kept; where no overlay can be made, an empty scratch folder in its place."""
    scratch = tempfile.mkdtemp(dir=scratch_root)
    upper, work = os.path.join(scratch, "upper"), os.path.join(scratch, "work")
    os.mkdir(upper)
    os.mkdir(work)
    encoded = os.fsencode(folder)
    try:
        _call(libc, "mount", b"overlay", encoded, b"overlay", 0,
              os.fsencode(f"lowerdir={folder},upperdir={upper},workdir={work}"))
    except OSError:
        _call(libc, "mount", os.fsencode(upper), encoded, None, MS_BIND, None)


def read_only(paths: list[str], own_caches: list[str], scratch_root: str) -> str | None:
    """Make ``paths`` read-only for this process and its children, and each of ``own_caches`` its own; None,
    or why it could not be done."""
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
        if writable:
            return f"{writable[0]} is still writable"
    except OSError as error:
        return f"no mount namespace here ({error.strerror or error})"
    for folder in own_caches:
        try:
            own_cache(libc, folder, scratch_root)
        except OSError as error:
            return f"{folder} could not be made the host's own ({error.strerror or error})"
    return None


def first_writable(paths: list[str]) -> str | None:
    """The first file or folder at or under ``paths`` this process may write (or may enter but not list, so
    that what lies in it cannot be checked), else None.  Links are not walked into (as a read-only bind
    mount does not reach their targets either); a link to a writable file or folder counts, one to a
    device (``/dev/null``) does not."""
    stack = list(reversed(paths))
    while stack:
        path = stack.pop()
        if os.access(path, os.W_OK) and (os.path.isfile(path) or os.path.isdir(path)):
            return path
        if os.path.isdir(path) and not os.path.islink(path) and os.access(path, os.X_OK):
            try:
                with os.scandir(path) as entries:
                    stack += sorted((entry.path for entry in entries), reverse=True)
            except PermissionError:
                return f"{path} (it can be entered but not listed)"
    return None


def separate_uid(paths: list[str], ids: tuple[int, int] | None, walked: bool) -> str | None:
    """As root: become the unprivileged ``ids`` (uid, gid), no supplementary groups, never to regain a
    privilege (no setuid program grants one either), with a home of its own — where that uid can read the
    interpreter's paths and can write none of ``paths`` (``walked``: an earlier host of this judge found so
    already), checked first in a child that became it; None when done, else why not (and nothing changed)."""
    if ids is None:
        return "no unprivileged user to run the host as"
    if os.geteuid() != 0:
        return "not root: no separate uid to run the host as"
    uid, gid = ids
    own = os.path.dirname(os.path.abspath(__file__))   # the launcher's folder: read already, the judge's
    needed = [path for path in (sys.prefix, sys.base_prefix, *sys.path) if path and os.path.isdir(path)
              and os.path.abspath(path) != own]   # found as root: the uid may not even see them
    reader, writer = os.pipe()
    if os.fork() == 0:
        os.close(reader)
        _become(uid, gid)
        unreadable = [path for path in needed if not os.access(path, os.R_OK | os.X_OK)]
        writable = [path for path in paths if os.access(path, os.W_OK)] if walked else \
            list(filter(None, [first_writable(paths)]))
        why = f"uid {uid} cannot read {unreadable[0]}" if unreadable else \
            f"uid {uid} can write {writable[0]}" if writable else "none"
        os.write(writer, why.encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as answer:
        why = answer.read().decode() or "the uid's check ended without an answer"
    os.wait()
    if why != "none":
        return why
    home = tempfile.mkdtemp()   # the caches a host writes (Triton's, torch's), none of the judge's
    os.chown(home, uid, gid)
    PRIVATE_HOME.append(home)
    os.environ.update({"HOME": home, "XDG_CACHE_HOME": os.path.join(home, ".cache")})
    _become(uid, gid)
    return None


def _become(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)   # as root: the real, effective and saved uids, and every capability, go
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def protect(paths: list[str], settings: dict) -> tuple[str | None, str | None]:
    """``(how paths are protected, None)``, or ``(None, why they are not)``: the first of
    ``settings["means"]`` that this machine allows."""
    reasons = []
    for means in settings["means"]:
        if means == "namespace":
            why, how = read_only(paths, settings["own_caches"], settings["cache_scratch"]), "a private mount namespace"
        else:
            why, how = separate_uid(paths, settings["host_ids"], settings["walked"]), "a separate uid"
        if why is None:
            return how, None
        reasons.append(why)
    return None, "; ".join(reasons) or "no means of protection asked"


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
        _remove_private_home()
        os.killpg(0, signal.SIGKILL)
    _, status = os.waitpid(host, 0)
    guardian.sendall(str(status).encode())
    _remove_private_home()
    os._exit(0)


def _remove_private_home() -> None:
    for home in PRIVATE_HOME:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    channel = Connection(os.dup(0))
    source, settings = channel.recv()
    protection, settings["unprotected"] = protect(settings["read_only"], settings)
    detach(channel, settings["guardian_fd"])
    channel.send(("started", {"unprotected": settings["unprotected"], "protection": protection}))
    namespace = {"__name__": "__serve__"}
    exec(compile(source, __file__, "exec"), namespace)
    namespace["serve"](channel, settings)


if __name__ == "__main__":
    main()
