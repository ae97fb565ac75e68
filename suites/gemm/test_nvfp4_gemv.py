"""nvfp4_gemv: every cell through the whole battery, and the battery against wrong GEMVs."""
from __future__ import annotations

import dataclasses
import struct

import pytest
import torch
import triton
import triton.language as tl

from ops.gemm import nvfp4_gemv
from ops.gemm.nvfp4_gemv import E2M1_FLOAT32_PTX, E2M1_PAIRS_PTX, E2M1_PLACED_PTX, ENTRY, PLACED_SCALE, \
    default_plan, dequantize_pairs, dequantize_pairs_float32
from ops.triton_backend import interpreting
from references.formats import E4M3_MAX, e2m1_decode
from suites.certification import arch_marks, assert_certified, certify_cell, machine_device
from suites.gemm import gemv_plans
from suites.gemm import nvfp4_gemv_impls as impls
from suites.op_suite import OpSuite

pytestmark = arch_marks(ENTRY.archs)


# (wrong implementation, the cell whose corners reach its bug, the oracle that must catch it)
# summation_order_varies (determinism) is judged in test_gemv_on_gpu.py: the CPU's sizes are too small
# for a float32 reordering to move a bf16 output (0 of 25 examples did, measured).
WRONG = [
    ("high_nibble_first", "narrow_outputs", "parity"),
    ("scale_per_32_elements", "narrow_outputs", "parity"),
    ("global_scale_forgotten", "narrow_outputs", "parity"),
    ("e2m1_read_as_linear", "narrow_outputs", "parity"),
    ("tail_dropped", "narrow_outputs", "parity"),
    ("bf16_accumulation", "narrow_outputs", "parity"),
    ("float16_activations", "narrow_outputs", "parity"),
    ("packed_rows_assumed_dense", "narrow_outputs", "parity"),
    ("scales_rows_assumed_dense", "narrow_outputs", "parity"),
    ("rows_read_as_contiguous_bytes", "narrow_outputs", "parity"),
    ("missing_refusal", "narrow_outputs", "refusals"),
]
SUITE = OpSuite.of_module(ENTRY, impls, wrong=WRONG, correct="correct_via_float32_sums")

test_cell = SUITE.cell_test()
test_battery_rejects = SUITE.rejects_test()
test_battery_accepts_another_correct_implementation = SUITE.accepts_test()


@pytest.mark.parametrize("cell, shape", gemv_plans.shapes_to_judge(ENTRY, nvfp4_gemv.DEFAULT_M1_SHAPE,
                                                                   nvfp4_gemv.VARIANT_SHAPES),
                         ids=lambda value: value.label() if hasattr(value, "label") else value.id)
def test_every_variant_plan_passes_the_battery_on_the_corners(cell, shape):
    """What tools/bench --variants times must be right: each plan on the corners (see gemv_plans)."""
    impl = gemv_plans.planned(ENTRY, nvfp4_gemv, shape)
    assert_certified(certify_cell(ENTRY, cell, impl, max_examples=0), impl.label)


def test_corners_reach_both_launch_paths_and_the_hard_weights():
    """On this device: split-K and one-pass plans, K not a multiple of 64, M = 1 and 16, and weights
    with zero, subnormal and saturated block scales, all from the corners alone."""
    device, strategy = machine_device(), ENTRY.strategy_module
    reached, every_path_corners = set(), []
    for cell in ENTRY.cells:
        for recipe in strategy.corners(cell, device):
            kwargs = strategy.build(recipe, device)
            if cell.id == gemv_plans.EVERY_PATH_CELL:
                every_path_corners.append(kwargs)
            plan = default_plan(kwargs["x"], kwargs["packed"])
            scales = kwargs["block_scales"].float()
            reached |= {"split_k" if plan.splits > 1 else "one_pass", f"M={recipe['M']}"}
            reached |= {name for name, hit in (("K_not_a_multiple_of_64", recipe["K"] % 64 != 0),
                                               ("zero_scale", (scales == 0).any()),
                                               ("subnormal_scale", ((scales > 0) & (scales < 2.0**-6)).any()),
                                               ("saturated_scale", (scales == E4M3_MAX).any()),
                                               ("zero_x_row", (kwargs["x"] == 0).all(dim=1).any())) if hit}
    expected = {"split_k", "one_pass", "M=1", "M=16", "K_not_a_multiple_of_64", "zero_scale", "subnormal_scale",
                "saturated_scale", "zero_x_row"}
    assert expected <= reached, f"not reached: {sorted(expected - reached)}"
    # under the interpreter each variant design meets EVERY_PATH_CELL's corners alone (gemv_plans): on the
    # design's own plan they must reach both launch paths, at M = 1 and at M = 16
    if interpreting():
        assert gemv_plans.paths_not_reached(ENTRY, nvfp4_gemv, every_path_corners) == {}


def test_the_operand_decode_plans_m_above_1_on_a_gpu_only():
    """The Gluon kernel (decode into the operand registers) has no interpreter and serves M > 1: a GPU plan at
    M = 4 takes it, with 16 rows a warp and K split for programs_per_sm programs an SM; at M = 1, and under the
    interpreter at any M, the plan is Triton's, split for one program an SM."""
    from ops.gemm.gemv_launch import gemv_plan

    shape = nvfp4_gemv.OPERAND_DECODE_SHAPE
    wide = gemv_plan(8192, 8192, 4, 132, False, shape, 4)
    assert (wide.operand_decode, wide.block_n, wide.num_warps, wide.block_k) == (True, 64, 4, 128)
    assert shape.programs_per_sm == 2 and wide.splits == 3   # 2 x 132 programs over 128 tiles of 64 rows
    narrow = gemv_plan(20, 4096, 4, 132, False, shape, 16)
    assert (narrow.operand_decode, narrow.block_n, narrow.num_warps) == (True, 32, 2)
    assert not gemv_plan(8192, 8192, 4, 132, False, shape, 1).operand_decode
    interpreted = gemv_plan(8192, 8192, 4, 132, True, shape, 4)
    assert not interpreted.operand_decode and interpreted.num_warps == shape.num_warps
    one_per_sm = gemv_plan(8192, 8192, 4, 132, True, dataclasses.replace(shape, programs_per_sm=1), 4)
    assert interpreted.splits == one_per_sm.splits


def test_x_goes_through_shared_memory_above_few_rows_on_a_gpu_only():
    """The default above FEW_ROWS rows stages x in shared memory once a step (M = 16's best on the H100,
    docs/ops/nvfp4_gemv.md); at most FEW_ROWS rows, and under the interpreter at any M, it does not."""
    from ops.gemm.gemv_launch import gemv_plan

    few, many = nvfp4_gemv.default_shape(nvfp4_gemv.FEW_ROWS), nvfp4_gemv.default_shape(nvfp4_gemv.FEW_ROWS + 1)
    assert nvfp4_gemv.default_shape(16) is many and nvfp4_gemv.default_shape(1) is nvfp4_gemv.DEFAULT_M1_SHAPE
    assert many.x_shared and not few.x_shared and dataclasses.replace(many, x_shared=False) == few
    assert gemv_plan(8192, 8192, 4, 132, False, many, 16).x_shared
    assert not gemv_plan(8192, 8192, 4, 132, False, few, 4).x_shared
    assert not gemv_plan(8192, 8192, 4, 132, True, many, 16).x_shared


# -- the weight decode, value by value: every byte against every E4M3 scale ---------------------------
@triton.jit
def _decode_every_pair(packed_ptr, scale_ptr, low_ptr, high_ptr, count, BLOCK: tl.constexpr, PTX_DECODE: tl.constexpr,
                       FLOAT32_DECODE: tl.constexpr, PLACED: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < count
    packed = tl.load(packed_ptr + offsets, mask=live, other=0)
    scale = tl.load(scale_ptr + offsets, mask=live, other=0.0)
    if FLOAT32_DECODE:
        low, high = dequantize_pairs_float32(packed, scale)
    else:
        low, high = dequantize_pairs(packed, scale, PTX_DECODE, PLACED)
    tl.store(low_ptr + offsets, low.to(tl.float32), mask=live)
    tl.store(high_ptr + offsets, high.to(tl.float32), mask=live)


def every_byte_and_scale(device) -> tuple[torch.Tensor, torch.Tensor]:
    """(bytes, scales): all 256 bytes against all 127 non-negative finite E4M3 scales, flattened."""
    scales = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    packed = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    return packed.repeat(len(scales)).to(device), scales.repeat_interleave(256).to(device)


def expected_pairs(packed: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return e2m1_decode(packed & 0xF) * scales, e2m1_decode(packed >> 4) * scales


def decode_every_pair(ptx_decode: bool, float32_decode: bool = False, placed: bool = False):
    """The decode's values and the expected ones (``placed``: both times 2**-7, as that decode gives)."""
    packed, scales = every_byte_and_scale(machine_device())
    low, high = torch.empty_like(scales), torch.empty_like(scales)
    _decode_every_pair[(triton.cdiv(len(packed), 4096),)](packed, scales, low, high, len(packed), BLOCK=4096,
                                                          PTX_DECODE=ptx_decode, FLOAT32_DECODE=float32_decode,
                                                          PLACED=placed)
    expected_low, expected_high = expected_pairs(packed, scales)
    factor = 2.0**-7 if placed else 1.0
    return (low, high), (expected_low * factor, expected_high * factor)


def float32_bits(values: torch.Tensor) -> torch.Tensor:
    return values.view(torch.int32)  # -0.0 is not +0.0 here


@pytest.mark.parametrize("placed", [False, True], ids=["plain", "placed_twin"])
def test_arithmetic_decode_is_exact_for_every_byte_and_scale(placed):
    """The interpreter's decode, also as the twin of E2M1_PLACED_PTX (its values times 2**-7)."""
    (low, high), (expected_low, expected_high) = decode_every_pair(ptx_decode=False, placed=placed)
    assert torch.equal(float32_bits(low), float32_bits(expected_low))
    assert torch.equal(float32_bits(high), float32_bits(expected_high))


# The table-lookup decode is inline PTX: only a GPU runs it (test_gemv_on_gpu.py). Here the same PTX
# text is executed by a small interpreter of the instructions it uses, so a wrong table byte, selector or
# sign mask fails on every machine; what the interpreter cannot vouch for is the hardware's reading of them.
def _bf16_of(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def _bf16_bits(value: float) -> int:
    """bf16 bits of a value exact in bf16 (the decode's values are: at most 6 significant bits)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    assert bits & 0xFFFF == 0, f"{value} is not exact in bf16: the interpreter does not round"
    return bits >> 16


def _prmt(a: int, b: int, selector: int) -> int:
    source = (b << 32) | a
    out = 0
    for i in range(4):
        nibble = (selector >> (4 * i)) & 0xF
        byte = (source >> (8 * (nibble & 7))) & 0xFF
        if nibble & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def _fma_bf16x2(a: int, b: int, c: int) -> int:
    halves = [_bf16_bits(_bf16_of((a >> s) & 0xFFFF) * _bf16_of((b >> s) & 0xFFFF) + _bf16_of((c >> s) & 0xFFFF))
              for s in (0, 16)]  # the products here have at most 6 significant bits: exact, as is the sum
    return halves[0] | (halves[1] << 16)


def _f32_of(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _f32_bits(value: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    assert _f32_of(bits) == value, f"{value} is not exact in float32: the interpreter does not round"
    return bits


def _f32_of_f16(bits: int) -> int:
    return _f32_bits(struct.unpack("<e", struct.pack("<H", bits))[0])


_PTX_OPERATIONS = {
    "mov.b32": lambda a: a,
    "and.b32": lambda a, b: a & b,
    "or.b32": lambda a, b: a | b,
    "shr.b32": lambda a, b: a >> b,
    "shl.b32": lambda a, b: (a << b) & 0xFFFFFFFF,
    "prmt.b32": _prmt,
    "fma.rn.bf16x2": _fma_bf16x2,
    "cvt.f32.f16": _f32_of_f16,
    "mul.rn.f32": lambda a, b: _f32_bits(_f32_of(a) * _f32_of(b)),
}


def run_ptx(text: str, operands: dict[str, int]) -> dict[str, int]:
    """Execute straight-line PTX of the operations above; ``operands`` maps $n to 32-bit values."""
    registers = dict(operands)
    for line in text.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        operation, arguments = line.split(None, 1)
        if operation == "mov.b32" and arguments.startswith("{"):  # mov.b32 {low, high}, word: its halves
            halves, word = arguments[1:].split("}")
            low, high = (name.strip() for name in halves.split(","))
            registers[low], registers[high] = registers[word.strip(" ,")] & 0xFFFF, registers[word.strip(" ,")] >> 16
            continue
        destination, *sources = [word.strip() for word in arguments.split(",")]
        values = [int(word, 0) if word[0].isdigit() else registers[word] for word in sources]
        registers[destination] = _PTX_OPERATIONS[operation](*values)
    return registers


def test_ptx_decode_text_interpreted_is_exact_for_every_byte_and_scale():
    packed, scales = every_byte_and_scale("cpu")
    expected_low, expected_high = (
        [_bf16_bits(v) for v in values.tolist()] for values in expected_pairs(packed, scales))
    packed, scale_bits = packed.tolist(), [_bf16_bits(s) for s in scales.tolist()]
    for start in range(0, len(packed), 4):  # four consecutive (byte, scale) pairs per invocation
        group = range(start, start + 4)
        operands = {"$4": sum(packed[g] << (8 * i) for i, g in enumerate(group)),
                    "$5": scale_bits[start] | (scale_bits[start + 1] << 16),
                    "$6": scale_bits[start + 2] | (scale_bits[start + 3] << 16)}
        result = run_ptx(E2M1_PAIRS_PTX.value, operands)
        halves = [(result[f"${r}"] >> s) & 0xFFFF for r in range(4) for s in (0, 16)]
        assert halves[:4] == [expected_low[g] for g in group], hex(operands["$4"])
        assert halves[4:] == [expected_high[g] for g in group], hex(operands["$4"])


def test_float32_ptx_decode_text_interpreted_is_exact_for_every_byte_and_scale():
    packed, scales = every_byte_and_scale("cpu")
    expected_low, expected_high = ([_f32_bits(v) for v in values.tolist()] for values in expected_pairs(packed, scales))
    packed, scale_bits = packed.tolist(), [_f32_bits(s * 16384.0) for s in scales.tolist()]
    for start in range(0, len(packed), 4):  # four consecutive (byte, scale) pairs per invocation
        group = range(start, start + 4)
        operands = {"$8": sum(packed[g] << (8 * i) for i, g in enumerate(group)),
                    **{f"${9 + i}": scale_bits[g] for i, g in enumerate(group)}}
        result = run_ptx(E2M1_FLOAT32_PTX.value, operands)
        assert [result[f"${r}"] for r in range(4)] == [expected_low[g] for g in group], hex(operands["$8"])
        assert [result[f"${r}"] for r in range(4, 8)] == [expected_high[g] for g in group], hex(operands["$8"])


def test_ptx_interpreter_tells_a_wrong_float32_placement():
    """The check above can fail: the high nibbles of bytes 1 and 3 shifted one bit too far are caught."""
    wrong = E2M1_FLOAT32_PTX.value.replace("shr.b32 a, $8, 3;", "shr.b32 a, $8, 2;")
    operands = {"$8": 0x3000, "$9": 0, "$10": _f32_bits(16384.0), "$11": 0, "$12": 0}  # byte 1 high nibble: 1.5
    assert _f32_of(run_ptx(E2M1_FLOAT32_PTX.value, operands)["$5"]) == 1.5
    assert _f32_of(run_ptx(wrong, operands)["$5"]) != 1.5


def test_ptx_interpreter_tells_a_wrong_table():
    """The check above can fail: one wrong byte in the low-byte table (1.5 read as 1.25) is caught."""
    wrong = E2M1_PAIRS_PTX.value.replace("0xC0800000, 0xC0804000", "0xA0800000, 0xC0804000")
    result = run_ptx(wrong, {"$4": 0x03, "$5": _bf16_bits(1.0), "$6": 0})
    assert _bf16_of(result["$0"] & 0xFFFF) == 1.25
    assert _bf16_of(run_ptx(E2M1_PAIRS_PTX.value, {"$4": 0x03, "$5": _bf16_bits(1.0), "$6": 0})["$0"] & 0xFFFF) == 1.5


def test_placed_ptx_decode_text_interpreted_is_exact_for_every_byte_and_scale():
    """E2M1_PLACED_PTX: every byte against every scale, the values times 2**-7 (undone on the sums)."""
    packed, scales = every_byte_and_scale("cpu")
    expected_low, expected_high = ([_bf16_bits(v * 2.0**-7) for v in values.tolist()]
                                   for values in expected_pairs(packed, scales))
    packed, scale_bits = packed.tolist(), [_bf16_bits(s * PLACED_SCALE.value) for s in scales.tolist()]
    for start in range(0, len(packed), 4):  # four consecutive (byte, scale) pairs per invocation
        group = range(start, start + 4)
        operands = {"$4": sum(packed[g] << (8 * i) for i, g in enumerate(group)),
                    "$5": scale_bits[start] | (scale_bits[start + 1] << 16),
                    "$6": scale_bits[start + 2] | (scale_bits[start + 3] << 16)}
        result = run_ptx(E2M1_PLACED_PTX.value, operands)
        halves = [(result[f"${r}"] >> s) & 0xFFFF for r in range(4) for s in (0, 16)]
        assert halves[:4] == [expected_low[g] for g in group], hex(operands["$4"])
        assert halves[4:] == [expected_high[g] for g in group], hex(operands["$4"])


def test_ptx_interpreter_tells_a_wrong_placement():
    """The check above can fail: the sign of nibble pair 1 taken from one bit too low is caught."""
    wrong = E2M1_PLACED_PTX.value.replace("shl.b32 s, w, 8;", "shl.b32 s, w, 9;")
    operands = {"$4": 0xA0, "$5": _bf16_bits(PLACED_SCALE.value) * 0x10001, "$6": 0}  # byte 0 high nibble: -1
    assert _bf16_of(run_ptx(E2M1_PLACED_PTX.value, operands)["$2"] & 0xFFFF) == -(2.0**-7)
    assert _bf16_of(run_ptx(wrong, operands)["$2"] & 0xFFFF) != -(2.0**-7)
