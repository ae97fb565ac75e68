"""Kernels that take their process down, for the isolation and sanitizer negative controls.

Each is a real Triton kernel, so the same control runs on the H200 and under the CPU interpreter:

- ``wild_store``: stores 2**40 elements past its output.  On a GPU that is an illegal address (the
  launch fails and the context is poisoned for good); under the interpreter it is a segfault (the
  interpreter stores through the raw pointer).  Under ``compute-sanitizer --tool memcheck`` it is an
  invalid global write.
- ``spin``: loops while a flag in memory reads 0, and nothing ever writes it (the load is volatile, so
  the compiler cannot hoist it out of the loop and drop the loop).  It never returns.

They are judged through ``greedy_argmax``'s contract, faulting only in some cells so that the others
show the run going on in a fresh worker:
``tools/certify-cells --op greedy_argmax --impl suites.faults.faulty_kernels:NAME``.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

import ops  # noqa: F401 - the Triton interpreter on a machine without CUDA, chosen before Triton's language loads
from references.sampling.greedy_argmax import greedy_argmax as reference
from references.sampling.greedy_argmax import validate
from tools.engine.sessions import keep_niceness

WILD_OFFSET = 2**40   # elements: 8 TiB past an int64 output, unmapped on any machine


@triton.jit
def wild_store_kernel(out_ptr, n, offset, BLOCK: tl.constexpr):
    index = tl.arange(0, BLOCK)
    tl.store(out_ptr + offset + index, index.to(tl.int64), mask=index < n)


@triton.jit
def spin_kernel(flag_ptr):
    flag = tl.load(flag_ptr)
    while flag == 0:
        flag = tl.load(flag_ptr, volatile=True)


def wild_store(rows: int, device) -> None:
    out = torch.zeros(max(rows, 1), dtype=torch.int64, device=device)
    wild_store_kernel[(1,)](out, rows, WILD_OFFSET, BLOCK=16)
    out.cpu()  # the GPU reports the fault at the next synchronization


def spin(device) -> None:
    if torch.device(device).type == "cpu":
        # the interpreter's spin keeps a core busy until the judge's limit ends it: at nice 19, this process and
        # its session's scheduling group, it takes only CPU nothing else wants (on CI's two cores, the other
        # tests'); the limit is the wall clock's, so the hang is judged the same
        os.nice(19 - os.nice(0))
        keep_niceness(os.getpid())
    spin_kernel[(1,)](torch.zeros(1, dtype=torch.int32, device=device))
    torch.zeros(1, device=device).cpu()  # waits for the spinning kernel on a GPU


def wild_store_on_small_batches(logits):
    """Right, except that a batch of 1..16 rows (the decode_small_batch cell) stores out of bounds."""
    validate(logits)
    if 1 <= logits.shape[0] <= 16:
        wild_store(logits.shape[0], logits.device)
    return reference(logits)


def spins_on_mid_batches(logits):
    """Right, except that a batch of 17..255 rows (the decode_mid_batch cell) never returns."""
    validate(logits)
    if 17 <= logits.shape[0] <= 255:
        spin(logits.device)
    return reference(logits)


def faulty_by_batch(logits):
    """Both faults at once: out of bounds on 1..16 rows, a hang on 17..255, right elsewhere."""
    wild_store_on_small_batches(logits)
    return spins_on_mid_batches(logits)


def out_of_memory_on_small_batches(logits):
    """Right, except that a batch of 1..16 rows raises CUDA's out-of-memory error (what a neighbour on a
    shared GPU can make a correct kernel raise), on any device."""
    validate(logits)
    if 1 <= logits.shape[0] <= 16:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a control)")
    return reference(logits)


def raises_on_small_batches(logits):
    """The control of ``out_of_memory_on_small_batches``: a RuntimeError that is not out of memory, which is the
    kernel's own finding."""
    validate(logits)
    if 1 <= logits.shape[0] <= 16:
        raise RuntimeError("CUDA error: an illegal memory access was encountered (a control)")
    return reference(logits)


def dies_out_of_memory_on_small_batches(logits):
    """Right, except that on a batch of 1..16 rows its process ends as one whose CUDA context or allocation
    met a full GPU: CUDA's out-of-memory words on stderr, then exit status 1, on any device."""
    import os
    import sys

    validate(logits)
    if 1 <= logits.shape[0] <= 16:
        print("RuntimeError: CUDA error: out of memory (a control)", file=sys.stderr, flush=True)
        os._exit(1)
    return reference(logits)


# A GPU fault and the cell running beside it, in order, for run_isolated's rerun of a fault's neighbours on a
# GPU's slots (any device: the fault is CUDA's message): the folder named by FAULT_BARRIER (readable by the
# implementation's host) holds the two marks that order them. At most BARRIER_WAIT_S each: a broken order
# fails the test's assertions, never hangs it.
BARRIER_WAIT_S = 120


def _wait_for(mark: str) -> None:
    import os
    import time

    path = os.path.join(os.environ["FAULT_BARRIER"], mark)
    deadline = time.monotonic() + BARRIER_WAIT_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def _mark(mark: str) -> None:
    import os

    open(os.path.join(os.environ["FAULT_BARRIER"], mark), "a").close()


def faults_once_its_neighbour_runs(logits):
    """Raises CUDA's illegal-address error (a GPU fault) once the cell beside it is inside its call."""
    validate(logits)
    _wait_for("neighbour_running")
    raise RuntimeError("CUDA error: an illegal memory access was encountered (a control)")


def answers_once_its_neighbours_fault_is_seen(logits):
    """Right, but its call returns only once the judge has seen the neighbour's fault (the test marks it then):
    what a kernel ended silently by a neighbour's fault looks like from the judge, a right answer included."""
    validate(logits)
    _mark("neighbour_running")
    _wait_for("fault_seen")
    return reference(logits)
