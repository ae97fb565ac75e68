"""Target kernels and the catalog.

Without a CUDA device, Triton kernels run under the Triton interpreter (the ``cpu-interp`` arch).
The interpreter must be chosen before ``triton.language`` is first imported — its standard library
(``tl.max``, ``tl.min``...) is decorated at import — so it is chosen here, on the way into every kernel;
and wherever it runs, it computes bf16 and fp8 as the GPU does (``oracles/triton_interpreter.py``).
"""
import os
import sys

if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

if os.environ.get("TRITON_INTERPRET") == "1":
    from oracles.triton_interpreter import install_when_imported

    install_when_imported()
