"""Why the implementation host shows no cache after a 2 GiB temporary within CACHE_KEPT_BYTES (2026-12-06b):
the same temporary in this process, then in a host, with the allocator's figures read in the same call and in a
message after it.

    PYTHONPATH=. python3 docs/lab/host_cache_probe.py
"""
from __future__ import annotations

import os
import pathlib
import sys
import tempfile

import torch

from suites.claims import REPO
from suites.faults import cache_holding
from tools.engine.impl_executor import ImplementationHost

PROBE = '''
import torch
from suites.faults.cache_holding import memory_held, within_the_limit
def within_then_held(x):
    within_the_limit(x)
    return memory_held(x)
def settings(x):
    return torch.tensor([len(torch.cuda.get_allocator_backend())], device=x.device)
'''


def main() -> None:
    x = torch.ones(1024, device="cuda")
    print("judge env:", {k: v for k, v in os.environ.items() if "CUDA" in k or "TORCH" in k})
    print("backend:", torch.cuda.get_allocator_backend())
    cache_holding.within_the_limit(x)
    print("in this process after within_the_limit:", torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
    folder = tempfile.mkdtemp()
    pathlib.Path(folder, "probe_module.py").write_text(PROBE)
    host = ImplementationHost("cuda", call_limit_s=120, warmup=0)
    try:
        host.load([str(REPO), folder], {"within_then_held": ("probe_module", "within_then_held"),
                                        "memory_held": ("suites.faults.cache_holding", "memory_held"),
                                        "within": ("suites.faults.cache_holding", "within_the_limit"),
                                        "settings": ("probe_module", "settings")})
        print("host backend name length:", host.function("settings")(x).tolist())
        print("host, same call:", host.function("within_then_held")(x).tolist())
        print("host, next message:", host.function("memory_held")(x).tolist())
        host.function("within")(x)
        print("host, after within, next message:", host.function("memory_held")(x).tolist())
    finally:
        host.close()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
