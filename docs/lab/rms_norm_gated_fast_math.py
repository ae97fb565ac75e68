"""Issue 28 item 4: ``rms_norm_gated``'s fast-math plan (``LaunchPlan.fast_math``), on a machine with no GPU.

``sass``: the bench case's default plan ([8192, 4096], group 128, norm then gate, amax; 8 warps, 2 persistent
programs an SM, next row prefetched) and the same plan with fast math (and with fused multiply-adds too), recorded
from ``bench_variants`` as ``tools/bench --variants`` launches them and compiled for ``GPUTarget("cuda", 90, 32)``
with ``tools/compile_receipts``' stand-in driver: registers, spills, the persistent row loop's SASS instructions
(``nvfp4kv_sass.main_loop``: the backward branch of widest span) and its common path, the loop less the regions
predicated branches skip (the slow paths of ``div_rn`` and ``sqrt_rn``, taken only by operands near the ends of
the range), per element (16 a thread).

``band``: what the GPU's approximations can do to ``y``, which the Triton interpreter cannot show (it computes
``exp2``, ``rcp`` and ``rsqrt`` in float64 and rounds once).  The fast path is emulated step by step in torch
fp32, as the kernel computes it, with each approximate result moved by its error bound in the worst direction:
all 8 sign choices of (ex2, rcp, rsqrt) are run and each element keeps its worst; flush-to-zero as the ``.ftz``
instructions do; unfused, and fused (the exponent's multiply-add and each group's sum of squares rounded once).
Inputs: every value mode of the strategy (normal, non_finite, group_scales, zero_groups, subnormal, large,
gate_extremes) at the first six corner shapes of every cell, each eps of the strategy and 0, each gate order the
cell has; and hand-made rows (every finite bf16 z, z where exp(-z) nears fp32's limit with weights near
bf16's, eps 0 with zero and subnormal mean squares).  Each is judged by the band oracle against float64 truth,
with E from the stock op and every legitimate order, as certification judges it.  ``--scale`` multiplies the
bounds (the margin: how far they could be off before y leaves the band).

    python3 docs/lab/rms_norm_gated_fast_math.py sass
    python3 docs/lab/rms_norm_gated_fast_math.py band [--scale 1 --scale 64 ...]
"""
from __future__ import annotations

import argparse
import collections
import itertools
import math
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "docs" / "lab")]

# Error bounds of the approximations the fast plan compiles to, in fp32 ulp of the result (the PTX ISA's figures,
# quoted from memory; --scale shows how far off they may be): ex2.approx.ftz.f32 2 ulp (its input is rounded once more: z * -log2(e) - 2, which the
# emulation computes in fp32 as the kernel does); rcp.approx.ftz.f32 1 ulp; rsqrt.approx.ftz.f32 about 1 ulp
# (taken as 2 here).
ULP_BOUNDS = {"ex2": 2, "rcp": 1, "rsqrt": 2}
LOG2E = 1.4426950408889634
TINY = 2.0 ** -126
BENCH_LABELS = {
    "default (exact)": "default",
    "fast math": "8 warps, 2 persistent programs/SM, next row prefetched, fast math (numerics differ)",
    "fast math, fp fusion": "8 warps, 2 persistent programs/SM, next row prefetched, fast math, fp fusion (numerics differ)",
}


# -- sass -------------------------------------------------------------------------------------------
def sass_counts() -> None:
    from tools.compile_receipts import prepare_environment

    prepare_environment()
    import nvfp4kv_sass   # noqa: E402 - after the environment is set: main_loop and opcode
    from tools.compile_receipts import compile_launch, recorded_launches

    launches = {launch.origin.rsplit(": ", 1)[1]: launch
                for case in recorded_launches(["rms_norm_gated"], variants=True) for launch in case}
    for name, label in BENCH_LABELS.items():
        launch = launches[label]
        plan, receipt = compile_launch(launch, "sm_90a")
        compiled = launch.kernel.run(*launch.args, grid=(1,), warmup=True, **launch.kwargs)
        body, skipped = nvfp4kv_sass.main_loop(compiled.asm["sass"])
        predicated = [inside for inside, branch in skipped if branch.startswith("@")]
        common = len(body) - sum(map(len, predicated))
        per_thread = 4096 / (compiled.metadata.num_warps * 32)
        print(f"{name}: {plan}")
        print(f"  registers {receipt['registers']}, spill bytes {receipt['spill_bytes']}; row loop {len(body)} "
              f"instructions ({len(body) / per_thread:.2f} an element), {len(predicated)} slow paths skipped by "
              f"predicated branches ({sum(map(len, predicated))} instructions); common path {common} "
              f"({common / per_thread:.2f} an element)")
        mufu = collections.Counter(word for instruction in body for word in instruction.split() if word.startswith("MUFU."))
        print(f"  most frequent: {dict(collections.Counter(map(nvfp4kv_sass.opcode, body)).most_common(8))}; {dict(mufu)}")


# -- band -------------------------------------------------------------------------------------------
def _move(value, ulps: int, ftz: bool):
    """``value`` (fp32) moved ``ulps`` fp32 ulp away from zero (negative: toward it, stopping at zero, and at the
    largest finite value the other way); 0, inf and NaN stay; a subnormal result flushes to zero when ``ftz``."""
    import torch

    bits = value.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    sign, magnitude = bits & 0x80000000, bits & 0x7FFFFFFF
    moving = value.isfinite() & (value != 0)
    magnitude = torch.where(moving, (magnitude + ulps).clamp(0, 0x7F7FFFFF), magnitude)
    moved = (sign | magnitude).to(torch.uint32).view(torch.int32).view(torch.float32)
    if ftz:
        moved = torch.where(moved.abs() < TINY, torch.zeros_like(moved), moved)
    return moved


def _approximate(function, argument, ulps: int, ftz: bool):
    """An approximation within ``|ulps|`` of ``function`` (float64, rounded once to fp32), its error ``ulps``;
    a ``.ftz`` instruction reads a subnormal argument as zero."""
    import torch

    if ftz:
        argument = torch.where(argument.abs() < TINY, torch.zeros_like(argument), argument)
    return _move(function(argument.double()).float(), ulps, ftz)


def fast_y(x, z, weight, eps, group_size, norm_before_gate, amax=None, *, signs, scale: float, fused: bool = False):
    """The fast plan's y as the kernel computes it (``_silu``, ``_rsqrt``, the rest as the exact plan), each
    approximation ``sign * scale * bound`` ulp off; fp32 throughout, rounded once to bf16."""
    import torch

    ex2_ulps, rcp_ulps, rsqrt_ulps = (int(sign * round(scale * ULP_BOUNDS[name]))
                                      for sign, name in zip(signs, ("ex2", "rcp", "rsqrt")))
    tokens, width = x.shape
    x32 = x.float()
    u = x32
    gate = None
    if z is not None:
        z32 = z.float()
        log2e = torch.tensor(-LOG2E, dtype=torch.float32)
        exponent = ((z32.double() * log2e.double() - 2.0).float() if fused
                    else z32 * log2e - torch.tensor(2.0))
        quarter = torch.tensor(0.25) + _approximate(torch.exp2, exponent, ex2_ulps, ftz=True)
        reciprocal = _approximate(lambda v: 1.0 / v, quarter, rcp_ulps, ftz=True)
        gate = (z32 * 0.25) * reciprocal
        if not norm_before_gate:
            u = x32 * gate
    groups = u.reshape(tokens, width // group_size, group_size)
    sums = (groups.double() * groups.double()).sum(-1) if fused else (groups * groups).sum(-1)
    sums = sums.float()
    mean = sums * (1.0 / group_size) if group_size & (group_size - 1) == 0 else sums / group_size
    value = mean + torch.tensor(eps, dtype=torch.float32)
    lifted = value < TINY
    scaled = torch.where(lifted, value * 16777216.0, value)
    rstd = _approximate(torch.rsqrt, scaled, rsqrt_ulps, ftz=True) * torch.where(lifted, 4096.0, 1.0)
    y = ((groups * rstd[..., None]).reshape(tokens, width) * weight.float())
    if gate is not None and norm_before_gate:
        y = y * gate
    return y.to(torch.bfloat16)


def _recipes():
    """(name, recipe) over every cell's corner shapes x value modes x eps (the strategy's and 0) x gates."""
    import torch

    from ops.norm.rms_norm_gated import ENTRY
    from references.norm import rms_norm_gated_strategy as strategy

    device = torch.device("cpu")
    for cell in ENTRY.cells:
        for corner in strategy.corners(cell, device)[:6]:
            if corner["T"] == 0:
                continue
            for mode, eps, gate in itertools.product(strategy.MODES, (*strategy.EPS, 0.0), cell.bounds["gate"].choices):
                recipe = {**corner, "values": mode, "eps": eps, "gate": gate, "amax": "none"}
                yield f"{cell.id} H={corner['H']} g={corner['group_size']} {mode} eps={eps} {gate}", recipe


def _hand_made():
    """Rows the strategy does not draw, where an approximation's special cases would show."""
    import torch

    bf16 = torch.bfloat16
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(bf16)
    finite_z = every[every.isfinite()]
    width = 128
    finite_z = finite_z[: finite_z.numel() // width * width].reshape(-1, width)
    ones = torch.ones(width, dtype=bf16)
    rows = finite_z.shape[0]
    yield "every finite bf16 z, x = 1, norm then gate", dict(
        x=torch.ones(rows, width, dtype=bf16), z=finite_z, weight=ones, eps=1e-6, group_size=width, norm_before_gate=True)
    yield "every finite bf16 z, x = 1, gate then norm", dict(
        x=torch.ones(rows, width, dtype=bf16), z=finite_z, weight=ones, eps=1e-6, group_size=width, norm_before_gate=False)
    # exp(-z) within a few binades of fp32's limit: silu ~1e-36 (1e-42 past the limit), scaled back up by
    # weights near bf16's largest (norm then gate) or by the norm itself (gate then norm)
    near = torch.linspace(-104.0, -80.0, width).to(bf16).repeat(4, 1)
    big = torch.full((width,), 3.0e38, dtype=bf16)
    yield "z in [-104, -80], weight 3e38, norm then gate", dict(
        x=torch.ones(4, width, dtype=bf16), z=near, weight=big, eps=1e-6, group_size=32, norm_before_gate=True)
    yield "z in [-104, -80], gate then norm, eps 0", dict(
        x=torch.ones(4, width, dtype=bf16), z=near, weight=ones, eps=0.0, group_size=32, norm_before_gate=False)
    # eps 0: an all-zero group (rstd inf, y NaN as the truth), and mean squares that are subnormal in fp32
    tiny_x = torch.tensor([0.0, 2.0 ** -64, 2.0 ** -70, 2.0 ** -75]).repeat_interleave(width // 4).to(bf16)
    yield "eps 0: zero group, subnormal mean squares", dict(
        x=tiny_x.repeat(2, 1), z=torch.randn(2, width).to(bf16), weight=ones, eps=0.0, group_size=width // 4,
        norm_before_gate=True)
    yield "eps 0, no gate: subnormal mean squares", dict(
        x=tiny_x.repeat(2, 1), z=None, weight=ones, eps=0.0, group_size=width // 4, norm_before_gate=True)


def _non_finite(y):
    """Each element's class: 0 finite, 1 NaN, 2 +inf, 3 -inf."""
    return y.isnan().int() + 2 * (y == float("inf")).int() + 3 * (y == float("-inf")).int()


def band_study(scales: list[float]) -> int:
    """Each input judged twice by the band oracle: the fp32 reference (standing for the exact plan) and the fast
    path at its worst.  Where the reference passes, the fast path must pass; where it fails (inputs no fp32
    implementation meets: eps 0 under subnormal x, sums past fp32's limit), the fast path must fail alike,
    NaN and infinities where the reference has them."""
    import torch

    from oracles.band import band_reports
    from references.norm import rms_norm_gated as contract
    from references.norm import rms_norm_gated_strategy as strategy

    cases = [(name, strategy.build(recipe, "cpu")) for name, recipe in _recipes()]
    cases += list(_hand_made())
    print(f"{len(cases)} inputs; bounds in ulp {ULP_BOUNDS}")
    findings = 0
    for scale in scales:
        worst, least_room, reference_worst, beyond_fp32, new_failures, other_non_finite = 0.0, math.inf, 0.0, 0, [], []
        for name, arguments in cases:
            kwargs = {**arguments, "amax": None}   # amax is not the band's (its own exact property)
            truth, stock = contract.truth(**kwargs), contract.stock(**kwargs)
            orders = {order: call(**kwargs) for order, call in contract.LEGITIMATE_ORDERS.items()}
            reference = contract.rms_norm_gated(**kwargs)
            exact = band_reports(reference, stock, truth, orders)[0]
            # each element's worst over the 8 sign choices is the worst output's error element by element
            outputs = [(fused, fast_y(**kwargs, signs=signs, scale=scale, fused=fused))
                       for fused in (False, True) for signs in itertools.product((-1, 1), repeat=3)]
            reports = [(fused, y, band_reports(y, stock, truth, orders)[0]) for fused, y in outputs]
            if not exact.passed:
                beyond_fp32 += 1
                if any(not torch.equal(_non_finite(y), _non_finite(reference)) for _, y, _ in reports):
                    other_non_finite.append(name)
                continue
            reference_worst = max(reference_worst, exact.kernel_error_ulp)
            for fused, y, report in reports:
                worst = max(worst, report.kernel_error_ulp)
                least_room = min(least_room, report.allowed_error_ulp - report.kernel_error_ulp)
                if not report.passed:
                    new_failures.append(f"{name}{', fused' if fused else ''}: {report.kernel_error_ulp:.3g} ULP "
                                        f"(band {report.allowed_error_ulp:.3g}; non-finite {report.kernel_non_finite}, "
                                        f"missed {report.kernel_missed_non_finite})")
        print(f"scale {scale:g} (ex2 {scale * ULP_BOUNDS['ex2']:g}, rcp {scale * ULP_BOUNDS['rcp']:g}, rsqrt "
              f"{scale * ULP_BOUNDS['rsqrt']:g} ulp): {len(cases) - beyond_fp32} inputs the fp32 reference meets "
              f"(its worst {reference_worst:.4f} ULP): fast path's worst {worst:.4f} ULP, least room under the band "
              f"{least_room:.4f} ULP, {len(set(new_failures))} outside it; {beyond_fp32} inputs the reference does not "
              f"meet (beyond fp32), {len(other_non_finite)} with another NaN/inf pattern than the reference's")
        for line in sorted(set(new_failures))[:10] + [f"another NaN/inf pattern: {name}" for name in other_non_finite[:10]]:
            print(f"  FAIL {line}")
        findings += bool(new_failures or other_non_finite)
    return 1 if findings else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("sass", help="registers and row-loop SASS of the bench plan, exact and fast")
    band = commands.add_parser("band", help="the fast path's worst-case error against the band")
    band.add_argument("--scale", type=float, action="append", help="multiply the ulp bounds (repeatable; default 1)")
    args = parser.parse_args()
    if args.command == "sass":
        sass_counts()
        return 0
    return band_study(args.scale or [1.0])


if __name__ == "__main__":
    sys.exit(main())
