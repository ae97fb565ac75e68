#!/usr/bin/env bash
# The H200 run of issue 7 (rms_norm_gated, Triton and CuTe DSL), in the two calls the carried DSL needs
# (docs/ops/rms_norm_gated.md). Run from the repository root on the GPU machine:
#   docs/lab/gpu-run-cute.sh triton [EXAMPLES]   call 1: certify the Triton kernel on sm90, bench it
#   docs/lab/gpu-run-cute.sh cute [EXAMPLES]     call 2: install the carried DSL and quack, certify the CuTe
#                                             kernel, judge quack's RMSNorm on plain_rms_norm, bench both
# The carried parts: in .whl/cutlass/ (this call's) and WHEELS_FROM (default /tmp/cutlass-parts, where the
# earlier call copied its own: docs/ops/rms_norm_gated.md, "Carrying").
# EXAMPLES: Hypothesis draws per cell besides its corners (default 30); quack gets a third of them (each
# new H costs it a compile). Each step has a time limit so that a call ends inside the device tool's 10
# minutes with its certificate, log and bench table in $OUT (else /tmp/cute-run).
set -uo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  -h|--help) sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
  triton|cute) ;;
  *) echo "usage: docs/lab/gpu-run-cute.sh triton|cute [EXAMPLES] (see --help)" >&2; exit 2 ;;
esac
stage="$1"
examples="${2:-30}"
out="${OUT:-/tmp/cute-run}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
quack() {  # judge quack's RMSNorm through the adapter's entry point $1 on the one cell it implements
  timeout 100 python3 tools/certify-cells --op rms_norm_gated --cell plain_rms_norm --device cuda --cell-timeout 90 --no-shrink \
    --max-examples $((examples / 3)) --impl "suites.norm.quack_adapter:$1"
}
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  if [ "$stage" = cute ]; then
    # this call's carried parts join the earlier call's, kept in /tmp between the calls of one lease
    parts="${WHEELS_FROM:-/tmp/cutlass-parts}"; mkdir -p "$parts"; cp .whl/cutlass/* "$parts"/ 2>/dev/null
    exports="$(python3 tools/install-wheels --from "$parts" --target /tmp/cutlass-dsl)" || exit 1
    eval "$exports"
    python3 -c "import cutlass, quack; print('nvidia-cutlass-dsl', cutlass.__version__, '| quack-kernels', quack.__version__)"
    # each step announced, a stack dump if one hangs: whether the host or the kernel would stall certify
    timeout 60 python3 docs/lab/cute_diagnose.py
    echo "cute-diagnose: exit $?"
  fi
  timeout 300 python3 tools/certify-cells --op rms_norm_gated --backend "$stage" --device cuda --cell-timeout 120 \
    --max-examples "$examples"
  echo "certify-cells $stage: exit $?"
  if [ "$stage" = cute ]; then
    # as a user calls quack; only if that fails, again on contiguous copies, to tell layout from arithmetic
    quack rms_norm_gated || quack rms_norm_gated_contiguous
    echo "certify-cells quack: exit $?"
  fi
  timeout 60 python3 tools/bench --op rms_norm_gated --variants --out "$out/bench_rms_norm_gated_$stage.md"
  echo "bench: exit $?"
} 2>&1 | tee "$out/gpu-run-$stage.log"
cp ops/norm/rms_norm_gated*.cert.json "$out/" 2>/dev/null
exit 0
