"""Lab-only, on a GPU machine: where a CuTe DSL launch hangs, in well under a minute.

The first H200 run of ``rms_norm_gated``'s CuTe kernel hit the 120 s cell timeout with no example done
and no traceback (docs/ops/rms_norm_gated.md).  This runs, in order, each step announced before and
after on stdout:

- ``toy``: a one-thread-block CuTe kernel that doubles a value: does any DSL launch return on this
  machine (the DSL runtime and the driver, not our kernel)?
- ``contiguous``: the CuTe kernel on a small contiguous input (16-byte accesses, groups in a warp).
- ``first_recipe``: the CuTe kernel on the recipe the H200 run hung on (padded x rows, z every other
  row, a misaligned weight: element accesses).

Each kernel case is compile, launch (the call returns to the host), ``torch.cuda.synchronize()`` (the
kernel ends), then a comparison with the fp32 reference.  Before each step ``faulthandler`` is armed for
``--step-timeout`` seconds (default 25): a step that does not end dumps every thread's Python stack to
stderr and exits, so the last "before" line and the stack say whether the host (compile, launch) or
the kernel (synchronize) hangs.  Exit 0: every case ran to its end and agreed (y within the band the
certifier allows is its job; here: finite where the reference is, and ``amax`` exactly
``max(old, max |y|)``); 1: a case disagreed; a hang exits from faulthandler with status 1 too.
"""
import faulthandler
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the repository root: run from a clone

from tools.cli import ArgumentParser, UsageError, run_main

CASES = ("toy", "contiguous", "first_recipe")
FIRST_RECIPE = {"H": 128, "T": 64, "amax": "zero", "eps": 1e-05, "gate": "norm_then_gate", "group_size": 64,
                "seed": 6371672222481978704, "values": "group_scales", "weight_layout": "column_offset",
                "x_layout": "padded_rows", "z_layout": "every_other_row"}
CONTIGUOUS_RECIPE = {**FIRST_RECIPE, "T": 4, "values": "normal", "weight_layout": "contiguous",
                     "x_layout": "contiguous", "z_layout": "contiguous"}


class Steps:
    """Announces each step before and after, with faulthandler armed for the step's duration."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.started = time.perf_counter()

    def run(self, case: str, step: str, action):
        print(f"[{time.perf_counter() - self.started:6.2f}s] {case}: before {step}", flush=True)
        faulthandler.dump_traceback_later(self.timeout_s, exit=True)
        try:
            result = action()
        finally:
            faulthandler.cancel_dump_traceback_later()
        print(f"[{time.perf_counter() - self.started:6.2f}s] {case}: after {step}", flush=True)
        return result


def toy_case(steps: Steps, arch_target: str) -> bool:
    # the DSL imports here (--help needs none) and the DSL evaluates these annotations: hence no
    # `from __future__ import annotations` in this module
    import torch

    from ops.cute_dsl import cute, cutlass
    from cutlass.cute.runtime import make_ptr  # after ops.cute_dsl, which puts it on the path

    @cute.kernel
    def double(pointer: cute.Pointer):
        values = cute.make_tensor(pointer, cute.make_layout((1,)))
        values[0] = values[0] * 2.0

    @cute.jit
    def launch(pointer: cute.Pointer):
        double(pointer).launch(grid=[1, 1, 1], block=[32, 1, 1])

    value = torch.full((1,), 3.0, device="cuda")
    pointer = make_ptr(cutlass.Float32, value.data_ptr(), cute.AddressSpace.gmem, assumed_align=4)
    kernel = steps.run("toy", "compile", lambda: cute.compile(launch, pointer, options=f"--gpu-arch {arch_target}"))
    steps.run("toy", "launch", lambda: kernel(pointer))
    steps.run("toy", "torch.cuda.synchronize()", torch.cuda.synchronize)
    print(f"toy: 3.0 doubled is {value.item()}", flush=True)
    return value.item() == 6.0


def norm_case(steps: Steps, case: str, recipe: dict, arch_target: str) -> bool:
    import torch

    from ops.norm import rms_norm_gated_cute as cute_kernel
    from references.norm import rms_norm_gated as contract
    from references.norm.rms_norm_gated_strategy import build

    kwargs = build(recipe, "cuda")
    x, z = kwargs["x"], kwargs["z"]
    print(f"{case}: x {tuple(x.shape)} strides {x.stride()}, z strides {None if z is None else z.stride()}, "
          f"weight stride {kwargs['weight'].stride()} at {kwargs['weight'].data_ptr() % 16} bytes past 16", flush=True)
    amax_before = None if kwargs["amax"] is None else kwargs["amax"].clone()
    # the plan the wrapper will choose (its y is fresh, like this one): compiled first, so that the launch
    # step is the launch alone
    plan = cute_kernel.operands(x, z, kwargs["weight"], torch.empty(x.shape, dtype=torch.bfloat16, device=x.device),
                                kwargs["group_size"], kwargs["norm_before_gate"])[0]
    print(f"{case}: plan {plan}", flush=True)
    steps.run(case, "compile", lambda: cute_kernel.compiled(plan, arch_target))
    y = steps.run(case, "launch", lambda: cute_kernel.rms_norm_gated(**kwargs))
    steps.run(case, "torch.cuda.synchronize()", torch.cuda.synchronize)
    expected = steps.run(case, "reference", lambda: contract.rms_norm_gated(
        **{**kwargs, "amax": None if amax_before is None else amax_before.clone()}))
    ulps = (y.view(torch.int16).int() - expected.view(torch.int16).int()).abs()
    finite_as_reference = bool((y.isfinite() == expected.isfinite()).all())
    print(f"{case}: {int((ulps != 0).sum())} of {y.numel()} elements differ from the fp32 reference's bf16, "
          f"by at most {int(ulps.max())} bf16 ULP (the certifier judges the band); finite where it is: "
          f"{finite_as_reference}", flush=True)
    if amax_before is None:
        return finite_as_reference
    amax_expected = torch.maximum(amax_before, y.abs().amax().float().reshape(1))
    print(f"{case}: amax {amax_before.item()} -> {kwargs['amax'].item()}, max(old, max |y|) = {amax_expected.item()}",
          flush=True)
    return finite_as_reference and bool((kwargs["amax"] == amax_expected).all())


def main(argv=None) -> int:
    parser = ArgumentParser(prog="docs/lab/cute_diagnose.py",
                            description="Run the CuTe rms_norm_gated kernel once per case, announcing each "
                                        "step, with a stack dump if one hangs (GPU machine only).",
                            epilog="Example: docs/lab/cute_diagnose.py 2>&1 | tee $OUT/cute-diagnose.log")
    parser.add_argument("cases", nargs="*", default=list(CASES), metavar="CASE",
                        help=f"which of {', '.join(CASES)} to run, in that order (default all)")
    parser.add_argument("--step-timeout", type=float, default=25.0, metavar="S",
                        help="seconds a step may take before its stack is dumped and the run exits (default 25)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        raise UsageError(f"CASE: {', '.join(unknown)} is not one of {', '.join(CASES)}")

    import torch  # after parsing: --help needs neither torch nor the DSL
    if not torch.cuda.is_available():
        raise UsageError("no CUDA device here: the CuTe DSL kernels run on GPUs only")
    from ops.catalog import arch_of
    from ops.cute_dsl import cutlass
    from ops.norm import rms_norm_gated_cute as cute_kernel

    arch = arch_of("cuda")
    if arch not in cute_kernel.ARCH_TARGETS:
        raise UsageError(f"{torch.cuda.get_device_name()} ({arch}) is not an arch the CuTe kernel claims")
    arch_target = cute_kernel.ARCH_TARGETS[arch]
    print(f"{torch.cuda.get_device_name()} -> {arch_target}; torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"nvidia-cutlass-dsl {cutlass.__version__}", flush=True)
    steps = Steps(args.step_timeout)
    agreed = {}
    for case in (c for c in CASES if c in args.cases):
        if case == "toy":
            agreed[case] = toy_case(steps, arch_target)
        else:
            agreed[case] = norm_case(steps, case, FIRST_RECIPE if case == "first_recipe" else CONTIGUOUS_RECIPE,
                                     arch_target)
    print("ended: " + ", ".join(f"{case} {'agrees' if ok else 'DISAGREES'}" for case, ok in agreed.items()),
          flush=True)
    return 0 if all(agreed.values()) else 1


if __name__ == "__main__":
    run_main(main)
