"""Target kernels and the catalog.

Without a CUDA device, Triton kernels run under the Triton interpreter (the ``cpu-interp`` arch).
The interpreter must be chosen before ``triton.language`` is first imported — its standard library
(``tl.max``, ``tl.min``...) is decorated at import — so it is chosen here, on the way into every kernel.
"""
import os
import sys

if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
