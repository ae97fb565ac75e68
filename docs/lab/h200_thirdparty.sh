#!/usr/bin/env bash
# Issue 29 on the H200: every third-party adapter through every oracle at the sm90 policy depth, then benched
# with its glue timed apart. One phase a device call (each ends inside the tool's 10 minutes); the queue, its
# carries and minutes: docs/thirdparty/h200-queue.md. Results go into $OUT/thirdparty.tar AS EACH STEP ENDS
# (a call cut short still brings back every step it finished) with a one-line summary a step in $OUT/queue.log.
#   judge GROUP...     certify-cells --impl per adapter of the groups: vllm vllm-gdn native norms wheels fla-gdn flashinfer
#                      quack (after docs/lab/h200_2026-12-02b.sh dsl in the same lease, carrying .whl/quack)
#   bench GROUP...     tools/bench per op of the groups, our kernels, the stock op and the adapters side by side
#   flashinfer-setup   install the carried FlashInfer, build its decode kernels (JIT, nvcc), run the probes
# EXAMPLES draws a cell (default: certify-cells' own, the policy's depth on this GPU: 220 on sm90 since 2026-12-06c; the step
# limits below were sized at 14); WORKERS cells at once (default 1), CELL_TIMEOUT_S a cell's limit (default 150);
# LIMIT_SCALE multiplies every step's time limit.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" || $# -eq 0 ]]; then sed -n '2,12p' "$0" | cut -c3-; exit 0; fi
phase=$1; shift
out=${OUT:?set OUT to the folder that comes back}
# FlashInfer JIT builds and its log live outside the tree: an implementation host sees the tree read-only
export PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer-jit MAX_JOBS=16
tp=suites.thirdparty
mkdir -p "$out/steps"

record() {  # record LABEL STATUS: one line in queue.log, the step's files appended to thirdparty.tar
    echo "$(date -u +%H:%M:%S) $1: $2" | tee -a "$out/queue.log"
    tar rf "$out/thirdparty.tar" -C "$out/steps" . 2>/dev/null && rm -rf "$out/steps"/*
}
limit() { echo $(( $1 * ${LIMIT_SCALE:-1} )); }
wheels() {  # wheels NAME: install the carried .whl/NAME (tools/pack-wheels parts) once per machine, then use it
    local exports=/tmp/site-$1.exports
    if [[ ! -s $exports ]]; then
        python3 tools/install-wheels --from ".whl/$1" --target "/tmp/site-$1" > "$exports.new" || return 1
        mv "$exports.new" "$exports"
    fi
    eval "$(cat "$exports")"
}
judge() {  # judge LABEL SECONDS CERTIFY-ARGS...
    local label=$1 seconds; seconds=$(limit "$2"); shift 2
    local start=$SECONDS
    timeout "$seconds" tools/certify-cells --device cuda ${EXAMPLES:+--max-examples "$EXAMPLES"} -n "${WORKERS:-1}" --cell-timeout "${CELL_TIMEOUT_S:-150}" \
        --report "$out/steps/$label.json" "$@" > "$out/steps/$label.log" 2>&1
    local status=$?
    record "judge $label" "exit $status in $((SECONDS - start)) s of $seconds: $(tail -1 "$out/steps/$label.log")"
}
bench() {  # bench OP SECONDS IMPL...: bench_GROUP_OP.md ($group: the group being run)
    local op=$1 seconds; seconds=$(limit "$2"); shift 2
    local args=(--op "$op") impl name="bench_${group}_$op"
    for impl in "$@"; do args+=(--impl "$impl"); done
    timeout "$seconds" tools/bench "${args[@]}" --out "$out/steps/$name.md" > "$out/steps/$name.log" 2>&1
    record "$name" "exit $?"
}

case "$phase" in
judge)
    for group in "$@"; do
        case "$group" in
        vllm|vllm-gdn)   # the carried vLLM sources (.thirdparty); no wheel. vllm-gdn: its gated delta rule alone
            if [[ $group == vllm ]]; then
                judge vllm_rejection 90 --op strict_accept --impl $tp.vllm_rejection:strict_accept
                judge vllm_decode 240 --op paged_decode --impl $tp.vllm_decode:paged_decode
            fi
            judge vllm_gdn 240 --op gdn_decode --op gdn_verify --op gdn_commit --impl $tp.vllm_gdn ;;
        native)  # torch's own ops: no wheel
            judge torch_native 240 --op greedy_argmax --op strict_accept --op rollback_save --op rollback_restore \
                --impl $tp.torch_native
            judge torch_scaled_mm 90 --op fp8_gemv --impl $tp.torch_scaled_mm:fp8_gemv ;;
        norms)  # fla-core's and liger-kernel's RMSNorm: .whl/adapters
            wheels adapters || { record "wheels adapters" "not installed"; continue; }
            judge fla_rmsnorm 150 --op rms_norm_gated --impl $tp.fla_rmsnorm:rms_norm_gated
            judge liger_rmsnorm 60 --op rms_norm_gated --cell plain_rms_norm --impl $tp.liger_rmsnorm:rms_norm_gated ;;
        wheels)  # torchao, sglang: .whl/adapters
            wheels adapters || { record "wheels adapters" "not installed"; continue; }
            judge torchao_nvfp4 60 --op nvfp4_quantize --impl $tp.torchao_nvfp4:nvfp4_quantize
            judge sglang_decode 200 --op paged_decode --impl $tp.sglang_decode:paged_decode ;;
        fla-gdn)  # fla-core: .whl/adapters
            wheels adapters || { record "wheels adapters" "not installed"; continue; }
            judge fla_gdn 200 --op gdn_decode --op gdn_verify --op gdn_commit --impl suites.ssm.fla_adapter ;;
        flashinfer)  # after flashinfer-setup (its kernels built)
            wheels flashinfer || { record "wheels flashinfer" "not installed"; continue; }
            judge flashinfer_decode 300 --op paged_decode --impl $tp.flashinfer_decode:paged_decode ;;
        quack)  # quack-kernels' RMSNorm on the CuTe DSL: the DSL installed by the lab script's dsl phase, .whl/quack
            { wheels cutedsl && wheels quack; } || { record "wheels quack" "not installed (dsl first)"; continue; }
            judge quack_rmsnorm 240 --op rms_norm_gated --cell plain_rms_norm --impl suites.norm.quack_adapter:rms_norm_gated ;;
        *) record "judge $group" "unknown group (vllm vllm-gdn native norms wheels fla-gdn flashinfer quack)" ;;
        esac
    done ;;
bench)
    for group in "$@"; do
        case "$group" in
        vllm)
            bench strict_accept 60 $tp.vllm_rejection:strict_accept $tp.torch_native:strict_accept
            bench paged_decode 90 $tp.vllm_decode:paged_decode
            bench gdn_decode 60 $tp.vllm_gdn:gdn_decode
            bench gdn_verify 60 $tp.vllm_gdn:gdn_verify ;;
        native)
            bench fp8_gemv 60 $tp.torch_scaled_mm:fp8_gemv
            bench greedy_argmax 45 $tp.torch_native:greedy_argmax ;;
        wheels)
            wheels adapters || { record "wheels adapters" "not installed"; continue; }
            bench rms_norm_gated 75 $tp.liger_rmsnorm:rms_norm_gated $tp.fla_rmsnorm:rms_norm_gated
            bench nvfp4_quantize 45 $tp.torchao_nvfp4:nvfp4_quantize
            bench paged_decode 90 $tp.sglang_decode:paged_decode
            bench gdn_decode 60 suites.ssm.fla_adapter:gdn_decode ;;
        flashinfer)
            wheels flashinfer || { record "wheels flashinfer" "not installed"; continue; }
            bench paged_decode 120 $tp.flashinfer_decode:paged_decode ;;
        *) record "bench $group" "unknown group (vllm native wheels flashinfer)" ;;
        esac
    done ;;
flashinfer-setup)
    wheels flashinfer || { record "wheels flashinfer" "not installed: carry every part of .whl/flashinfer"; exit 1; }
    python3 -c "import flashinfer, tvm_ffi; print('flashinfer', flashinfer.__version__, 'tvm_ffi', tvm_ffi.__version__)"
    timeout "$(limit 420)" python3 docs/lab/flashinfer_h200.py warmup > "$out/steps/flashinfer_warmup.log" 2>&1
    record "flashinfer warmup" "exit $? ($(tail -1 "$out/steps/flashinfer_warmup.log"))"
    timeout "$(limit 90)" python3 docs/lab/flashinfer_h200.py probe > "$out/steps/flashinfer_probe.log" 2>&1
    record "flashinfer probe" "exit $? ($(tail -1 "$out/steps/flashinfer_probe.log"))" ;;
*) echo "unknown phase $phase (judge, bench, flashinfer-setup)" >&2; exit 2 ;;
esac
