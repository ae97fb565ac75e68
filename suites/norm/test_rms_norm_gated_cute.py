"""rms_norm_gated (CuTe DSL kernel): every cell through the whole battery, on the GPUs the kernel claims.

On the CPU these tests are skipped (the entry claims GPU archs only: a CuTe kernel needs a GPU to run);
what the CPU checks of this kernel is that every reachable launch plan compiles
(``suites/test_cute_compile.py``).  The contract's negative controls live in ``test_rms_norm_gated.py``:
they judge the oracles, whichever kernel those then certify.
"""
from __future__ import annotations

import dataclasses
import re

import pytest

# Without the DSL (a GPU machine it was not carried to: tools/install-wheels) this module is skipped
# with that reason, rather than stop the collection of every other suite.
pytest.importorskip("ops.cute_dsl", reason="nvidia-cutlass-dsl is not installed here (tools/install-wheels)")

from ops.norm import rms_norm_gated_cute as cute_kernel  # noqa: E402
from ops.norm.rms_norm_gated_cute import ENTRY  # noqa: E402
from suites.certification import arch_marks  # noqa: E402
from suites.cute_compiles import compile_rule  # noqa: E402
from suites.op_suite import OpSuite  # noqa: E402

pytestmark = arch_marks(ENTRY.archs)

test_cell = OpSuite(ENTRY).cell_test()


@pytest.mark.cpu
@pytest.mark.parametrize("width, group_size, aligned, whole_row, vector", [
    (4096, 128, True, False, 8),      # the bench case: groups within a warp, 16-byte accesses
    (1001, 1001, False, True, 1),     # a row that is not a multiple of 8 channels: element accesses
    (8192, 8192, True, True, 8),
])
def test_launch_plan_picks_the_kind_of_group_and_the_vector_width(width, group_size, aligned, whole_row, vector):
    plan = cute_kernel.launch_plan(width, group_size, "norm_then_gate", aligned)
    assert (plan.whole_row, plan.vector) == (whole_row, vector)
    assert plan in cute_kernel.reachable_plans()


@pytest.mark.cpu
@pytest.mark.parametrize("width, group_size", [(cute_kernel.MAX_WIDTH + 8, 128), (4096, 512), (4096, 96)])
def test_launch_plan_sends_what_it_cannot_hold_to_the_triton_kernel(width, group_size):
    with pytest.raises(NotImplementedError, match="Triton kernel"):
        cute_kernel.launch_plan(width, group_size, "none", True)


@pytest.mark.cpu
def test_kernels_are_compiled_for_tvm_ffi_calls():
    """The host calls the kernel with plain integers through TVM FFI (issue 28: the DSL's own executor took
    about half a millisecond a call); a plan compiled without ``--enable-tvm-ffi`` would take them as its
    executor's pointer objects only."""
    plan = cute_kernel.LaunchPlan(whole_row=False, vector=8, gate="none", threads=32)
    assert type(cute_kernel.compiled(plan, "sm_90a")).__name__.startswith("TVMFFIJitCompiledFunction")


# -- what the compiled code can wait on: issue 28 (the H200 runs that never returned) ------------
def ptx_hang_sources(ptx: str, threads: int) -> list[str]:
    """Why a CTA of this PTX might never end, one line each; none when every thread runs a bounded path and
    reaches every collective the others wait at: the block size is the launch's (``.reqntid``), no branch
    goes backward (no loop), nothing waits on an mbarrier, bulk copy or cluster, every shuffle names the full
    warp, and a branch that skips a collective — ``bar.sync``, or a full-warp ``shfl.sync``/``vote.sync``
    whose other lanes wait for it — tests kernel parameters only (the same in every thread).  The last is
    the H200's hang: the DSL's ``warp_idx()`` is a shuffle, and lane 0 alone ran it."""
    lines = ptx.splitlines()
    labels = {match[1]: number for number, line in enumerate(lines) if (match := re.match(r"(\$L\w+):", line))}
    from_parameters = {match[1] for line in lines if (match := re.search(r"ld\.param\.\w+\s+(%\w+),", line))}
    setp_of = {match[1]: match[2] for line in lines
               if (match := re.search(r"setp\.\w+\.\w+\s+(%p\d+),\s*([^;]*);", line))}
    collectives = [number for number, line in enumerate(lines)
                   if re.search(r"\bbar(rier)?\.|\b(shfl|vote|match|redux)\.sync\b", line)]
    found = [] if f".reqntid {threads}, 1, 1" in ptx else [f"no .reqntid {threads}, 1, 1"]
    found += [f"line {number + 1}: {line.strip()}" for number, line in enumerate(lines)
              if re.search(r"mbarrier|cp\.async|cluster|bar\.sync\s+\d+\s*,|shfl\.sync\.\w+\.b32[^;]*,\s*(?!-1;)\S+;",
                           line)]
    for number, line in enumerate(lines):
        branch = re.search(r"(?:@!?(%p\d+)\s+)?bra(?:\.uni)?\s+(\$L\w+);", line)
        if not branch:
            continue
        target = labels[branch[2]]
        if target <= number:
            found.append(f"line {number + 1}: {line.strip()} goes back to line {target + 1} (a loop)")
        elif skipped := [lines[c].split()[0] for c in collectives if number < c < target]:
            operands = re.findall(r"%\w+", setp_of.get(branch[1], "%unknown"))
            if branch[1] is None or not operands or not set(operands) <= from_parameters:
                found.append(f"line {number + 1}: {line.strip()} skips a {skipped[0]} on a value that may differ "
                             f"between threads ({setp_of.get(branch[1], 'unconditional')})")
    return found


@pytest.mark.cpu
@pytest.mark.parametrize("plan", cute_kernel.reachable_plans(), ids=lambda plan: "-".join(
    map(str, dataclasses.astuple(plan))))
def test_every_sm90_plan_is_loop_free_with_barriers_every_thread_reaches(plan, tmp_path):
    """Also the compile gate's sm_90a compile of this plan (suites/cute_compiles.py: the gate leaves it here)."""
    with compile_rule():
        ptx = cute_kernel.compiled(plan, "sm_90a", f"--keep-ptx --dump-dir {tmp_path}").artifacts.PTX
    assert ptx_hang_sources(ptx, plan.threads) == [], plan


@pytest.mark.cpu
@pytest.mark.parametrize("flaw, ptx", [
    ("a loop", ".reqntid 32, 1, 1\n$L__BB0_1:\n\tadd.s32 %r1, %r1, 1;\n\tbra.uni $L__BB0_1;\n"),
    ("a barrier behind the thread index",
     ".reqntid 32, 1, 1\n\tmov.u32 %r2, %tid.x;\n\tsetp.ne.b32 %p1, %r2, 0;\n\t@%p1 bra $L__BB0_2;\n"
     "\tbar.sync 0;\n$L__BB0_2:\n\tret;\n"),
    ("an mbarrier wait", ".reqntid 32, 1, 1\n\tmbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2;\n"),
    ("a partial-warp shuffle", ".reqntid 32, 1, 1\n\tshfl.sync.bfly.b32 %r3, %r2, 1, 31, 65535;\n"),
    # the H200's hang (issue 28): warp_idx()'s full-warp shuffle inside `if lane == 0`
    ("a full-warp shuffle lane 0 alone reaches",
     ".reqntid 32, 1, 1\n\tmov.u32 %r2, %laneid;\n\tsetp.ne.b32 %p1, %r2, 0;\n\t@%p1 bra $L__BB0_2;\n"
     "\tshfl.sync.idx.b32 %r4, %r3, 0, 31, -1;\n$L__BB0_2:\n\tbar.sync 0;\n\tret;\n"),
    ("another block size", ".reqntid 64, 1, 1\n\tret;\n"),
])
def test_the_hang_checker_names_each_flaw(flaw, ptx):
    assert ptx_hang_sources(ptx, 32), flaw
