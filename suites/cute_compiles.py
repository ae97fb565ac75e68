"""The CuTe DSL compile gate's rule for a compiled plan, and the compiles it leaves to another test.

``suites/test_cute_compile.py`` compiles every reachable launch plan of every CuTe DSL kernel for every arch
its entry claims, under :func:`compile_rule`.  A test that compiles every plan of a kernel for one target
anyway, under the same rule, to judge the compiled code further (the sm_90a PTX's hang sources), makes the
gate's compiles of that target: listed in :data:`COMPILED_BY`, the gate leaves them to it rather than compile
each plan twice (72 compiles, a fifth of the gate's time: docs/ci.md, 2026-12-06).  The gate checks that each
such test is parametrized by every reachable plan and compiles for its target under this rule.
"""
from __future__ import annotations

import contextlib
import warnings

# (kernel module, arch target) -> the test, parametrized by ``plan``, that compiles each reachable plan of the
# module for that target under compile_rule()
COMPILED_BY = {
    ("ops.norm.rms_norm_gated_cute", "sm_90a"):
        "suites/norm/test_rms_norm_gated_cute.py::test_every_sm90_plan_is_loop_free_with_barriers_every_thread_reaches",
}


@contextlib.contextmanager
def compile_rule():
    """A block size left to run time, of which the DSL only warns, fails the compile (test_cute_compile.py's
    docstring says why)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Dynamic variable in block size")
        yield
