"""Where an eager call of rms_norm_gated's CuTe kernel spends its host time (issue 28 item 2), on a GPU.

`tools/bench --eager` measured 36.6 us of host time a call for the CuTe kernel (50.6 for the Triton one) on
an H100, 2026-12-06, where the issue's bar is about 20 us.  The kernel is already called through TVM FFI
(plain integers in).  This times each step of the host wrapper alone, the same way (calls issued back to
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

    targets = {x.device.index: cute_op.ARCH_TARGETS[arch]}

    def lean_call():
        """A candidate wrapper: the same checks and launch, the device's target looked up by index, no device
        context where x's device is the current one, the raw stream (as Triton's launcher reads it)."""
        cute_op.contract.validate(x, z, weight, eps, group_size, True, amax)
        out = torch.empty((rows, width), dtype=torch.bfloat16, device=x.device)
        lean_plan, x_lean, gate_lean, weight_lean = cute_op.operands(x, z, weight, out, group_size, True)
        index = x.device.index
        assert index == torch.cuda.current_device()
        compiled_kernel = cute_op.compiled(lean_plan, targets[index])
        compiled_kernel(x_lean.data_ptr(), gate_lean.data_ptr(), weight_lean.data_ptr(), out.data_ptr(),
                        amax.data_ptr(), rows, width, group_size, x_lean.stride(0), gate_lean.stride(0),
                        out.stride(0), float(eps), 1, torch._C._cuda_getCurrentRawStream(index))
        return out

    return [
        ("the whole CuTe call (rms_norm_gated_cute.rms_norm_gated)",
         lambda: cute_op.rms_norm_gated(x, z, weight, eps, group_size, True, amax)),
        ("the whole Triton call (rms_norm_gated.rms_norm_gated)",
         lambda: triton_op.rms_norm_gated(x, z, weight, eps, group_size, True, amax)),
        ("a candidate lean wrapper (below: no device context, raw stream, target by index)", lean_call),
        ("torch._C._cuda_getCurrentRawStream(index)", lambda: torch._C._cuda_getCurrentRawStream(x.device.index)),
        ("torch.cuda.current_device()", torch.cuda.current_device),
        ("contract.validate", lambda: cute_op.contract.validate(x, z, weight, eps, group_size, True, amax)),
        ("torch.empty of the output", lambda: torch.empty((rows, width), dtype=torch.bfloat16, device=x.device)),
        ("arch_of(x.device)", lambda: arch_of(x.device)),
        ("operands (unit columns, alignment, launch_plan)",
         lambda: cute_op.operands(x, z, weight, y, group_size, True)),
        ("compiled(plan, target): the cache's lookup", lambda: cute_op.compiled(plan, cute_op.ARCH_TARGETS[arch])),
        ("with torch.cuda.device(x.device)", device_context),
        ("torch.cuda.current_stream(x.device).cuda_stream",
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
