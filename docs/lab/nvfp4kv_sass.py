"""Issue 27: the static instruction count of ``_decode_splits_nvfp4``'s main loop on sm_90a, on a machine with no GPU.

The dense bench case's plan (D = 128, a group of 4, pages of 64, 32-token tiles, 4 warps, 3 stages, dense) is
compiled by Triton's own launch path with ``tools/compile_receipts``' stand-in driver for ``GPUTarget("cuda", 90,
32)``; ptxas's report gives registers and spills, nvdisasm (Triton's ``asm["sass"]``) the SASS.  The main loop is
the backward branch of widest span; each forward branch inside it skips a region, listed with its size and its
first opcodes, so the path a tile takes (the rescale skipped while the rows' max stays; the decode path the
program chose) is the loop less the regions it skips.  One iteration is one 32-token tile: 32 x 128 K and as many V
elements, over 128 threads, so thread instructions per K/V element = warp instructions of the path x 128 / 8192.

    python3 docs/lab/nvfp4kv_sass.py [--sass FILE] [--opcodes] [--tensor-core-scores | --q-rows-in-registers]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.compile_receipts import prepare_environment  # noqa: E402

prepare_environment()

import torch  # noqa: E402 - after the environment is set
import triton.runtime.jit as jit  # noqa: E402

from ops.attention import paged_decode_nvfp4kv as kernel  # noqa: E402
from tools.compile_receipts import Launch, compile_launch  # noqa: E402

HEAD_DIM, PAGE_SIZE, KV_HEADS, GROUP = 128, 64, 8, 4
LABEL = re.compile(r"^(\.?L\w+):$")
BRANCH = re.compile(r"\bBRA\s+(?:`\()?(\.?L\w+)")


def bench_plan_compiled(tensor_core_scores: bool = False, q_rows_in_registers: bool = False):
    """The dense bench case's launch, recorded from the host wrapper (caches of two pages; the plan and the
    specialisation are the bench shape's) and compiled for sm_90a: (plan label, receipt, compiled kernel)."""
    q = torch.zeros(1, KV_HEADS * GROUP, HEAD_DIM, dtype=torch.bfloat16)
    codes = torch.zeros(2, PAGE_SIZE, KV_HEADS, HEAD_DIM // 2, dtype=torch.uint8)
    scales = torch.zeros(2, PAGE_SIZE, KV_HEADS, HEAD_DIM // 16).to(torch.float8_e4m3fn)
    launches, run = [], jit.JITFunction.run
    jit.JITFunction.run = lambda self, *args, grid, warmup, **kwargs: launches.append(Launch(self, args, kwargs, ""))
    try:
        plan = kernel.launch_plan(HEAD_DIM)
        if tensor_core_scores:   # the bench variant "scores on tensor cores (bf16 parts)"
            plan = dataclasses.replace(plan, scores_on_cuda_cores=False)
        if q_rows_in_registers:  # the bench variant "q rows in registers"
            plan = dataclasses.replace(plan, q_rows_reloaded=False)
        kernel.run_plan(plan, q, codes, scales, codes, scales, torch.tensor([448.0]),
                        torch.arange(2, dtype=torch.int32).view(1, 2),
                        torch.tensor([2 * PAGE_SIZE], dtype=torch.int32), HEAD_DIM ** -0.5)
    finally:
        jit.JITFunction.run = run
    launch = next(launch for launch in launches if launch.kernel.fn.__name__ == "_decode_splits_nvfp4")
    label, receipt = compile_launch(launch, "sm_90a")
    compiled = launch.kernel.run(*launch.args, grid=(1,), warmup=True, **launch.kwargs)
    return label, receipt, compiled


def opcode(instruction: str) -> str:
    words = [word for word in instruction.split() if not word.startswith("@")]
    return words[0].rstrip(";").split(".")[0] if words else ""


def main_loop(sass: str):
    """(instructions of the main loop, [(skipped instruction indices, branch line)]) from nvdisasm's text."""
    lines = sass.splitlines()
    labels = {LABEL.match(line).group(1): i for i, line in enumerate(lines) if LABEL.match(line)}
    backward = [(labels[m.group(1)], i) for i, line in enumerate(lines)
                if (m := BRANCH.search(line)) and labels.get(m.group(1), i) < i]
    start, end = max(backward, key=lambda span: span[1] - span[0])
    index = {}   # line number -> instruction number within the loop
    for i in range(start + 1, end + 1):
        if "\t" in lines[i] or re.match(r"^\s*/\*[0-9a-f]+\*/", lines[i]):
            index[i] = len(index)
    body = [lines[i].split("\t")[-1] for i in sorted(index)]
    skipped = []
    for i in range(start + 1, end):
        m = BRANCH.search(lines[i])
        if m and start < labels.get(m.group(1), -1) <= end and labels[m.group(1)] > i:
            inside = [index[j] for j in range(i + 1, labels[m.group(1)]) if j in index]
            skipped.append((inside, lines[i].split("\t")[-1].strip()))
    return body, skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sass", help="also write the kernel's SASS to this file")
    parser.add_argument("--opcodes", action="store_true", help="the loop's opcodes, most frequent first")
    parser.add_argument("--tensor-core-scores", action="store_true",
                        help="the plan with q . k on the tensor cores (K's three bf16 parts), not the default's "
                             "fp32 CUDA-core scores")
    parser.add_argument("--q-rows-in-registers", action="store_true",
                        help="the plan whose CUDA-core scores keep q's rows in registers, not read again every tile")
    args = parser.parse_args()
    label, receipt, compiled = bench_plan_compiled(args.tensor_core_scores, args.q_rows_in_registers)
    sass = compiled.asm["sass"]
    if args.sass:
        pathlib.Path(args.sass).write_text(sass)
    body, skipped = main_loop(sass)
    elements_per_thread = 2 * 32 * HEAD_DIM / (4 * 32)   # K and V of one tile, over 128 threads
    print(f"plan: {label}")
    print(f"registers {receipt['registers']}, spill bytes {receipt['spill_bytes']}, "
          f"shared bytes {receipt['shared_bytes']}")
    print(f"main loop: {len(body)} instructions ({len(body) / elements_per_thread:.2f} per K/V element)")
    for inside, branch in skipped:
        region = collections.Counter(opcode(body[i]) for i in inside).most_common(6)
        print(f"  skipped by '{branch}': {len(inside)} instructions (loop less these: "
              f"{(len(body) - len(inside)) / elements_per_thread:.2f} per element); {region}")
    if args.opcodes:
        print(collections.Counter(opcode(instruction) for instruction in body).most_common())
    return 0


if __name__ == "__main__":
    sys.exit(main())
