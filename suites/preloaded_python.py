"""A Python that has imported what every tool process imports first (numpy, torch, Triton, Hypothesis, the CuTe
DSL) and forks a child for each run it is sent: the child runs ``python ARGV`` in the run's folder and environment,
importing the project from the tree it runs in, as a fresh interpreter would, without those imports (about half of
a gate run's four seconds: docs/ci.md, 2026-12-06d).  Started by ``suites.processes.preloaded_run``; each request
``(cwd, env, argv, stdout_path, stderr_path)`` comes pickled on stdin, and its exit status goes back on stdout."""
import os
import pickle
import runpy
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

sys.path[0] = REPO   # instead of this script's folder, for the DSL's own path set-up, then removed
import hypothesis  # noqa: E402,F401
import numpy  # noqa: E402,F401
import torch  # noqa: E402,F401
import triton  # noqa: E402,F401

try:
    import ops.cute_dsl  # noqa: F401 - cutlass and tvm_ffi, found as the project finds them
except ImportError:
    pass  # no CuTe DSL here: the runs find none either
# the project itself is left to each run, from its own tree
for _name in [name for name, module in sys.modules.items()
              if (getattr(module, "__file__", None) or "").startswith(REPO + os.sep)]:
    del sys.modules[_name]
sys.path.remove(REPO)


def run(cwd: str, env: dict, argv: list, stdout: str, stderr: str) -> None:
    """What ``python ARGV`` does, in this (forked) process."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path.insert(0, "")
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


while True:
    try:
        request = pickle.load(sys.stdin.buffer)
    except EOFError:   # the tests' process has ended
        break
    child = os.fork()
    if child == 0:
        run(*request)
        sys.exit(0)   # the interpreter's own end: exit handlers, buffers flushed (an exception ends it with 1)
    _, status = os.waitpid(child, 0)
    pickle.dump(os.waitstatus_to_exitcode(status), sys.stdout.buffer)
    sys.stdout.buffer.flush()
