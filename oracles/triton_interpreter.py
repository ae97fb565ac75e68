"""The Triton interpreter (``TRITON_INTERPRET=1``) made to compute as the GPU does, wherever the GPU's answer
is exactly defined: bf16 and fp8 values, their conversions, and the libdevice calls kernels make.

Triton 3.6's interpreter keeps bf16 and fp8 tensors as raw ``uint16``/``uint8`` arrays, so that
``bf16 * bf16`` multiplies bit patterns (inputs near 1 give about 1e28), comparisons and ``tl.max`` order
negative values wrongly, ``bf16 * 2.0`` fails (its builder has no ``get_bf16``), bf16 -> fp32 misreads
subnormals (1e-39 reads 4.4e-39), fp32 -> bf16 truncates, ``libdevice.rsqrt`` returns None (the stub module
is called as it is) and ``tl.fma`` rounds twice.  Here those tensors hold ``ml_dtypes`` values (exact numpy
bfloat16, float8_e4m3fn, float8_e5m2) and the builder's methods follow the GPU's instructions:

- bf16 arithmetic: Triton keeps ``bf16 op bf16`` in bf16 (``computation_type_impl``); sm90 runs it as
  ``add/mul.rn.bf16`` (correctly rounded), sm80 upcasts, computes in fp32 and rounds: the same bits, since
  fp32 carries 24 >= 2 x 8 + 2 bits (double rounding is innocuous).  numpy on ml_dtypes does the latter.
- A Python float with a bf16 tensor is a bf16 constant (``scalar_constant``), rounded once from the double
  (the GPU builder's APFloat conversion); fp64 -> bf16 is rounded once too (ml_dtypes rounds through fp32).
- Casts: widening is exact; narrowing rounds to nearest even (``cvt.rn``), a NaN narrowed to bf16 or fp16
  is the canonical 0x7FFF (PTX); to fp8 (e4m3, e5m2) the conversion saturates (``cvt.rn.satfinite``:
  beyond the largest finite value, inf included, gives it; NaN stays NaN, 0x7F), as Triton's sm90 lowering
  emits; ``fp_downcast_rounding="rtz"`` rounds toward zero.
- ``tl.fma`` rounds once (``fma.rn``); min/max with ``propagate_nan=NONE`` return the number.
- Transcendentals (``tl.exp``, ``libdevice.*``) on fp32 are taken in float64 and rounded once: the GPU's
  are approximations within a few ulp whose bits are not specified, so the interpreter gives the exact
  value, never numpy's float32 paths (``np.exp`` on float32 was measured 1.17 ulp off).
- What the interpreter cannot run at all raises :class:`InterpreterLimitation`, whose message starts
  "interpreter cannot run": inline PTX, a libdevice function without a numpy twin.

Installed by :func:`install_when_imported`: ``ops/__init__`` calls it where it chooses the interpreter, and
the implementation host, which imports no package of the project, loads this file under a name of its own
and calls it before any implementation is imported.  It imports only numpy, ml_dtypes and Triton.
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import re
import sys

INTERPRETER_MODULE = "triton.runtime.interpreter"
LIMITATION_PREFIX = "interpreter cannot run"
_INSTALLED = "_gpu_semantics_installed"


class InterpreterLimitation(NotImplementedError):
    """What the interpreter cannot run (inline PTX, ...): the verdict names it instead of failing the kernel."""


def limitation_text(text: str) -> str:
    """``text`` without quotes, so that the limitation reads back out of any repr that quotes it."""
    return text.replace("'", "").replace('"', "")


def limitation_in(message: str) -> str | None:
    """The limitation an exception's message names (the host sends Triton's InterpreterError, which quotes
    the original), or None."""
    found = re.search(LIMITATION_PREFIX + r"[^'\"\n]*", message)
    return found.group(0).rstrip() if found else None


def install_when_imported() -> None:
    """Install now if Triton's interpreter is loaded, else as soon as it is (no Triton import of our own:
    a process that never runs Triton does not pay for it)."""
    if INTERPRETER_MODULE in sys.modules:
        install(sys.modules[INTERPRETER_MODULE])
    elif not any(type(finder).__name__ == _InstallOnImport.__name__ for finder in sys.meta_path):   # by name:
        # the host loads this file under a name of its own, and the kernels it serves may import ``ops`` too
        sys.meta_path.insert(0, _InstallOnImport())


class _InstallOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != INTERPRETER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                install(module)

        spec.loader = _Loader()
        return spec


def install(interpreter) -> None:
    """Patch ``triton.runtime.interpreter`` (the module) in place, at its first launch: it is imported while
    ``triton.language`` is still being defined (by ``triton.jit``).  A second call does nothing."""
    if getattr(interpreter, _INSTALLED, False):
        return
    setattr(interpreter, _INSTALLED, True)
    original = interpreter._patch_lang

    def patch_lang_first(fn):
        if interpreter._patch_lang is patch_lang_first:
            interpreter._patch_lang = original
            _install_semantics(interpreter)
        return interpreter._patch_lang(fn)

    interpreter._patch_lang = patch_lang_first


def _install_semantics(interpreter) -> None:
    import ml_dtypes
    import numpy as np
    import triton.language as tl

    builder_class = interpreter.InterpreterBuilder
    TensorHandle = interpreter.TensorHandle
    rounding = interpreter._ir.ROUNDING_MODE
    original_np_dtype = interpreter._get_np_dtype
    exact = {tl.bfloat16: np.dtype(ml_dtypes.bfloat16), tl.float8e4nv: np.dtype(ml_dtypes.float8_e4m3fn),
             tl.float8e5: np.dtype(ml_dtypes.float8_e5m2)}
    saturation = {exact[tl.float8e4nv]: 448.0, exact[tl.float8e5]: 57344.0}
    canonical_nan = {exact[tl.bfloat16]: 0x7FFF, exact[tl.float8e4nv]: 0x7F, exact[tl.float8e5]: 0x7F}
    floats = {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), *exact.values()}
    unsigned = {2: np.uint16, 1: np.uint8, 4: np.uint32, 8: np.uint64}

    pointer = np.dtype(np.uint64)
    kept: dict = dict(exact)   # scalar type -> its array dtype: Triton's table is rebuilt at every call

    def np_dtype(tt_dtype):
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if isinstance(scalar, tl.pointer_type):
            return pointer
        if scalar not in kept:
            kept[scalar] = original_np_dtype(scalar)
        return kept[scalar]

    def to_float32_odd(values: np.ndarray) -> np.ndarray:
        """float64 -> float32 rounded to odd: then rounding to any format of <= 22 bits is rounded once."""
        with np.errstate(invalid="ignore", over="ignore"):
            nearest = values.astype(np.float32)
            inexact = (nearest.astype(np.float64) != values) & ~np.isnan(values)
            beyond = inexact & (np.abs(nearest.astype(np.float64)) > np.abs(values))
        bits = nearest.view(np.uint32).copy()
        bits[beyond] -= 1          # truncated toward zero (a magnitude step; sign bit untouched)
        bits[inexact] |= 1         # sticky
        return bits.view(np.float32)

    def convert(data: np.ndarray, target: np.dtype, mode=None) -> np.ndarray:
        """Float -> float as the GPU converts (module docstring); ``mode`` rtne (None) or rtz."""
        source = data.dtype
        if source == target:
            return data.copy()
        values = data
        if target.itemsize < source.itemsize and source == np.float64 and target in exact.values():
            values = to_float32_odd(data)
        elif source in exact.values():
            values = data.astype(np.float32)   # exact
        if target in saturation:
            values = np.clip(values, -saturation[target], saturation[target])
        with np.errstate(over="ignore", invalid="ignore"):
            out = values.astype(target)
        if mode == rounding.RTZ:
            wide = data.astype(np.float64)
            with np.errstate(invalid="ignore"):
                away = np.abs(out.astype(np.float64)) > np.abs(wide)
            bits = out.view(unsigned[target.itemsize]).copy()
            bits[away] -= 1
            out = bits.view(target)
        if target in canonical_nan and target.itemsize < source.itemsize:
            nan = np.isnan(data.astype(np.float32) if source in exact.values() else data)
            if nan.any():
                out = out.copy()
                out.view(unsigned[target.itemsize])[nan] = canonical_nan[target]
        return out

    original_cast, original_fp_to_fp = builder_class.cast_impl, builder_class.create_fp_to_fp

    def cast_impl(self, src, dst_type):
        target, source = np_dtype(dst_type), src.data.dtype
        if source in floats and target in floats:
            return TensorHandle(convert(src.data, target), dst_type.scalar)
        if target in exact.values() and src.dtype.scalar.is_int():  # int -> bf16: once, through float64
            return TensorHandle(convert(src.data.astype(np.float64), target), dst_type.scalar)
        if source in exact.values() and dst_type.scalar.is_int():   # bf16 -> int: from its exact value
            return TensorHandle(src.data.astype(np.float32).astype(target), dst_type.scalar)
        return original_cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        target = np_dtype(dst_type)
        if src.data.dtype in floats and target in floats:
            return TensorHandle(convert(src.data, target, rounding_mode), dst_type.scalar)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)   # the formats ml_dtypes has not (fp8e4b15)

    def get_bf16(self, value):
        """A Python float met by a bf16 tensor, as the GPU's builder makes the constant: ``get_bf16(float v)``
        is ``APFloat(bf16, std::to_string(v))``, so the double is narrowed to fp32, printed with six decimals
        ("%f": 1e-7 becomes 0) and that decimal rounded to nearest even."""
        return TensorHandle(np.array([_bf16_of_decimal("%f" % float(np.float32(value)))],
                                     dtype=exact[tl.bfloat16]), tl.bfloat16)

    def create_fma(self, x, y, z):
        """x * y + z rounded once: the product is exact in float64 for formats of <= 26 bits, the sum's error
        (TwoSum) makes it round to odd, and rounding that to the target is rounding once."""
        target = z.data.dtype
        if target == np.float64:
            return TensorHandle(x.data * y.data + z.data, z.dtype.scalar)
        with np.errstate(invalid="ignore", over="ignore"):
            product = x.data.astype(np.float64) * y.data.astype(np.float64)
            addend = z.data.astype(np.float64)
            total = product + addend
            virtual = total - product
            error = (product - (total - virtual)) + (addend - virtual)
            sticky = np.isfinite(error) & (error != 0) & ((total.view(np.uint64) & 1) == 0)
            total = np.where(sticky, np.nextafter(total, np.where(error > 0, np.inf, -np.inf)), total)
        return TensorHandle(convert(total, target), z.dtype.scalar)

    def in_float64(function):
        """A float32 function taken in float64 and rounded once (float64 stays numpy's)."""
        def create(self, arg):
            data = arg.data
            with np.errstate(all="ignore"):
                result = convert(function(data.astype(np.float64)), data.dtype) if data.dtype != np.float64 \
                    else function(data)
            return TensorHandle(result, arg.dtype.scalar)
        return create

    def create_inline_asm(self, inline_asm, constraints, values, type, is_pure, pack):
        first = inline_asm.strip().splitlines()[0].strip() if inline_asm.strip() else ""
        raise InterpreterLimitation(f"{LIMITATION_PREFIX} inline PTX: {limitation_text(first[:60])}")

    def create_extern_elementwise(self, lib_name, lib_path, symbol, arg_list, ret_type, is_pure):
        function = _libdevice_twin(symbol, np)
        if function is None:
            raise InterpreterLimitation(f"{LIMITATION_PREFIX} libdevice {symbol}: no numpy twin")
        target = np_dtype(ret_type)
        args = [a.data.astype(np.float64) if a.data.dtype.kind == "f" or a.data.dtype in exact.values()
                else a.data for a in arg_list]
        with np.errstate(all="ignore"):
            result = np.asarray(function(*args))
        if result.dtype == np.float64 and target != np.float64:
            result = convert(result, target)
        return TensorHandle(result.astype(target, copy=False), ret_type.scalar)

    original_binary_op = builder_class.binary_op

    def binary_op(self, lhs, rhs, op):
        with np.errstate(all="ignore"):   # a GPU does not warn; ml_dtypes does on every NaN comparison
            return original_binary_op(self, lhs, rhs, op)

    def raw(dtype: np.dtype) -> np.dtype:
        """What Triton's C++ load and store are given: an ml_dtypes value as the unsigned integer of its width
        (3.9's refuse other dtypes: std::bad_cast)."""
        return np.dtype(unsigned[dtype.itemsize]) if dtype in exact.values() else dtype

    def as_mask(mask) -> np.ndarray:
        # an int1 mask: Triton 3.9's interpreter hands ``int1 & True`` over as int32 data (the compiled kernel
        # sees int1), which its load and store refuse ("mask has unsupported dtype")
        return mask.data if mask.data.dtype == np.bool_ else mask.data != 0

    def create_masked_load(self, ptrs, mask, other, *_, **__):
        kept = np_dtype(ptrs.get_element_ty())
        other = np.zeros_like(ptrs.data, dtype=kept) if other is None else other.data
        loaded = interpreter._interpreter.load(ptrs.data, as_mask(mask), other.view(raw(kept)), raw(kept))
        return TensorHandle(loaded.view(kept), ptrs.get_element_ty())

    def create_masked_store(self, ptrs, value, mask, *_, **__):
        return interpreter._interpreter.store(ptrs.data, value.data.view(raw(value.data.dtype)), as_mask(mask))

    interpreter._get_np_dtype = np_dtype
    builder_class.binary_op = binary_op
    builder_class.create_masked_load = create_masked_load
    builder_class.create_masked_store = create_masked_store
    builder_class.cast_impl = cast_impl
    builder_class.create_fp_to_fp = create_fp_to_fp
    builder_class.get_bf16 = get_bf16
    builder_class.create_fma = create_fma
    builder_class.create_minnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmin)
    builder_class.create_maxnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax)
    for name, function in (("exp", np.exp), ("exp2", np.exp2), ("log", np.log), ("log2", np.log2),
                           ("sin", np.sin), ("cos", np.cos), ("sqrt", np.sqrt), ("precise_sqrt", np.sqrt),
                           ("rsqrt", lambda v: 1.0 / np.sqrt(v))):
        setattr(builder_class, f"create_{name}", in_float64(function))
    builder_class.create_inline_asm = create_inline_asm
    builder_class.create_extern_elementwise = create_extern_elementwise
    original_dot = builder_class.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        """Narrow float operands widened exactly (fp32 products of bf16/fp8 are exact, as the tensor cores')."""
        def widened(handle):
            data = handle.data
            return TensorHandle(data.astype(np.float32), tl.float32) if data.dtype in exact.values() else handle
        return original_dot(self, widened(a), widened(b), d, input_precision, max_num_imprecise_acc)

    builder_class.create_dot = create_dot
    semantic_class = interpreter.TritonSemantic
    original_sanitize = semantic_class.binary_op_sanitize_overflow_impl

    def sanitize_overflow(self, lhs, rhs, binary_op):
        """Triton's check of an integer ``+ - *`` for overflow recomputes it in int64 and hands the result to
        ``device_assert``, which drops it unless ``options.debug`` (the interpreter's options never set it):
        here the recomputation is left out too (a fifth of an nvfp4_quantize cell's CPU time, measured)."""
        if isinstance(self.builder, builder_class) and not self.builder.options.debug:
            return None
        return original_sanitize(self, lhs, rhs, binary_op)

    semantic_class.binary_op_sanitize_overflow_impl = sanitize_overflow
    _share_shapes(interpreter, tl)
    _patch_lang_once_per_launch(interpreter, tl)
    _patch_libdevice(interpreter)


def _share_shapes(interpreter, tl) -> None:
    """Triton's type layer rebuilds a shape at every op: ``block_type(...)`` unwraps and validates it and
    makes a ``tl.tuple`` (with its ``tuple_type`` and name), ``tensor(...)`` turns it into a ``tl.tuple`` of
    constexprs, and ``broadcast_impl_value`` compares two shapes through ``tl.tuple.__eq__``: a third of an
    interpreted rms_norm_gated's time (measured; numpy is a small part).  Here a block type of a shape and
    element type met before takes the attributes Triton gave the first one (each type is still its own
    object, its ``element_ty`` the one passed), every block type of one shape shares one shape object, a
    tensor of that shape shares the first one's ``shape`` and ``numel``, and operands of that very shape
    object need no broadcast.  These values are never mutated; what is not met before, or not plain ints
    (a constexpr, a bool), or a subclass, takes Triton's own path, so an invalid shape raises as before."""
    core = tl.core
    block_type, tensor = core.block_type, core.tensor
    original_block_init, original_tensor_init = block_type.__init__, tensor.__init__
    semantic_class = interpreter.TritonSemantic
    original_broadcast = semantic_class.broadcast_impl_value
    shapes: dict = {}      # a shape's ints -> its one shape object
    blocks: dict = {}      # (a shape's ints, str(element type)) -> the attributes Triton's __init__ set
    tensors: dict = {id(None): (None, None)}   # id(shape object) -> (it, None or (tensor shape, numel)); the
    # entry holds the object, so its id is never reused while it lasts; None stands for every scalar type

    def plain_ints(shape):
        values = shape.values if type(shape) is core.tuple else shape
        if type(values) is not list:   # a Python tuple fails Triton's assertion (its ``tuple`` is tl.tuple)
            return None
        for value in values:
            if type(value) is not int:
                return None
        return tuple(values)

    def block_init(self, element_ty, shape):
        # the attributes depend on the element type only through its name (str), the rest on the shape
        ints = plain_ints(shape) if type(self) is block_type and isinstance(element_ty, core.dtype) else None
        key = (ints, str(element_ty))
        if ints is None or key not in blocks:
            original_block_init(self, element_ty, shape)
            if ints is not None:
                self.shape = shapes.setdefault(ints, self.shape)
                blocks[key] = dict(vars(self))
                tensors.setdefault(id(self.shape), (self.shape, None))
            return
        self.__dict__.update(blocks[key])
        self.element_ty = element_ty

    def tensor_init(self, handle, type_):
        source = type_.shape if type_.is_block() else None
        known, shaped = tensors.get(id(source), (False, None))
        if known is not source or shaped is None or type(self) is not tensor:
            original_tensor_init(self, handle, type_)
            if known is source and type(self) is tensor:
                tensors[id(source)] = (source, (self.shape, self.numel))
            return
        super(tensor, self).__init__()
        self.handle = handle
        self.type = type_
        self.dtype = type_.scalar
        self.shape, self.numel = shaped

    def broadcast_impl_value(self, lhs, rhs):
        lhs_ty, rhs_ty = lhs.type, rhs.type
        if type(lhs_ty) is block_type and type(rhs_ty) is block_type and lhs_ty.shape is rhs_ty.shape:
            return lhs, rhs    # what Triton's returns for equal shapes
        return original_broadcast(self, lhs, rhs)

    block_type.__init__ = block_init
    tensor.__init__ = tensor_init
    semantic_class.broadcast_impl_value = broadcast_impl_value


def _patch_lang_once_per_launch(interpreter, tl) -> None:
    """Triton patches ``triton.language`` at each launch (undone when it ends) and again at every call of a
    ``@triton.jit`` helper inside it (``InterpretedFunction.__call__``: ``inspect.getmembers`` over ``tl``,
    ``tl.tensor``, ``tl.math``, ... each time; a fifth of an interpreted nvfp4_gemv's time, measured),
    though the launch patched those modules already and the helper's patch is never undone (its scope is
    dropped): a patched builtin is no builtin any more, so the repeat changes nothing.  Here a helper whose
    language modules the running launch patched already is not patched again; one that sees another gets
    Triton's own patch, as before."""
    original_patch, original_launch = interpreter._patch_lang, interpreter.GridExecutor.__call__
    launches: list[set[int]] = []   # per launch in progress: the language modules patched while it runs

    def patch_lang(fn):
        langs = {id(value) for value in fn.__globals__.values() if value is tl or value is tl.core}
        if launches and langs and langs <= launches[-1]:
            return interpreter._LangPatchScope()   # a helper called inside the launch: nothing left to patch
        scope = original_patch(fn)
        if launches:
            launches[-1] |= langs
        return scope

    @functools.wraps(original_launch)
    def launch(self, *args, **kwargs):
        launches.append(set())
        try:
            return original_launch(self, *args, **kwargs)
        finally:
            launches.pop()

    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = launch


def _bf16_of_decimal(text: str) -> float:
    """A decimal string rounded to bf16, to nearest even, exactly (as LLVM's APFloat reads it)."""
    import math
    from fractions import Fraction
    if text.lstrip("-+") in ("inf", "nan"):
        return float(text)
    value = Fraction(text)
    magnitude, sign = abs(value), (-1.0 if text.startswith("-") else 1.0)
    if magnitude >= 2**128 - 2**119:        # past the midpoint above the largest bf16 (ties go to inf, even)
        return sign * math.inf
    if magnitude == 0:
        return sign * 0.0
    exponent = max(math.floor(math.log2(magnitude)), -126)
    while Fraction(2) ** exponent > magnitude and exponent > -126:   # log2 of a fraction may be off by one
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    step = Fraction(2) ** (exponent - 7)    # 8 significant bits; subnormals keep the step of 2**-133
    units, rest = divmod(magnitude, step)
    if rest * 2 > step or (rest * 2 == step and units % 2 == 1):
        units += 1
    return sign * float(units * step)


def _libdevice_twin(symbol: str, np):
    """numpy's function for a libdevice symbol (``__nv_expf``, ``__nv_fast_expf``, ``__nv_exp``), in float64."""
    name = symbol.removeprefix("__nv_").removeprefix("fast_")
    table = {
        "exp": np.exp, "exp2": np.exp2, "exp10": lambda v: np.power(10.0, v), "expm1": np.expm1,
        "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
        "sqrt": np.sqrt, "fsqrt_rn": np.sqrt, "rsqrt": lambda v: 1.0 / np.sqrt(v),
        "frsqrt_rn": lambda v: 1.0 / np.sqrt(v),
        "rcp": lambda v: 1.0 / v, "frcp_rn": lambda v: 1.0 / v, "cbrt": np.cbrt,
        "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
        "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
        "atanh": np.arctanh, "erf": np.vectorize(_erf, otypes=[np.float64]),
        "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint,
        "nearbyint": np.rint, "round": lambda v: np.trunc(v + np.copysign(0.5, v)),
        "pow": np.power, "powf": np.power, "atan2": np.arctan2, "fmin": np.fmin, "fmax": np.fmax,
        "fmod": np.fmod, "hypot": np.hypot, "copysign": np.copysign,
        "fdiv_rn": np.divide, "div_rn": np.divide, "fdividef": np.divide,
        "isnan": lambda v: np.isnan(v).astype(np.int32), "isinf": lambda v: np.isinf(v).astype(np.int32),
        "signbit": lambda v: np.signbit(v).astype(np.int32),
    }
    if name in table:
        return table[name]
    if name.endswith("f") and name[:-1] in table:
        return table[name[:-1]]
    return None


def _erf(value: float) -> float:
    import math
    return math.erf(value)


def _patch_libdevice(interpreter) -> None:
    """Run ``libdevice.*`` under the interpreter: the stub module ``triton.language.extra.libdevice`` (its
    functions' bodies are ``...``; a GPU compile maps it to the CUDA module) and the CUDA module's builtins
    become functions bound to the interpreter's semantic, for good (this process interprets every kernel),
    in both modules and in the globals of each interpreted function that bound one at import (``from
    triton.language.extra.libdevice import rsqrt``, as liger does), rebound at its first launch."""
    import triton.language.extra.cuda.libdevice as cuda
    import triton.language.extra.libdevice as stub

    semantic = interpreter.interpreter_semantic
    bound = {}
    for name, function in list(vars(cuda).items()):
        if interpreter.tl.core.is_builtin(function):
            bound[function] = bound[name] = functools.partial(_with_semantic, function, semantic)
            setattr(cuda, name, bound[name])
    for name, function in list(vars(stub).items()):
        if callable(function) and getattr(function, "__module__", None) == stub.__name__ and name in bound:
            bound[function] = bound[name]
            setattr(stub, name, bound[name])
    rebound: set[int] = set()
    original = interpreter._patch_lang

    def patch_lang(fn):
        if id(fn.__globals__) not in rebound:   # once per module: a launch costs no scan after its first
            rebound.add(id(fn.__globals__))
            for name, value in list(fn.__globals__.items()):
                if getattr(value, "__module__", None) in (stub.__name__, cuda.__name__) and value in bound:
                    fn.__globals__[name] = bound[value]
        return original(fn)

    interpreter._patch_lang = patch_lang


def _with_semantic(function, semantic, *args, **kwargs):
    kwargs.pop("_semantic", None)
    return function(*args, _semantic=semantic, **kwargs)
