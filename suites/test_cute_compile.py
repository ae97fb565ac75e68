"""The CuTe DSL compile gate: every reachable launch plan of every CuTe DSL kernel in the catalog
compiles, for every architecture its entry claims — on the CPU, with no GPU (``cute.compile`` lowers to
a cubin without one).  The CPU suites cannot run CuTe kernels (their ``test_cell`` tests carry the GPU
markers their entries claim and are skipped here with that reason); this gate is what CI checks of them.

A CuTe DSL kernel module offers: ``reachable_plans()`` (every plan its ``launch_plan`` can return: frozen
dataclasses of named, compiled-in options), ``ARCH_TARGETS`` (claimed arch -> compile target) and
``compiled(plan, target)``.  A failure names the plan and the target.  A block size left to run time
is a failure too: the compiler can then neither note the thread count (``nvvm.reqntid``) nor bound a
register budget by it, and the first H200 run of such a kernel never returned
(docs/ops/rms_norm_gated.md).  A (kernel, target) whose every plan another test compiles under the same rule
(``suites/cute_compiles.py``: the sm90 hang check) is compiled there, not here as well.
"""
from __future__ import annotations

import dataclasses
import importlib
import pathlib

import pytest

from ops.catalog import entries, kernels
from ops.cute_dsl import cute, cutlass
from suites.cute_compiles import COMPILED_BY, compile_rule

from cutlass.cute.runtime import make_ptr  # noqa: E402,I001 - after ops.cute_dsl, which puts it on the path

pytestmark = pytest.mark.cpu


def cute_kernel_modules() -> list:
    return [importlib.import_module(entry.kernel.__module__)
            for name in entries() for entry in kernels(name) if entry.backend == "cute"]


def compile_cases(module) -> list:
    """(plan, arch target) for every compiled variant the module can reach."""
    return [(plan, target) for plan in dict.fromkeys(module.reachable_plans())
            for target in sorted(module.ARCH_TARGETS.values())]


def compile_failure(module, plan, target) -> str | None:
    """None when the kernel of ``plan`` compiles for ``target``; else a line naming the plan."""
    try:
        with compile_rule():
            module.compiled(plan, target)
    except Exception as error:  # noqa: BLE001 - any failure to compile is the finding
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"{module.__name__}: {plan} does not compile for {target}: {type(error).__name__}: {first_line}"
    return None


CASES = [pytest.param(module, plan, target, id=f"{pathlib.Path(module.__file__).stem}-{target}-"
                      + "-".join(map(str, dataclasses.astuple(plan))))
         for module in cute_kernel_modules() for plan, target in compile_cases(module)
         if (module.__name__, target) not in COMPILED_BY]   # compiled by the test named there


def test_the_catalog_has_cute_kernels_to_gate():
    assert CASES, "no CuTe DSL kernel in the catalog: the gate below would pass on nothing"


@pytest.mark.parametrize("module_name, target", sorted(COMPILED_BY))
def test_a_target_left_to_another_test_is_compiled_there_for_every_plan_under_the_rule(module_name, target):
    """The test COMPILED_BY names for a (module, target) the gate leaves out: parametrized by every reachable plan
    of the module, and compiling for that target under compile_rule (its code names both)."""
    module = importlib.import_module(module_name)
    assert module in cute_kernel_modules() and target in module.ARCH_TARGETS.values(), (module_name, target)
    path, name = COMPILED_BY[module_name, target].split("::")
    test = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)
    plans = [mark.args[1] for mark in test.pytestmark if mark.name == "parametrize" and mark.args[0] == "plan"]
    assert len(plans) == 1 and set(plans[0]) == set(module.reachable_plans()), COMPILED_BY[module_name, target]
    assert target in test.__code__.co_consts and "compile_rule" in test.__code__.co_names, COMPILED_BY[module_name,
                                                                                                        target]


@pytest.mark.parametrize("module, plan, target", CASES)
def test_every_reachable_plan_compiles(module, plan, target):
    failure = compile_failure(module, plan, target)
    assert failure is None, failure


# -- the gate's negative controls: a kernel module with plans that must fail --------------------
TOY_FLAWS = ("none", "does_not_compile", "block_size_at_run_time")


@cute.kernel
def _toy_double(pointer: cute.Pointer, flaw: cutlass.Constexpr):
    values = cute.make_tensor(pointer, cute.make_layout((1,)))
    if cutlass.const_expr(flaw == "does_not_compile"):
        values[0] = values[0] * 2.0 + "not a number"
    else:
        values[0] = values[0] * 2.0


@cute.jit
def _toy_launch(pointer: cute.Pointer, threads: cutlass.Int32, flaw: cutlass.Constexpr):
    block = threads if cutlass.const_expr(flaw == "block_size_at_run_time") else 32
    _toy_double(pointer, flaw).launch(grid=[1, 1, 1], block=[block, 1, 1])


@dataclasses.dataclass(frozen=True)
class _ToyPlan:
    flaw: str


class _ToyKernels:
    """A CuTe DSL kernel module in miniature: doubles a value; one plan adds a string, one takes its block
    size at run time."""

    ARCH_TARGETS = {"sm90": "sm_90a"}

    @staticmethod
    def reachable_plans():
        return [_ToyPlan(flaw) for flaw in TOY_FLAWS]

    @staticmethod
    def compiled(plan, target):
        pointer = make_ptr(cutlass.Float32, 0, cute.AddressSpace.gmem, assumed_align=4)
        return cute.compile(_toy_launch, pointer, cutlass.Int32(32), plan.flaw, options=f"--gpu-arch {target}")


def test_the_gate_names_the_plans_that_must_fail_and_passes_the_one_that_does_not():
    failures = dict(zip(TOY_FLAWS, (compile_failure(_ToyKernels, plan, target)
                                    for plan, target in compile_cases(_ToyKernels))))
    assert failures["none"] is None, failures
    for flaw in TOY_FLAWS[1:]:
        assert failures[flaw] is not None and f"_ToyPlan(flaw='{flaw}')" in failures[flaw], failures
        assert "sm_90a" in failures[flaw], failures
    assert "Dynamic variable in block size" in failures["block_size_at_run_time"], failures
