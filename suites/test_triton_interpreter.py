"""The Triton interpreter computes bf16 and fp8 as the GPU does (``oracles/triton_interpreter.py``), value by
value: every bf16 bit pattern in one launch per property, against torch and the GPU's documented rules.

The same kernels run on a GPU, where they check that those rules are the GPU's: satfinite fp8 casts,
canonical NaN, the six-decimal bf16 constants of Triton's builder, libdevice's error bounds.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import libdevice as cuda_libdevice
from triton.language.extra.libdevice import rsqrt as bound_rsqrt   # liger's import, bound at import time

from references.formats.bf16 import round_float64_to_bf16
from suites.certification import machine_device

pytestmark = [pytest.mark.cpu, pytest.mark.sm90, pytest.mark.sm100, pytest.mark.sm103, pytest.mark.sm107]
DEVICE = machine_device()
EVERY = 2**16
BF16_NAN = 0x7FFF      # PTX's canonical NaN, what cvt.rn.bf16.f32 writes for any NaN
FP8_NAN = 0x7F
interpreted_only = pytest.mark.skipif(DEVICE.type != "cpu", reason="a property of the CPU interpreter")


def every_bf16() -> torch.Tensor:
    return torch.arange(-2**15, 2**15, dtype=torch.int32, device=DEVICE).to(torch.int16).view(torch.bfloat16)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[tensor.element_size()]).long()


def assert_same_bits(got: torch.Tensor, expected: torch.Tensor, what: str, where=None) -> None:
    where = torch.ones_like(got, dtype=torch.bool) if where is None else where
    differ = (bits(got) != bits(expected)) & where
    if differ.any():
        first = differ.nonzero()[0].item()
        raise AssertionError(f"{what}: {int(differ.sum())} of {int(where.sum())} differ; first at {first}: "
                             f"got {got[first].item()!r} (0x{bits(got)[first].item() & 0xFFFFFFFF:x}), expected "
                             f"{expected[first].item()!r} (0x{bits(expected)[first].item() & 0xFFFFFFFF:x})")


@triton.jit
def _widen(x_ptr, out_ptr, N: tl.constexpr):
    at = tl.arange(0, N)
    tl.store(out_ptr + at, tl.load(x_ptr + at).to(tl.float32))


@triton.jit
def _narrow(x_ptr, out_ptr, N: tl.constexpr):
    at = tl.arange(0, N)
    tl.store(out_ptr + at, tl.load(x_ptr + at).to(out_ptr.dtype.element_ty))


def test_every_bf16_widens_exactly():
    """bf16 -> fp32 by ``.to``: subnormals (1e-39 read as 4.4e-39 before), NaN payloads, -0.0 kept."""
    every = every_bf16()
    out = torch.empty(EVERY, dtype=torch.float32, device=DEVICE)
    _widen[(1,)](every, out, N=EVERY)
    assert_same_bits(out, every.float(), "bf16 -> fp32")


def _narrowing_inputs() -> torch.Tensor:
    """Random fp32 bits, every bf16 midpoint (ties to even) and the carries into the exponent and into inf."""
    generator = torch.Generator().manual_seed(0)
    random = torch.randint(-2**31, 2**31, (EVERY,), generator=generator, dtype=torch.int64)
    midpoints = (torch.arange(EVERY, dtype=torch.int64) << 16) | 0x8000
    edges = torch.tensor([0x7F7FFFFF, 0x7F7F8000, 0xFF7F8000, 0x3F80FFFF, 0x00008000, 0x00018000, 0x7F800000,
                          0xFFFFFFFF, 0x80000000, 0x00000001])
    values = torch.cat([random, midpoints, edges]).to(torch.int32).view(torch.float32)
    return values[:2**17].to(DEVICE)


def test_fp32_narrows_to_bf16_as_the_gpu_rounds():
    """fp32 -> bf16 by ``.to``: to nearest even as torch (the interpreter truncated), NaN canonical."""
    values = _narrowing_inputs()
    out = torch.empty(values.shape, dtype=torch.bfloat16, device=DEVICE)
    _narrow[(1,)](values, out, N=values.numel())
    nan = values.isnan()
    assert_same_bits(out, values.bfloat16(), "fp32 -> bf16", ~nan)
    assert (bits(out)[nan] == BF16_NAN).all()


def test_fp64_narrows_to_bf16_once():
    """fp64 -> bf16 rounds once (ml_dtypes and torch round through fp32: 1 + 2**-8 + 2**-40 becomes 1.0)."""
    generator = torch.Generator().manual_seed(1)
    values = torch.randn(2**16, generator=generator, dtype=torch.float64) * \
        torch.exp2(torch.randint(-140, 128, (2**16,), generator=generator).double())
    values[:2] = torch.tensor([1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40)], dtype=torch.float64)
    out = torch.empty(values.shape, dtype=torch.bfloat16, device=DEVICE)
    _narrow[(1,)](values.to(DEVICE), out, N=values.numel())
    assert_same_bits(out.cpu(), round_float64_to_bf16(values).bfloat16(), "fp64 -> bf16")
    assert out[0].item() == 1.0078125


@triton.jit
def _bf16_pairs(a_ptr, b_ptr, sum_ptr, difference_ptr, product_ptr, larger_ptr, smaller_ptr, less_ptr,
                equal_ptr, N: tl.constexpr):
    at = tl.arange(0, N)
    a = tl.load(a_ptr + at)
    b = tl.load(b_ptr + at)
    tl.store(sum_ptr + at, a + b)
    tl.store(difference_ptr + at, a - b)
    tl.store(product_ptr + at, a * b)
    tl.store(larger_ptr + at, tl.maximum(a, b))
    tl.store(smaller_ptr + at, tl.minimum(a, b))
    tl.store(less_ptr + at, (a < b).to(tl.int8))
    tl.store(equal_ptr + at, (a == b).to(tl.int8))


def _number_beside_nan(extreme, a, b):
    """PTX max/min: the other operand beside a NaN, signalling ones included (torch's and numpy's fmax
    give NaN beside a signalling NaN, and torch's bf16 fmax beside a negative one)."""
    return torch.where(a.isnan(), b, torch.where(b.isnan(), a, extreme(a, b)))


@pytest.mark.parametrize("partner", ["permuted", "near_one"])
def test_bf16_arithmetic_on_every_pattern(partner):
    """a + b, a - b, a * b kept in bf16 (Triton's promotion: bf16 op bf16 is bf16), rounded once as torch
    rounds; max/min returning the number beside a NaN (``propagate_nan`` NONE); comparisons on values, not
    bit patterns.  ``near_one`` pairs every value with ones and their neighbours (1e28 came back before)."""
    a = every_bf16()
    if partner == "permuted":
        b = a[torch.randperm(EVERY, generator=torch.Generator().manual_seed(2)).to(DEVICE)]
    else:
        b = torch.tensor([1.0, 1.0078125, 0.99609375, -1.0], dtype=torch.bfloat16, device=DEVICE).repeat(EVERY // 4)
    outs = [torch.empty(EVERY, dtype=torch.bfloat16, device=DEVICE) for _ in range(5)]
    less, equal = (torch.empty(EVERY, dtype=torch.int8, device=DEVICE) for _ in range(2))
    _bf16_pairs[(1,)](a, b, *outs, less, equal, N=EVERY)
    wide_a, wide_b = a.float(), b.float()
    expected = [(wide_a + wide_b).bfloat16(), (wide_a - wide_b).bfloat16(), (wide_a * wide_b).bfloat16(),
                _number_beside_nan(torch.maximum, a, b), _number_beside_nan(torch.minimum, a, b)]
    for name, got, want in zip(["a + b", "a - b", "a * b", "maximum", "minimum"], outs, expected):
        assert torch.equal(got.isnan(), want.isnan()), f"{name}: NaN positions differ"
        # the sign of max/min of two zeros is not specified by PTX: compared by value there
        zeros = (a == 0) & (b == 0) if name in ("maximum", "minimum") else torch.zeros_like(a, dtype=torch.bool)
        assert_same_bits(got, want, name, ~want.isnan() & ~zeros)
        assert (got[zeros] == 0).all()
    assert torch.equal(less.bool(), wide_a < wide_b) and torch.equal(equal.bool(), wide_a == wide_b)


@triton.jit
def _bf16_with_python_floats(a_ptr, tenth_ptr, near_tie_ptr, tiny_ptr, N: tl.constexpr):
    at = tl.arange(0, N)
    a = tl.load(a_ptr + at)
    tl.store(tenth_ptr + at, a * 0.1)
    tl.store(near_tie_ptr + at, a * 1.0039062500000009)   # 1 + 2**-8 + 2**-50, just past a bf16 tie
    tl.store(tiny_ptr + at, a + 1e-7)


def test_bf16_with_python_floats():
    """A Python float beside a bf16 tensor is a bf16 constant (the interpreter raised: no ``get_bf16``), made
    as Triton's builder makes it: narrowed to fp32, printed with six decimals, rounded to bf16.  So 0.1 is
    0.10009765625; 1 + 2**-8 + 2**-50 prints "1.003906", which is 1.0 (not 1.0078125, its nearest bf16);
    and 1e-7 prints "0.000000": a + 1e-7 is a + 0."""
    a = every_bf16()
    outs = [torch.empty(EVERY, dtype=torch.bfloat16, device=DEVICE) for _ in range(3)]
    _bf16_with_python_floats[(1,)](a, *outs, N=EVERY)
    for name, got, constant, op in [("a * 0.1", outs[0], 0.10009765625, torch.mul),
                                    ("a * 1.0039062500000009", outs[1], 1.0, torch.mul),
                                    ("a + 1e-7", outs[2], 0.0, torch.add)]:
        want = op(a.float(), constant).bfloat16()
        assert torch.equal(got.isnan(), want.isnan()), f"{name}: NaN positions differ"
        assert_same_bits(got, want, name, ~want.isnan())


def test_bf16_constants_are_those_of_tritons_own_builder():
    """The rule above against the GPU compiler's C++ builder itself (it runs without a GPU): 4000 doubles
    over every binade, the six-decimal cut (1e-7, 5e-7, 4.9999e-7), ties, overflow, subnormals."""
    import re
    from triton._C.libtriton import ir
    from oracles.triton_interpreter import _bf16_of_decimal

    generator = torch.Generator().manual_seed(3)
    values = (torch.randn(4000, generator=generator, dtype=torch.float64) *
              torch.exp2(torch.randint(-40, 128, (4000,), generator=generator).double())).tolist()
    values += [1e-7, 5e-7, 4.9999e-7, 5.0000001e-7, 1.00390625, 1.0039062500000009, 3.3961e38, 3.4e38, -2.5]
    context = ir.context()
    ir.load_dialects(context)
    builder = ir.builder(context)
    module = builder.create_module()
    function = builder.get_or_insert_function(module, "constants", builder.get_function_ty([], []), "public", False)
    module.push_back(function)
    builder.set_insertion_point_to_start(function.add_entry_block())
    for value in values:
        builder.get_bf16(value)
    builder.ret([])
    printed = re.findall(r"arith\.constant (\S+) : bf16", str(module))
    # MLIR prints a bf16 constant as a decimal, or as its bits (0x7F80) where the decimal would not read back
    theirs = torch.tensor([_bf16_bits_value(int(text, 16)) if text.startswith("0x") else float(text)
                           for text in printed], dtype=torch.float64).bfloat16()
    ours = torch.tensor([_bf16_of_decimal("%f" % float(torch.tensor(v, dtype=torch.float32))) for v in values],
                        dtype=torch.float64).bfloat16()
    assert len(printed) == len(values)
    assert_same_bits(ours, theirs, "bf16 constants")


def _bf16_bits_value(bits: int) -> float:
    return torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item()


FP8 = {"e4m3": (tl.float8e4nv, torch.float8_e4m3fn, 448.0), "e5m2": (tl.float8e5, torch.float8_e5m2, 57344.0)}


@pytest.mark.parametrize("format_name", sorted(FP8))
def test_fp8_casts_both_ways(format_name):
    """fp32 -> fp8 by ``.to`` is ``cvt.rn.satfinite``: to nearest even, beyond the largest finite value (inf
    too) that value, NaN 0x7F; torch's cast gives NaN (e4m3) or inf (e5m2) there, so it is compared after
    a clamp.  fp8 -> fp32 exactly, every byte.  Inputs: every bf16 (every binade, subnormals, ties of the
    coarser grid) and random fp32 bits."""
    _, torch_dtype, largest = FP8[format_name]
    values = torch.cat([every_bf16().float(), _narrowing_inputs()[:EVERY]])
    out = torch.empty(values.shape, dtype=torch_dtype, device=DEVICE)
    _narrow[(1,)](values, out, N=values.numel())
    nan = values.isnan()
    assert_same_bits(out, values.clamp(-largest, largest).to(torch_dtype), f"fp32 -> {format_name}", ~nan)
    assert (bits(out)[nan] & 0x7F == FP8_NAN).all()
    every_byte = torch.arange(256, dtype=torch.int32, device=DEVICE).to(torch.uint8).view(torch_dtype)
    widened = torch.empty(256, dtype=torch.float32, device=DEVICE)
    _widen[(1,)](every_byte, widened, N=256)
    assert torch.equal(widened.isnan(), every_byte.float().isnan())
    assert_same_bits(widened, every_byte.float(), f"{format_name} -> fp32", ~widened.isnan())


@triton.jit
def _fma(a_ptr, b_ptr, c_ptr, out_ptr, N: tl.constexpr):
    at = tl.arange(0, N)
    tl.store(out_ptr + at, tl.fma(tl.load(a_ptr + at), tl.load(b_ptr + at), tl.load(c_ptr + at)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fma_rounds_once(dtype):
    """``tl.fma`` is ``fma.rn``: a * b + c rounded once.  a = b = 1 + 2**-s makes a * b = 1 + 2**(1-s) +
    2**-2s, a tie of the format when rounded alone (to even: 1 + 2**(1-s)); c = -(1 + 2**(1-s)) leaves 2**-2s."""
    s = 12 if dtype == torch.float32 else 4
    a = torch.full((4,), 1 + 2**-s, dtype=dtype, device=DEVICE)
    c = torch.full((4,), -(1 + 2**(1 - s)), dtype=dtype, device=DEVICE)
    out = torch.empty_like(a)
    _fma[(1,)](a, a, c, out, N=4)
    assert (out.double() == 2.0**(-2 * s)).all(), out


@triton.jit
def _libdevice_calls(x_ptr, rsqrt_ptr, exp_ptr, exp2_ptr, log_ptr, log2_ptr, sqrt_ptr, tanh_ptr, N: tl.constexpr):
    at = tl.arange(0, N)
    x = tl.load(x_ptr + at)
    tl.store(rsqrt_ptr + at, bound_rsqrt(x))
    tl.store(exp_ptr + at, libdevice.exp(x))
    tl.store(exp2_ptr + at, cuda_libdevice.exp2(x))
    tl.store(log_ptr + at, libdevice.log(x))
    tl.store(log2_ptr + at, libdevice.log2(x))
    tl.store(sqrt_ptr + at, libdevice.sqrt(x))
    tl.store(tanh_ptr + at, libdevice.tanh(x))


# libdevice's documented float32 bounds (CUDA C Programming Guide, "Mathematical functions"), in ULPs: what
# a GPU may give; the interpreter takes each in float64 and rounds once (0.5).  sqrt's depends on the PTX
# instruction the call lowers to (``PTX_SQRT_ULPS``), read from the kernel that ran.
LIBDEVICE_ULPS = {"rsqrt": 2, "exp": 2, "exp2": 2, "log": 1, "log2": 1, "sqrt": None, "tanh": 2}
# What each PTX square root guarantees (PTX ISA ``sqrt``; the Programming Guide's ``sqrtf``, which is
# ``sqrt.rn`` under -prec-sqrt=true and ``sqrt.approx`` under -prec-sqrt=false): the IEEE-rounded one 0.5 ULP,
# the approximate one 1 ULP on compute capability >= 5.2.  Triton 3.6 and 3.9 lower ``libdevice.sqrt`` and
# ``tl.sqrt`` to ``sqrt.approx.ftz.f32`` for sm_90 (libdevice under Triton's FTZ and fast-sqrt reflections;
# ``tl.sqrt_rn`` gives ``sqrt.rn.f32``): the H200 measured 0.89 ULP.
PTX_SQRT_ULPS = {"sqrt.rn.f32": 0.5, "sqrt.rn.ftz.f32": 0.5, "sqrt.approx.f32": 1.0, "sqrt.approx.ftz.f32": 1.0}


def sqrt_bound(ptx: str) -> float:
    """The bound of the one square-root instruction ``ptx`` uses (an unknown or second one is an error)."""
    used = set(re.findall(r"\bsqrt\.[a-z0-9.]+", ptx))
    if len(used) != 1 or not used <= PTX_SQRT_ULPS.keys():
        raise AssertionError(f"square-root instructions {sorted(used)}: expected one of {sorted(PTX_SQRT_ULPS)}")
    return PTX_SQRT_ULPS[used.pop()]


def test_libdevice_calls_return_the_functions_values():
    """The stub module ``triton.language.extra.libdevice`` (its functions returned None), a function of it
    bound at import (liger's ``rsqrt``) and the CUDA module itself (its builtins raised), on every positive
    normal bf16, within libdevice's bounds (on the CPU: rounded once, 0.5 ULP)."""
    every = every_bf16().float()
    positive = every[(every > 2**-126) & every.isfinite()]
    x = torch.ones(1 << (positive.numel() - 1).bit_length(), device=DEVICE)   # tl.arange takes powers of 2
    x[:positive.numel()] = positive
    outs = {name: torch.empty_like(x) for name in LIBDEVICE_ULPS}
    compiled = _libdevice_calls[(1,)](x, *outs.values(), N=x.numel())
    bounds = {**LIBDEVICE_ULPS, "sqrt": sqrt_bound(compiled.asm["ptx"]) if DEVICE.type == "cuda" else 0.5}
    wide = x.double()
    truth = {"rsqrt": wide.rsqrt(), "exp": wide.exp(), "exp2": wide.exp2(), "log": wide.log(),
             "log2": wide.log2(), "sqrt": wide.sqrt(), "tanh": wide.tanh()}
    for name, bound in bounds.items():
        want = truth[name]
        finite = want.float().isfinite() & (want.abs() >= 2**-126)
        ulp = torch.exp2(torch.floor(torch.log2(want[finite].abs())) - 23)
        error = ((outs[name].double()[finite] - want[finite]).abs() / ulp).max().item()
        assert error <= (0.5 if DEVICE.type == "cpu" else bound), f"libdevice.{name}: {error} ULP"


SQRT_FOR_SM90 = textwrap.dedent('''
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.language.extra import libdevice

    @triton.jit
    def root(x_ptr, out_ptr):
        tl.store(out_ptr, libdevice.sqrt(tl.load(x_ptr)))

    source = ASTSource(fn=root, signature={"x_ptr": "*fp32", "out_ptr": "*fp32"}, constexprs={})
    print(triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"])
''')


@interpreted_only
def test_libdevice_sqrt_for_sm90_lowers_to_the_approximate_square_root(tmp_path):
    """What the GPU bound above rests on, checked without a GPU: Triton compiles ``libdevice.sqrt`` for sm_90
    to ``sqrt.approx.ftz.f32`` (1 ULP); and ``sqrt_bound`` refuses PTX whose square root it does not know."""
    script = tmp_path / "sqrt_for_sm90.py"
    script.write_text(SQRT_FOR_SM90)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "sqrt.approx.ftz.f32" in run.stdout and sqrt_bound(run.stdout) == 1.0
    assert sqrt_bound("sqrt.rn.f32 %r2, %r1;") == 0.5
    for unknown in ("mov.b32 %r2, %r1;", "sqrt.approx.f64 %fd2, %fd1;", "sqrt.rn.f32 %r2, %r1; sqrt.approx.f32 %r3, %r1;"):
        with pytest.raises(AssertionError, match="square-root instructions"):
            sqrt_bound(unknown)


@triton.jit
def _inline_ptx(x_ptr, out_ptr, N: tl.constexpr):
    at = tl.arange(0, N)
    x = tl.load(x_ptr + at)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(out_ptr + at, y)


@interpreted_only
def test_inline_ptx_names_the_interpreters_limitation():
    x = torch.ones(4)
    with pytest.raises(Exception, match="interpreter cannot run inline PTX"):
        _inline_ptx[(1,)](x, torch.empty_like(x), N=4)


UNPATCHED = textwrap.dedent('''
    import torch, triton, triton.language as tl

    @triton.jit
    def product(a_ptr, out_ptr):
        at = tl.arange(0, 2)
        a = tl.load(a_ptr + at)
        tl.store(out_ptr + at, a * a)

    a = torch.tensor([1.0078125, -2.0], dtype=torch.bfloat16)
    out = torch.empty_like(a)
    product[(1,)](a, out)
    print(out.float().tolist())
''')


@interpreted_only
def test_the_unpatched_interpreter_fails_the_product_the_patch_gets_right(tmp_path):
    """The negative control: Triton's interpreter alone (a process that never imports ``ops``) multiplies
    the bit patterns of bf16 values, so the product test above could fail."""
    script = tmp_path / "unpatched.py"
    script.write_text(UNPATCHED)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": ""}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert eval(run.stdout.strip().splitlines()[-1]) != [1.015625, 4.0]
    a = torch.tensor([1.0078125, -2.0], dtype=torch.bfloat16)
    patched = torch.empty_like(a)
    _bf16_pairs[(1,)](a, a, torch.empty_like(a), torch.empty_like(a), patched, torch.empty_like(a),
                      torch.empty_like(a), torch.empty(2, dtype=torch.int8), torch.empty(2, dtype=torch.int8), N=2)
    assert patched.float().tolist() == [1.015625, 4.0]


HOSTED = textwrap.dedent('''
    import triton, triton.language as tl
    from triton.language.extra.libdevice import rsqrt
    import torch

    @triton.jit
    def _scaled(x_ptr, out_ptr, N: tl.constexpr):
        at = tl.arange(0, N)
        x = tl.load(x_ptr + at)
        tl.store(out_ptr + at, (x * x).to(tl.float32) * rsqrt(x.to(tl.float32) * 4.0))

    def scaled(x):
        out = torch.empty(x.shape, dtype=torch.float32)
        _scaled[(1,)](x, out, N=x.numel())
        return out
''')


@interpreted_only
def test_the_implementation_host_interprets_as_the_gpu(tmp_path):
    """An implementation's own Triton kernel, run in the host (which imports nothing of the project), gets
    the patched semantics: bf16 products, Python floats with bf16, a libdevice function bound at import."""
    from tools.engine.impl_executor import ImplementationHost
    (tmp_path / "hosted_impl.py").write_text(HOSTED)
    host = ImplementationHost("cpu", call_limit_s=120)
    try:
        host.load([str(tmp_path)], {"scaled": ("hosted_impl", "scaled")})
        x = torch.tensor([1.0078125, 3.0, 0.5, 2.0], dtype=torch.bfloat16)
        got = host.function("scaled")(x=x)
    finally:
        host.close()
    want = (x.float() * x.float()).bfloat16().float() * (x.float() * 4.0).rsqrt()
    assert torch.equal(got, want), (got, want)


def _argmax_through_ptx(logits):
    """greedy_argmax whose kernel passes the logits through one PTX move first (right on a GPU)."""
    flat = logits.float().contiguous().reshape(-1)
    moved = torch.empty_like(flat)
    _inline_ptx[(1,)](flat, moved, N=flat.numel()) if flat.numel() and flat.numel() & (flat.numel() - 1) == 0 \
        else _inline_ptx[(1,)](flat[:1], moved[:1], N=1)
    return logits.argmax(dim=-1)


def _argmax_that_raises(logits):
    raise NotImplementedError("this implementation has no CPU path")


@interpreted_only
def test_a_kernel_the_interpreter_cannot_run_is_not_judged_rather_than_failed():
    """The cell's verdict names the interpreter's limitation and holds no finding; the control, a kernel
    raising on its own, still fails."""
    from ops.sampling.greedy_argmax import ENTRY
    from oracles.battery import Implementation, run_cell
    from oracles.selection import parse_oracles

    def judged(fn):
        return run_cell(ENTRY, Implementation(fn.__name__, {ENTRY.name: fn}), ENTRY.cell("decode_small_batch"),
                        torch.device("cpu"), max_examples=1, strategy=ENTRY.strategy_module,
                        oracles=parse_oracles("numerics"))

    result = judged(_argmax_through_ptx)
    assert result.status == "not judged" and not result.failures, result.summary()
    assert "not judged: interpreter cannot run inline PTX: mov.b32 $0, $1;" in result.summary()
    assert result.verdicts["parity"]["verdict"] == "not judged" and "parity" in result.oracles_skipped
    assert judged(_argmax_that_raises).status == "failed"


class _Unshared(tl.block_type):
    """A subclass takes Triton's own ``block_type.__init__`` (the shared shapes are the class's alone)."""


def _plain(value):
    """Attributes comparable with ``==`` (``tl.tuple.__eq__`` answers a constexpr)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tl.tuple):
        return ("tuple", [_plain(item) for item in value.values], _plain(vars(value.type)))
    if isinstance(value, (tl.constexpr, tl.core.constexpr_type)):
        return (type(value).__name__, value.value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


@interpreted_only
def test_shared_block_types_and_tensors_carry_tritons_own_attributes():
    """A block type or tensor of a shape met before takes the attributes Triton's own ``__init__`` gives it
    (``_Unshared``, the control, shares nothing), and its own element type: pointers to fp32 in two address
    spaces print alike, their block types still differ."""
    _widen[(1,)](torch.zeros(4, dtype=torch.bfloat16), torch.empty(4), N=4)   # installs the patch
    pointers = (tl.pointer_type(tl.float32), tl.pointer_type(tl.float32, "shared"))
    for element, shape in ((tl.float32, [2, 4]), (tl.int1, [2, 4]), (tl.bfloat16, [8]), (pointers[0], [8]),
                           (pointers[1], [8]), (tl.float32, tl.tuple([2, 4]))):
        first, again, own = tl.block_type(element, shape), tl.block_type(element, shape), _Unshared(element, shape)
        assert _plain(vars(again)) == _plain(vars(own)) == _plain(vars(first)) and again is not first
        assert again.element_ty is element
        tensors = [tl.tensor(None, kind) for kind in (first, again, own)]
        assert _plain(vars(tensors[1])) == _plain(vars(tensors[2])) == _plain(vars(tensors[0]))
        assert tensors[1].type is again and tensors[2].type is own
    assert tl.block_type(tl.float32, [2, 4]).shape is tl.block_type(tl.int1, [2, 4]).shape
    assert _Unshared(tl.float32, [2, 4]).shape is not _Unshared(tl.int1, [2, 4]).shape
    assert tl.block_type(pointers[0], [8]) != tl.block_type(pointers[1], [8])
    assert tl.block_type(pointers[1], [8]).element_ty is pointers[1]
    scalars = tl.tensor(None, tl.float32), tl.tensor(None, tl.int1)
    assert scalars[1].dtype is tl.int1 and _plain(vars(scalars[0]))["shape"] == _plain(vars(scalars[1]))["shape"]


@interpreted_only
@pytest.mark.parametrize("shape", [[3], [], [2**21], [2.0], (2, 4), [tl.constexpr(3)], [True], [tl.constexpr(4)]],
                         ids=repr)
def test_a_shape_is_judged_as_triton_judges_it(shape):
    """What Triton's ``block_type`` refuses is refused alike, though equal plain shapes were met before
    ([2.0] hashes as [2]; a Python tuple fails Triton's assertion), and what it takes is taken alike."""
    tl.block_type(tl.float32, [2]), tl.block_type(tl.float32, [2, 4]), tl.block_type(tl.float32, [4])

    def outcome(kind):
        try:
            return _plain(vars(kind(tl.float32, shape)))
        except Exception as error:   # noqa: BLE001
            return type(error), str(error)
    assert outcome(tl.block_type) == outcome(_Unshared)


@triton.jit
def _broadcast_sum(a_ptr, b_ptr, out_ptr, N: tl.constexpr, M: tl.constexpr):
    rows, cols = tl.arange(0, N)[:, None], tl.arange(0, M)[None, :]
    tl.store(out_ptr + rows * M + cols, tl.load(a_ptr + rows) + tl.load(b_ptr + cols))


@triton.jit
def _flat_sum(out_ptr, N: tl.constexpr, M: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, N), tl.arange(0, N) + tl.arange(0, M))


@interpreted_only
def test_shapes_broadcast_and_mismatch_as_before():
    """Equal shapes skip the broadcast, (4, 1) + (1, 8) still broadcasts, and 4 + 8 still raises Triton's
    error (the control: 4 + 4 runs)."""
    a, b = torch.arange(4.0), torch.arange(8.0) * 10
    out = torch.empty(4, 8)
    _broadcast_sum[(1,)](a, b, out, N=4, M=8)
    assert torch.equal(out, a[:, None] + b[None, :])
    same = torch.empty(4, dtype=torch.int32)
    _flat_sum[(1,)](same, N=4, M=4)
    assert same.tolist() == [0, 2, 4, 6]
    with pytest.raises(Exception, match="Cannot make_shape_compatible: incompatible dimensions at index 0: 4 and 8"):
        _flat_sum[(1,)](torch.empty(4, dtype=torch.int32), N=4, M=8)


SHARED_OR_NOT = textwrap.dedent('''
    import hashlib, sys
    import oracles.triton_interpreter as patch
    if sys.argv[1] == "unshared":
        patch._share_shapes = lambda interpreter, tl: None
    import torch, triton.language as tl
    from ops.norm.rms_norm_gated import rms_norm_gated
    from ops.sampling.greedy_argmax import greedy_argmax

    generator, digest = torch.Generator().manual_seed(0), hashlib.sha256()
    for rows, width, group, before in ((3, 128, 64, True), (5, 256, 128, False)):
        x, z = (torch.randn(rows, width, generator=generator).bfloat16() for _ in range(2))
        weight = torch.randn(width, generator=generator).bfloat16()
        for gate in (None, z):
            digest.update(rms_norm_gated(x, gate, weight, 1e-5, group, before).view(torch.int16).numpy().tobytes())
    for rows, vocab in ((3, 1000), (2, 4096)):
        logits = torch.randn(rows, vocab, generator=generator).bfloat16()
        digest.update(greedy_argmax(logits).numpy().tobytes())
    print(tl.block_type(tl.float32, [2]).shape is tl.block_type(tl.int1, [2]).shape, digest.hexdigest())
''')


@interpreted_only
def test_kernels_compute_the_same_bits_with_shapes_shared_or_not(tmp_path):
    """rms_norm_gated and greedy_argmax give the same bits with Triton's own type layer (the control: its
    shapes are not shared) as with the shared shapes."""
    script = tmp_path / "shared_or_not.py"
    script.write_text(SHARED_OR_NOT)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    answers = {}
    for mode in ("shared", "unshared"):
        run = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": repo}, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-2000:]
        answers[mode] = run.stdout.strip().splitlines()[-1].split()
    assert answers["shared"][0] == "True" and answers["unshared"][0] == "False", answers
    assert answers["shared"][1] == answers["unshared"][1], answers
