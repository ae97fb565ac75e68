"""tools/compile-receipts: the judgement of fresh receipts against the committed ones (spills added, shared
memory over the arch's limit, stale cubins, plans gone), each finding naming kernel, plan and arch; a
kernel that does not compile is named with its target; the committed receipts say "compiled, not run" for
every arch without a device here.  The gate itself (every plan, four archs) runs in .ci/run."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tools import compile_receipts as tool

pytestmark = pytest.mark.cpu
REPO = pathlib.Path(__file__).resolve().parent.parent.parent
PLAN = "BLOCK=64 warps=4 stages=3 sig=0123456789"
RECEIPT = {"registers": 40, "spill_bytes": 0, "shared_bytes": 1024, "cubin_sha256": "a" * 64, "reached_by": "toy"}


def committed(**change):
    return {"sm_100a": {"kernels": {"ops.toy._kernel": {PLAN: {**RECEIPT, **change}}}}}


def fresh(**change):
    return {"sm_100a": {"ops.toy._kernel": {PLAN: {**RECEIPT, **change}}}}


def test_the_same_compile_passes():
    assert tool.judge(fresh(), committed(), same_toolchain=True) == []


@pytest.mark.parametrize("change, same_toolchain, expected", [
    ({"spill_bytes": 96, "registers": 255}, False, "spills 96 bytes, its receipt 0 (255 registers)"),
    ({"shared_bytes": 240000}, False, "240000 bytes of shared memory, above the 232448 a block may take"),
    ({"cubin_sha256": "b" * 64, "registers": 48}, True, "another cubin than its receipt (40 -> 48 registers"),
])
def test_a_finding_names_kernel_plan_arch_and_the_numbers(change, same_toolchain, expected):
    findings = tool.judge(fresh(**change), committed(), same_toolchain)
    assert len(findings) == 1 and expected in findings[0], findings
    assert findings[0].startswith(f"ops.toy._kernel [{PLAN}] on sm_100a: "), findings


def test_another_toolchain_is_held_to_spills_and_shared_memory_only():
    assert tool.judge(fresh(cubin_sha256="b" * 64), committed(), same_toolchain=False) == []


def test_new_and_vanished_plans_make_the_receipts_stale():
    assert "a plan with no receipt" in tool.judge(fresh(), {}, same_toolchain=True)[0]
    vanished = tool.judge({"sm_100a": {}}, committed(), same_toolchain=True)
    assert len(vanished) == 1 and "a receipt no launch reaches any more" in vanished[0], vanished
    spilling_new = tool.judge(fresh(spill_bytes=8), {}, same_toolchain=False)
    assert len(spilling_new) == 1 and "spills 8 bytes, its receipt 0" in spilling_new[0], spilling_new


def test_a_kernel_that_does_not_compile_is_named_with_its_target(tmp_path):
    """A toy kernel whose tl.dot operands disagree, launched through the recorder and compiled for sm_90a."""
    (tmp_path / "toy_kernels.py").write_text(textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def _mismatched_dot(x_ptr, BLOCK: tl.constexpr):
            a = tl.load(x_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])
            b = tl.load(x_ptr + tl.arange(0, BLOCK * 2)[:, None] + tl.arange(0, BLOCK)[None, :])
            tl.store(x_ptr + tl.arange(0, BLOCK)[:, None] + tl.arange(0, BLOCK)[None, :], tl.dot(a, b))
    """))
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(REPO)!r}, {str(tmp_path)!r}]
        from tools import compile_receipts as tool
        tool.prepare_environment()
        import torch, toy_kernels
        launch = tool.Launch(toy_kernels._mismatched_dot, (torch.zeros(4096),), {{"BLOCK": 16}}, "toy: default")
        try:
            tool.compile_launch(launch, "sm_90a")
        except Exception as error:
            print("refused", type(error).__name__)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "refused CompilationError" in run.stdout, run.stdout + run.stderr


def test_a_bench_case_whose_host_code_reads_a_value_is_named_and_the_next_case_is_recorded(tmp_path):
    """Bench inputs are made on the meta device (shapes, no values): host code that picks its plan from a value
    (here the largest length) cannot run there, and that is a finding naming the op and the case, never another
    plan; a case whose host code reads only shapes is recorded as before."""
    (tmp_path / "toy_entries.py").write_text(textwrap.dedent("""
        import types
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def _copy(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + tl.arange(0, BLOCK)))

        def by_value(x, lengths):
            _copy[(1,)](x, BLOCK=64 if int(lengths.max()) > 100 else 32)

        def by_shape(x, lengths):
            _copy[(1,)](x, BLOCK=64 if lengths.shape[0] > 4 else 32)

        def make(device):
            generator = torch.Generator(device=device).manual_seed(0)
            return {"x": torch.randn(64, device=device, generator=generator),
                    "lengths": torch.randint(0, 200, (8,), device=device, generator=generator)}

        CASE = types.SimpleNamespace(label="toy case", make=make)
        ENTRIES = [types.SimpleNamespace(name="reads_a_value", kernel=by_value, bench=[CASE]),
                   types.SimpleNamespace(name="reads_shapes", kernel=by_shape, bench=[CASE])]
    """))
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{str(REPO)!r}, {str(tmp_path)!r}]
        from tools import compile_receipts as tool
        tool.prepare_environment()
        import toy_entries
        tool.triton_entries = lambda ops: toy_entries.ENTRIES
        failures = []
        recorded = list(tool.recorded_launches(failures=failures))
        print("failures", json.dumps(failures))
        print("recorded", json.dumps([[[launch.kwargs, launch.args[0].device.type] for launch in case]
                                      for case in recorded]))
        try:
            list(tool.recorded_launches())
        except RuntimeError as error:
            print("raised", type(error).__name__)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    failures = json.loads(lines.get("failures", "[]"))
    assert len(failures) == 1 and failures[0].startswith(
        "reads_a_value [toy case]: its bench case failed on the meta device (shapes, no values): RuntimeError"), \
        run.stdout + run.stderr
    assert json.loads(lines.get("recorded", "[]")) == [[[{"BLOCK": 64}, "meta"]]], run.stdout + run.stderr
    assert lines.get("raised") == "RuntimeError", run.stdout + run.stderr   # with nowhere to note it, its own error


def test_plans_that_differ_in_their_register_cap_alone_are_receipts_apart(tmp_path):
    """A capped plan's spills are its own: the same kernel and constexprs compiled with and without
    ``maxnreg`` get two labels (one receipt for both hid a cap's spills from the gate)."""
    (tmp_path / "toy_capped.py").write_text(textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def _scale(x_ptr, BLOCK: tl.constexpr):
            offsets = tl.arange(0, BLOCK)
            tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) * 2.0)
    """))
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(REPO)!r}, {str(tmp_path)!r}]
        from tools import compile_receipts as tool
        tool.prepare_environment()
        import torch, toy_capped
        for cap in ({{}}, {{"maxnreg": 64}}):
            launch = tool.Launch(toy_capped._scale, (torch.zeros(64),), {{"BLOCK": 64, **cap}}, "toy")
            print("label", tool.compile_launch(launch, "sm_90a")[0])
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    labels = [line.removeprefix("label ") for line in run.stdout.splitlines() if line.startswith("label ")]
    assert len(labels) == 2 and labels[0] != labels[1], run.stdout + run.stderr
    assert "maxnreg" not in labels[0] and " maxnreg=64 " in labels[1], labels


@pytest.mark.parametrize("target", sorted(tool.TARGETS))
def test_the_committed_receipts_cover_every_kernel_and_say_what_was_run(target):
    receipts = json.loads((REPO / "docs" / "receipts" / f"{target}.json").read_text())
    assert receipts["status"] == ("compiled" if target == "sm_90a" else "compiled, not run")
    assert receipts["kernels"] and all(plans for plans in receipts["kernels"].values())
