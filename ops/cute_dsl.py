"""The CuTe DSL (``cutlass``), imported through this module so that one flavour of its libraries suffices.

The project installs ``nvidia-cutlass-dsl-libs-cu13`` alone (CUDA 13: the GPU image's, and the flavour
that targets sm_107a), not the ``nvidia-cutlass-dsl`` wheel, which requires the cu12 libraries whatever
extra is asked for (4.8.1): through it a CPU install downloaded both flavours, about 190 MB each, each
writing the same ``cutlass`` package over the other.  That wheel's one file is a ``.pth`` putting
``nvidia_cutlass_dsl/dsl_packages`` on ``sys.path``; this module does the same, and is harmless where the
``.pth`` already did.  Where no flavour is installed, ``import cutlass`` fails as it would anyway
(``ops.catalog`` then leaves CuTe kernels out, with the reason); so does a missing ``apache-tvm-ffi``,
through which the compiled kernels are called.
"""
from __future__ import annotations

import os
import sys

try:
    import nvidia_cutlass_dsl
except ModuleNotFoundError:
    pass
else:
    for _folder in nvidia_cutlass_dsl.__path__:
        _packages = os.path.join(_folder, "dsl_packages")
        if os.path.isdir(_packages) and _packages not in sys.path:
            sys.path.insert(0, _packages)

import cutlass  # noqa: E402 - after the path above
import cutlass.cute as cute  # noqa: E402
import tvm_ffi  # noqa: E402,F401 - the kernels are compiled for TVM FFI calls (cute.compile --enable-tvm-ffi)

__all__ = ["cutlass", "cute"]
