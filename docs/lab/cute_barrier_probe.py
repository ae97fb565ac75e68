"""Lab-only, on a GPU machine (issue 28): does a CuTe rms_norm_gated plan of more than one warp end?

One call of the kernel on rows as wide as a plan of THREADS threads holds, per-group (groups of 64) or one
group a row (WHOLE_ROW 1: the row's sum crosses warps through shared memory and a barrier), with or without
``amax`` (AMAX 1: the CTA's largest |y| crosses warps the same way).  The barriers run only with more than
one warp and, per group, only with amax: which of the four ends tells whether a barrier is what hangs
(docs/ops/rms_norm_gated.md, "Issue 28").  A hang dumps the stack after 25 s and exits 1.
"""
import faulthandler
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the repository root: run from a clone

from tools.cli import ArgumentParser, UsageError, run_main  # noqa: E402


def main(argv=None) -> int:
    parser = ArgumentParser(prog="docs/lab/cute_barrier_probe.py", description=__doc__.splitlines()[0],
                            epilog="Example: docs/lab/cute_barrier_probe.py 0 64 1")
    parser.add_argument("whole_row", type=int, choices=(0, 1), metavar="WHOLE_ROW", help="1: one group a row")
    parser.add_argument("threads", type=int, metavar="THREADS", help="32, 64, ... 1024: the plan's block size")
    parser.add_argument("amax", type=int, choices=(0, 1), metavar="AMAX", help="1: fold max |y| into amax")
    args = parser.parse_args(argv)
    if args.threads not in (32, 64, 128, 256, 512, 1024):
        raise UsageError(f"THREADS: {args.threads} is not a power of two from 32 to 1024")

    import torch  # after parsing: --help needs neither torch nor the DSL
    if not torch.cuda.is_available():
        raise UsageError("no CUDA device here: the CuTe DSL kernels run on GPUs only")
    from ops.norm import rms_norm_gated_cute as cute_kernel

    width = args.threads * cute_kernel.CHUNK * cute_kernel.CHUNKS_PER_THREAD
    x = torch.randn(3, width, device="cuda").to(torch.bfloat16)
    weight = torch.ones(width, device="cuda").to(torch.bfloat16)
    amax = torch.zeros(1, device="cuda") if args.amax else None
    faulthandler.dump_traceback_later(25, exit=True)
    y = cute_kernel.rms_norm_gated(x, None, weight, 1e-5, width if args.whole_row else 64, True, amax)
    torch.cuda.synchronize()
    faulthandler.cancel_dump_traceback_later()
    largest = y.abs().amax().float()
    print(f"ended {args.whole_row} {args.threads} {args.amax}: max |y| {largest.item()}, amax "
          f"{None if amax is None else amax.item()}", flush=True)
    return 0 if amax is None or amax.item() == largest.item() else 1


if __name__ == "__main__":
    run_main(main)
