"""Where an eager call of rms_norm_gated's CuTe kernel spends its host time (issue 28 item 2), on a GPU.

`tools/bench --eager` measured 36.6 us of host time a call for the CuTe kernel (50.6 for the Triton one) on
an H100, 2026-12-06, where the issue's bar is about 20 us.  The kernel is already called through TVM FFI
(plain integers in); since 2026-12-06b the wrapper looks its target up once a device, enters no device context
where x's device is current and reads the raw stream (the steps it left are timed here too).  This times each step of the host wrapper alone, the same way (calls issued back to
back, unsynchronised, HOST_CALLS at a time, the median of REPEATS), on the bench case's tensors and on one
row (whose kernel is far shorter than any host step, so a queue of launches never throttles the host):

    PYTHONPATH=. python3 docs/lab/cute_host_time.py            # the CuTe DSL installed (tools/install-wheels)
"""
from __future__ import annotations

import statistics
import time

import torch

from ops.catalog import arch_of
from ops.norm import rms_norm_gated as triton_op
from ops.norm import rms_norm_gated_cute as cute_op

HOST_CALLS = 100
REPEATS = 21


def host_us(fn) -> float:
    """The host's time a call of ``fn``: HOST_CALLS calls back to back, the median of REPEATS runs."""
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(HOST_CALLS):
            fn()
        runs.append((time.perf_counter() - started) / HOST_CALLS * 1e6)
        torch.cuda.synchronize()
    return statistics.median(runs)


def steps(rows: int, width: int = 4096, group_size: int = 128) -> list[tuple[str, object]]:
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    z = torch.randn_like(x)
    weight = torch.randn(width, device="cuda", dtype=torch.bfloat16)
    amax = torch.zeros(1, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    eps = 1e-6
    arch = arch_of(x.device)
    plan, x_unit, gate_input, weight_unit = cute_op.operands(x, z, weight, y, group_size, True)
    kernel = cute_op.compiled(plan, cute_op.ARCH_TARGETS[arch])
    stream = torch.cuda.current_stream(x.device).cuda_stream
    arguments = (x_unit.data_ptr(), gate_input.data_ptr(), weight_unit.data_ptr(), y.data_ptr(), amax.data_ptr(),
                 rows, width, group_size, x_unit.stride(0), gate_input.stride(0), y.stride(0), float(eps), 1, stream)

    def device_context():
        with torch.cuda.device(x.device):
            pass

    return [
        ("the whole CuTe call (rms_norm_gated_cute.rms_norm_gated)",
         lambda: cute_op.rms_norm_gated(x, z, weight, eps, group_size, True, amax)),
        ("the whole Triton call (rms_norm_gated.rms_norm_gated)",
         lambda: triton_op.rms_norm_gated(x, z, weight, eps, group_size, True, amax)),
        ("torch._C._cuda_getCurrentRawStream(index)", lambda: torch._C._cuda_getCurrentRawStream(x.device.index)),
        ("torch.cuda.current_device()", torch.cuda.current_device),
        ("contract.validate", lambda: cute_op.contract.validate(x, z, weight, eps, group_size, True, amax)),
        ("torch.empty of the output", lambda: torch.empty((rows, width), dtype=torch.bfloat16, device=x.device)),
        ("arch_of(x.device) (the wrapper before 2026-12-06b, each call)", lambda: arch_of(x.device)),
        ("_target_of(index): the cached target", lambda: cute_op._target_of(x.device.index)),
        ("operands (unit columns, alignment, launch_plan)",
         lambda: cute_op.operands(x, z, weight, y, group_size, True)),
        ("compiled(plan, target): the cache's lookup", lambda: cute_op.compiled(plan, cute_op.ARCH_TARGETS[arch])),
        ("with torch.cuda.device(x.device) (before 2026-12-06b, each call)", device_context),
        ("torch.cuda.current_stream(x.device).cuda_stream (before 2026-12-06b)",
         lambda: torch.cuda.current_stream(x.device).cuda_stream),
        ("data_ptr() and stride(0) of the operands",
         lambda: (x_unit.data_ptr(), gate_input.data_ptr(), weight_unit.data_ptr(), y.data_ptr(), amax.data_ptr(),
                  x_unit.stride(0), gate_input.stride(0), y.stride(0))),
        ("the compiled kernel's TVM FFI call alone (arguments ready)", lambda: kernel(*arguments)),
    ]


def main() -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; host time a call, us "
          f"(median of {REPEATS} runs of {HOST_CALLS} unsynchronised calls)")
    cases = {f"[{rows}, 4096]": steps(rows) for rows in (8192, 1)}
    print("| step | " + " | ".join(cases) + " |")
    print("|---|" + "---:|" * len(cases))
    for index, (name, _) in enumerate(next(iter(cases.values()))):
        print(f"| {name} | " + " | ".join(f"{host_us(case[index][1]):.1f}" for case in cases.values()) + " |")


if __name__ == "__main__":
    main()
