"""rms_norm_gated's CuTe DSL kernel on the GPU: every reachable launch plan runs once and ends (issue 28).

The H200 runs of this kernel never returned (docs/ops/rms_norm_gated.md), while its compiled code has no
loop and no barrier a thread can skip (``test_rms_norm_gated_cute.py`` checks the PTX of every plan).  Here
each plan runs in a process of its own under ``PLAN_LIMIT_S``: compile, call, ``torch.cuda.synchronize()``,
each announced, with a stack dump shortly before the limit, so a plan that hangs fails alone, naming the
step it hung in (host: compile or call; device: synchronize), and the others still run.  Its y must be
within one bf16 ULP of the fp32 reference's (the reductions' order differs; the certifier judges the band)
and ``amax`` exactly ``max(old, max |y|)``.

Run alone: ``python -m suites.norm.test_rms_norm_gated_cute_on_gpu '<plan as JSON>'`` from the repository root.
"""
from __future__ import annotations

import dataclasses
import faulthandler
import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("ops.cute_dsl", reason="nvidia-cutlass-dsl is not installed here (tools/install-wheels)")

from ops.catalog import arch_of  # noqa: E402
from ops.norm import rms_norm_gated_cute as cute_kernel  # noqa: E402

pytestmark = pytest.mark.sm90

PLAN_LIMIT_S = 60
ROWS = 3
REPOSITORY = pathlib.Path(__file__).resolve().parents[2]


def _say(step: str) -> None:
    print(step, flush=True)


def run_plan(plan: cute_kernel.LaunchPlan) -> None:
    """One call of the kernel on an input ``launch_plan`` maps to ``plan``; raises AssertionError if wrong."""
    import torch

    from references.norm import rms_norm_gated as contract

    # the widest row of this thread count (threads * 16 channels): a multiple of every per-head group
    width = plan.threads * cute_kernel.CHUNK * cute_kernel.CHUNKS_PER_THREAD
    group_size = width if plan.whole_row else 64
    generator = torch.Generator(device="cuda").manual_seed(width + plan.vector + plan.whole_row)
    x, z = (torch.randn(ROWS, width, generator=generator, device="cuda").to(torch.bfloat16) for _ in range(2))
    # element accesses (vector 1): a weight that starts one element past 16 bytes
    offset = 1 if plan.vector == 1 else 0
    weight_storage = 1.0 + 0.1 * torch.randn(width + offset, generator=generator, device="cuda")
    weight = weight_storage.to(torch.bfloat16)[offset:]
    z = None if plan.gate == "none" else z
    norm_before_gate = plan.gate != "gate_then_norm"
    amax = torch.zeros(1, device="cuda")
    chosen = cute_kernel.operands(x, z, weight, torch.empty_like(x), group_size, norm_before_gate)[0]
    assert chosen == plan, f"the input built for {plan} maps to {chosen}"

    cute_kernel.compiled(plan, cute_kernel.ARCH_TARGETS[arch_of(x.device)])
    _say("compiled")
    y = cute_kernel.rms_norm_gated(x, z, weight, 1e-5, group_size, norm_before_gate, amax)
    _say("called")
    torch.cuda.synchronize()
    _say("synchronized")
    expected = contract.rms_norm_gated(x, z, weight, 1e-5, group_size, norm_before_gate, None)
    ulps = (y.view(torch.int16).int() - expected.view(torch.int16).int()).abs()
    assert int(ulps.max()) <= 1, f"{plan}: y differs from the fp32 reference by {int(ulps.max())} bf16 ULP"
    assert amax.item() == y.abs().amax().float().item(), f"{plan}: amax {amax.item()}, max |y| {y.abs().amax()}"


@pytest.mark.parametrize("plan", cute_kernel.reachable_plans(), ids=lambda plan: "-".join(
    map(str, dataclasses.astuple(plan))))
def test_every_reachable_plan_runs_once_and_ends(plan):
    command = [sys.executable, "-m", __name__, json.dumps(dataclasses.asdict(plan))]
    try:
        ended = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=PLAN_LIMIT_S)
    except subprocess.TimeoutExpired as hung:
        output = (hung.stdout or b"").decode(errors="replace") + (hung.stderr or b"").decode(errors="replace")
        pytest.fail(f"{plan} did not end in {PLAN_LIMIT_S} s; its steps and stacks:\n{output[-4000:]}")
    assert ended.returncode == 0, f"{plan} exited {ended.returncode}:\n{(ended.stdout + ended.stderr)[-4000:]}"


if __name__ == "__main__":
    # the stacks of every thread a little before the parent gives up: which step hangs, host or device
    faulthandler.dump_traceback_later(PLAN_LIMIT_S - 10, exit=True)
    run_plan(cute_kernel.LaunchPlan(**json.loads(sys.argv[1])))
