"""One op's bench case called on the device, for ``ncu`` to profile (issue 27: name the bound).

    ncu --clock-control none -k regex:KERNEL --launch-skip 2 --launch-count 1 --set full \
        python docs/lab/ncu_bench_case.py --op paged_decode_nvfp4kv --case 0

Builds the inputs of ``ENTRY.bench[case]`` on cuda and calls the op's kernel (or a ``bench_variants``
plan with ``--variant``, or another implementation of the contract with ``--impl MODULE:ATTR``, a third party's
adapter, whose kernel ``-k`` then picks out of its glue) ``--calls`` times, synchronising after each: the first
compiles.
"""
from __future__ import annotations

import argparse
import importlib
import sys

import torch

from ops.catalog import op


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", required=True)
    parser.add_argument("--case", type=int, default=0)
    parser.add_argument("--variant", help="a label of the kernel module's bench_variants")
    parser.add_argument("--impl", metavar="MODULE:ATTR", help="another implementation of the op's contract")
    parser.add_argument("--calls", type=int, default=4)
    args = parser.parse_args(argv)
    entry = op(args.op)
    kwargs = entry.bench[args.case].make(torch.device("cuda"))
    call = entry.kernel
    if args.variant:
        variants = sys.modules[entry.kernel.__module__].bench_variants(**kwargs)
        call = variants[args.variant]
    if args.impl:
        module, _, attr = args.impl.partition(":")
        call = getattr(importlib.import_module(module), attr or args.op)
    for _ in range(args.calls):
        call(**kwargs)
        torch.cuda.synchronize()
    print(f"{args.op} case {args.case} ({entry.bench[args.case].label}) {args.impl or args.variant or 'kernel'}: {args.calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
