"""Faults of the judge's own side, planted in a certification worker as its interpreter starts.

With this folder on ``PYTHONPATH`` every Python process imports this module; one acts only where its
environment names a fault, and the implementation host never does (its environment keeps no ``KPARITY_``
variable: ``tools/engine/impl_executor.neutral_environment``).  ``suites/faults/test_isolation.py`` sets:

- ``KPARITY_FAULT_START=out-of-memory``: the process ends at once as a worker did whose CUDA context could
  not be made beside other processes (its last line CUDA's advice about device-side assertions);
  ``=broken``: it ends for another reason.
- ``KPARITY_FAULT_SLOW_REFERENCE_S=SECONDS``: every catalog kernel's reference sleeps that long first (the
  judge's own code slower than ``--cell-timeout``, as the float64 truth of paged_decode was on an H200).
"""
import os
import sys

_START = {
    "out-of-memory": ["RuntimeError: CUDA error: out of memory",
                      "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                      "below might be incorrect.",
                      "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."],
    "broken": ["ImportError: a broken installation (a control)"],
}

if os.environ.get("KPARITY_FAULT_START"):
    print("\n".join(_START[os.environ["KPARITY_FAULT_START"]]), file=sys.stderr, flush=True)
    os._exit(1)   # (site would report an exception here and carry on)

if os.environ.get("KPARITY_FAULT_SLOW_REFERENCE_S"):
    import dataclasses
    import functools
    import time

    import ops.catalog

    def _slow(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            time.sleep(float(os.environ["KPARITY_FAULT_SLOW_REFERENCE_S"]))
            return function(*args, **kwargs)

        return run

    _kernels = ops.catalog.kernels
    ops.catalog.kernels = lambda name: tuple(dataclasses.replace(entry, reference=_slow(entry.reference))
                                             for entry in _kernels(name))
