"""Pytest on GPUs under pytest-xdist: a GPU per worker, no broken CUDA context carried on, a time limit.

- **One GPU per worker.**  The xdist controller hands each worker it starts the visible GPU that the
  fewest live workers hold (so a worker that replaces a crashed one takes the GPU it freed), and the
  worker sets ``CUDA_VISIBLE_DEVICES`` to it before anything initializes CUDA.  Run
  ``pytest -n <number of GPUs> ...``.
- **No sticky CUDA error reaches a later test.**  After a test that leaves the CUDA context broken
  (an illegal address or a device assert: every later CUDA call in that process fails), the worker
  process ends; xdist reports the test as crashed and carries on in a fresh worker.  Without xdist
  the run stops there, naming the test, instead of failing every test after it.
- **Each worker its share of the cores.**  Under ``-n N`` the controller gives the workers it starts
  ``OMP_NUM_THREADS`` = cores / N (``tools.engine.isolation.thread_share``; unless it is set already): a
  worker, and the hosts and tools its tests start, otherwise runs a thread per core, and two workers' spinning
  OpenMP threads on two cores made the CPU test list 1.4 times as long (docs/ci.md).
- **``--test-timeout SECONDS``.**  A test still running after that dumps every thread's stack and ends
  its process (``faulthandler``); under xdist a fresh worker takes the remaining tests.
"""
from __future__ import annotations

import faulthandler
import os
import sys

import pytest

BROKEN_CONTEXT_EXIT = 70  # the worker's exit status after a test broke its CUDA context
_HELD = pytest.StashKey[dict]()      # on the xdist controller: live worker id -> its GPU
_STDERR = pytest.StashKey[object]()  # the terminal's stderr, past any test's output capture


def pytest_addoption(parser):
    parser.addoption("--test-timeout", type=float, default=None, metavar="SECONDS",
                     help="end the test's process when one test runs longer (under xdist: a fresh worker goes on)")


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out: ``CUDA_VISIBLE_DEVICES``, else every device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [gpu.strip() for gpu in visible.split(",") if gpu.strip()]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def least_held_gpu(gpus: list[str], held: dict[str, str]) -> str | None:
    """The first GPU that the fewest live workers hold (``held``: worker id -> GPU), or None without GPUs."""
    return min(gpus, key=lambda gpu: sum(taken == gpu for taken in held.values())) if gpus else None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """On the xdist controller, before a worker starts: the GPU it will see."""
    held = node.config.stash.setdefault(_HELD, {})
    gpu = least_held_gpu(visible_gpus(), held)
    if gpu is not None:
        held[node.workerinput["workerid"]] = node.workerinput["kparity_gpu"] = gpu


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    node.config.stash.setdefault(_HELD, {}).pop(node.workerinput["workerid"], None)


def pin_gpu(workerinput: dict) -> None:
    """In an xdist worker: see only the GPU the controller handed it."""
    gpu = workerinput.get("kparity_gpu")
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu


def share_cores(config) -> None:
    """On the xdist controller, before it starts its workers: their share of the cores (they inherit it)."""
    from tools.engine.isolation import thread_share

    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and not hasattr(config, "workerinput"):
        os.environ.update(thread_share(workers))


@pytest.hookimpl(tryfirst=True)  # before any plugin's configure initializes CUDA, and before xdist starts workers
def pytest_configure(config):
    pin_gpu(getattr(config, "workerinput", {}))
    share_cores(config)
    # the stack of a test past --test-timeout goes where the terminal sees it, not into a test's capture
    config.stash[_STDERR] = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")


def pytest_unconfigure(config):
    config.stash[_STDERR].close()


def broken_cuda_context() -> str | None:
    """The error every CUDA call in this process now raises, or None while the context is sound."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - torch.AcceleratorError or RuntimeError, by version
        return str(error).strip().splitlines()[0]
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    limit = item.config.getoption("test_timeout")
    if limit:
        faulthandler.dump_traceback_later(limit, exit=True, file=item.config.stash[_STDERR])
    try:
        return (yield)
    finally:
        if limit:
            faulthandler.cancel_dump_traceback_later()
        broken = broken_cuda_context()
        if broken:
            message = f"{item.nodeid} left this process's CUDA context broken ({broken})"
            if hasattr(item.config, "workerinput"):
                stderr = item.config.stash[_STDERR]
                stderr.write(f"{message}: this worker ends, a fresh one takes the remaining tests\n")
                stderr.flush()
                os._exit(BROKEN_CONTEXT_EXIT)
            pytest.exit(f"{message}; every later CUDA test would fail with it: run under pytest-xdist (-n N) to "
                        f"carry on in a fresh worker", returncode=1)
