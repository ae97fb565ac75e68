"""Issue 27: nvfp4_gemv's shared-memory traffic as Triton lays it out, read from the sm_90a TTGIR on a machine with
no GPU: each ``local_alloc`` (a store from registers) and ``local_load`` (a load into registers) of the main loop
between a distributed ``#ttg.linear`` layout and a ``#ttg.swizzled_shared`` one, and the bank conflicts its
vector accesses make, counted from the two layouts as the hardware serves them.

A warp's shared access of w bytes a lane is served in phases of 128 / w lanes (8 for 16-byte vectors, 16 for 8,
32 for 4); a phase takes as many wavefronts as the most distinct 4-byte words it asks of one of the 32 banks (one
word asked by several lanes is a broadcast: once). The vector a lane moves is the run of registers holding
consecutive columns in both layouts (at most 16 bytes). Conflicts are counted for warp 0 (the others are the same
up to their rows' offset, a multiple of the row's bytes).

    python3 docs/lab/nvfp4_gemv_shared_static.py [--rows M ...]

Default: the bench shapes' Triton plans at M = 1 (CUDA cores) and M = 16 (tensor cores), N = K = 8192.
"""
from __future__ import annotations

import argparse
import ast
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.compile_receipts import prepare_environment  # noqa: E402

prepare_environment()

from tools.compile_receipts import Launch, compile_launch, recorded_launches  # noqa: E402

BANKS, BANK_BYTES, WARP = 32, 4, 32
LINEAR = re.compile(r"^#(linear\d*) = #ttg\.linear<\{register = (\[.*?\]), lane = (\[.*?\]), warp = (\[.*?\]), block")
SHARED = re.compile(r"^#(shared\d*) = #ttg\.swizzled_shared<\{vec = (\d+), perPhase = (\d+), maxPhase = (\d+), "
                    r"order = \[([\d, ]+)\]")
STORE = re.compile(r"ttg\.local_alloc %\S+ : \(tensor<([\dx]+)x(\w+), #(linear\d*)>\) -> !ttg\.memdesc<[\dx]+x\w+, "
                   r"#(shared\d*)")
LOAD = re.compile(r"ttg\.local_load .*: !ttg\.memdesc<([\dx]+)x(\w+), #(shared\d*), .*?> -> tensor<[\dx]+x\w+, "
                  r"#(linear\d*)>")
BYTES = {"i8": 1, "i16": 2, "bf16": 2, "f16": 2, "i32": 4, "f32": 4}


def bench_launches() -> dict[int, Launch]:
    """M -> the Triton kernel's launch of nvfp4_gemv's bench case of M rows (N = K = 8192) with an H200's plan,
    recorded, not run (``tools/compile_receipts``' recording): the default plan's at M = 1, the tensor-core plan's
    (``TENSOR_CORE_SHAPE``, a bench variant) at M > 1, where the default is the Gluon kernel, whose decoded tile
    never reaches shared memory (its receipts: no shared bytes)."""
    from ops.gemm.gemv_launch import gemv_plan
    from ops.gemm.nvfp4_gemv import E2M1_BITS, TENSOR_CORE_SHAPE
    from tools.compile_receipts import H200_SMS

    found = {}
    for recorded in recorded_launches(["nvfp4_gemv"], variants=True):
        rows = int(re.search(r": M=(\d+) ", recorded[0].origin)[1])
        plan = gemv_plan(8192, 8192, E2M1_BITS, H200_SMS, False, TENSOR_CORE_SHAPE, rows)
        wanted = "default" if rows == 1 else TENSOR_CORE_SHAPE.label(plan.splits)
        found[rows] = next(launch for launch in recorded if launch.kernel.fn.__name__ == "_nvfp4_gemv_tiles"
                           and launch.origin.endswith(f": {wanted}"))
    return found


def layouts(ttgir: str) -> tuple[dict, dict]:
    linear, shared = {}, {}
    for line in ttgir.splitlines():
        if match := LINEAR.match(line):
            linear[match[1]] = {part: ast.literal_eval(match[index]) for index, part in
                                ((2, "register"), (3, "lane"), (4, "warp"))}
        elif match := SHARED.match(line):
            shared[match[1]] = (int(match[2]), int(match[3]), int(match[4]), [int(v) for v in match[5].split(",")])
    return linear, shared


def coordinates(layout: dict, kind: str, index: int, rank: int) -> list[int]:
    """The tensor coordinates ``layout`` gives register, lane or warp ``index`` (an XOR of its bases)."""
    found = [0] * rank
    for bit, basis in enumerate(layout[kind]):
        if index >> bit & 1:
            found = [a ^ b for a, b in zip(found, basis)]
    return found


def shared_offset(coordinate: list[int], shape: list[int], swizzle: tuple, element_bytes: int) -> int:
    """Byte offset of a 2-D (or 1-D) element in a swizzled shared layout of ``shape`` (order [1, 0]: columns fastest)."""
    vec, per_phase, max_phase, order = swizzle
    if len(shape) == 1:
        return coordinate[0] * element_bytes
    assert order == [1, 0], order
    row, col = coordinate
    phase = (row // per_phase) % max_phase
    col = ((col // vec) ^ phase) * vec + col % vec
    return (row * shape[1] + col) * element_bytes


def conflicts(layout: dict, shape: list[int], swizzle: tuple, element_bytes: int) -> dict:
    """Vector width, accesses a lane, and the wavefronts warp 0 takes against the fewest possible, for the moves
    of every register of ``layout`` between registers and ``swizzle``'d shared memory."""
    rank, registers = len(shape), 1 << len(layout["register"])
    # the run of registers whose columns are consecutive in both layouts, up to 16 bytes
    run = 1
    while run < registers and run * element_bytes < 16:
        step = coordinates(layout, "register", run, rank)
        if step[-1] != run or any(step[:-1]):
            break
        first = coordinates(layout, "register", 0, rank)
        if shared_offset([*first[:-1], first[-1] + run], shape, swizzle, element_bytes) != \
                shared_offset(first, shape, swizzle, element_bytes) + run * element_bytes:
            break
        run *= 2
    width = run * element_bytes
    lanes_a_phase = min(WARP, 128 // width)
    total = ideal = 0
    for vector in range(registers // run):
        addresses = []
        for lane in range(WARP):
            where = [a ^ b for a, b in zip(coordinates(layout, "register", vector * run, rank),
                                           coordinates(layout, "lane", lane, rank))]
            addresses.append(shared_offset(where, shape, swizzle, element_bytes))
        for start in range(0, WARP, lanes_a_phase):
            words: dict[int, set] = {}
            for address in addresses[start:start + lanes_a_phase]:
                for word in range(address // BANK_BYTES, (address + width) // BANK_BYTES):
                    words.setdefault(word % BANKS, set()).add(word)
            distinct = len({a for a in addresses[start:start + lanes_a_phase]})
            total += max(len(w) for w in words.values())
            ideal += max(1, -(-distinct * width // (BANKS * BANK_BYTES)))
    return {"vector bytes": width, "accesses a lane": registers // run, "wavefronts": total, "fewest": ideal}


def report(rows: int, launch: Launch) -> list[str]:
    label, receipt = compile_launch(launch, "sm_90a")
    compiled = launch.kernel.run(*launch.args, grid=(1,), warmup=True, **launch.kwargs)
    ttgir = compiled.asm["ttgir"]
    linear, shared = layouts(ttgir)
    lines = [f"M = {rows}: {label}", f"  registers {receipt['registers']}, shared {receipt['shared_bytes']} bytes"]
    seen = set()
    for line in ttgir.splitlines():
        for pattern, what in ((STORE, "store"), (LOAD, "load")):
            match = pattern.search(line)
            if not match:
                continue
            if what == "store":
                dims, dtype, distributed, swizzled = match.groups()
            else:
                dims, dtype, swizzled, distributed = match.groups()
            shape = [int(v) for v in dims.split("x")]
            shape = shape[-2:] if len(shape) > 1 else shape
            key = (what, tuple(shape), dtype, distributed, swizzled)
            if key in seen or distributed not in linear or swizzled not in shared:
                continue
            seen.add(key)
            counted = conflicts(linear[distributed], shape, shared[swizzled], BYTES[dtype])
            lines.append(f"  {what} {'x'.join(map(str, shape))} {dtype}: #{distributed} <-> #{swizzled} "
                         f"{shared[swizzled]}: {counted['accesses a lane']} accesses of {counted['vector bytes']} "
                         f"bytes a lane, {counted['wavefronts']} wavefronts a warp against {counted['fewest']} "
                         f"({counted['wavefronts'] / counted['fewest']:.2f}x)")
            lines.append(f"    #{distributed}: {linear[distributed]}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, action="append", help="M of a bench case (default: 1 and 16)")
    args = parser.parse_args(argv)
    launches = bench_launches()
    for rows in args.rows or [1, 16]:
        if rows not in launches:
            parser.error(f"--rows {rows}: the bench cases have M = {', '.join(map(str, sorted(launches)))}")
        print("\n".join(report(rows, launches[rows])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
