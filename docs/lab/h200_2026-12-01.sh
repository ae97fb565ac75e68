#!/usr/bin/env bash
# The 2026-12-01 H200 lease, one phase a device call (each within its 10-minute limit; results under $OUT):
#   certify OP...    certify-cells on sm90 for the named ops (default: every op), EXAMPLES draws a cell
#                    (default 10), TAG names the outputs; the certificates and run reports come back in a tar
#   tests            the GPU tests of this session's changes (hostile implementations, separation,
#                    NVFP4-KV decode, the reshaped kernels)
#   thirdparty       every third-party adapter (suites/thirdparty, fla-core) judged through the battery
#   bench            tools/bench op by op: our kernels, the stock op and its third-party implementations
# Carried wheels in .whl/ are installed once, by tools/install-wheels when it is there.
set -uo pipefail
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then sed -n '2,9p' "$0" | cut -c3-; exit 0; fi
phase=${1:?usage: docs/lab/h200_2026-12-01.sh certify|tests|thirdparty|bench}
shift
out=${OUT:?set OUT to the folder that comes back}
export PYTHONUNBUFFERED=1
if [[ ":${PYTHONPATH:-}:" != *:/tmp/site:* ]] && compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
judge() {  # judge LABEL CERTIFY-ARGS...: one third-party run, its JSON report and log under $out/thirdparty
    local label=$1; shift
    timeout "${JUDGE_LIMIT_S:-120}" tools/certify-cells --device cuda --max-examples "${EXAMPLES:-6}" --cell-timeout 100 \
        --report "$out/thirdparty/$label.json" "$@" > "$out/thirdparty/$label.log" 2>&1
    echo "$label: exit $? ($(tail -1 "$out/thirdparty/$label.log"))"
}
case "$phase" in
certify)
    ops=(); for op in "$@"; do ops+=(--op "$op"); done
    tag=${TAG:-all}
    start=$(date +%s)
    timeout "${CERTIFY_LIMIT_S:-560}" tools/certify-cells --device cuda --cell-timeout 200 --max-examples "${EXAMPLES:-10}" \
        "${ops[@]}" --report "$out/certify_sm90_$tag.json" > "$out/certify_sm90_$tag.log" 2>&1
    echo "certify $tag: exit $?, $(( $(date +%s) - start )) s wall"
    tail -3 "$out/certify_sm90_$tag.log"
    tar cf "$out/certificates_$tag.tar" ops/*/*.cert.json $(ls ops/*/*.sm90.report.json 2>/dev/null)
    ;;
tests)
    timeout "${TESTS_LIMIT_S:-420}" python3 -m pytest -m sm90 -v -p no:cacheprovider -rfEs --tb=short \
        suites/faults/test_hostile_impls.py suites/faults/test_separation.py suites/faults/test_isolation.py \
        suites/attention/test_paged_decode_nvfp4kv.py suites/attention/test_paged_decode_on_gpu.py \
        suites/gemm/test_gemv_on_gpu.py suites/quant/test_nvfp4_quantize_on_gpu.py suites/norm/test_rms_norm_gated.py \
        > "$out/pytest_h200.log" 2>&1
    echo "tests: exit $?"; grep -E "FAILED|ERROR|passed|failed" "$out/pytest_h200.log" | tail -15
    ;;
thirdparty)
    mkdir -p "$out/thirdparty"
    judge torch_scaled_mm --op fp8_gemv --impl suites.thirdparty.torch_scaled_mm:fp8_gemv
    judge liger_rmsnorm --op rms_norm_gated --cell plain_rms_norm --impl suites.thirdparty.liger_rmsnorm:rms_norm_gated
    judge fla_rmsnorm --op rms_norm_gated --impl suites.thirdparty.fla_rmsnorm:rms_norm_gated
    judge torchao_nvfp4 --op nvfp4_quantize --impl suites.thirdparty.torchao_nvfp4:nvfp4_quantize
    judge sglang_decode --op paged_decode --impl suites.thirdparty.sglang_decode:paged_decode
    judge torch_native --op greedy_argmax --op strict_accept --op rollback_save --op rollback_restore \
        --impl suites.thirdparty.torch_native
    judge fla_gdn --op gdn_decode --op gdn_verify --op gdn_commit --impl suites.ssm.fla_adapter
    tar cf "$out/thirdparty.tar" -C "$out" thirdparty && rm -r "$out/thirdparty"
    ;;
bench)  # one tools/bench run an op: our kernels, the stock op and the op's third-party implementations side by side
    mkdir -p "$out/bench"
    tp=suites.thirdparty
    while read -r op impls; do
        args=(--op "$op"); for impl in $impls; do args+=(--impl "$impl"); done
        timeout "${BENCH_OP_LIMIT_S:-75}" tools/bench "${args[@]}" --out "$out/bench/$op.md" > /dev/null 2>&1
        echo "bench $op: exit $?"
    done <<LIST
greedy_argmax $tp.torch_native:greedy_argmax
strict_accept $tp.torch_native:strict_accept
rollback_restore $tp.torch_native:rollback_restore
rollback_save $tp.torch_native:rollback_save
fp8_gemv $tp.torch_scaled_mm:fp8_gemv
nvfp4_gemv
nvfp4_quantize $tp.torchao_nvfp4:nvfp4_quantize
rms_norm_gated $tp.liger_rmsnorm:rms_norm_gated $tp.fla_rmsnorm:rms_norm_gated
paged_decode $tp.sglang_decode:paged_decode
paged_decode_nvfp4kv
gdn_decode
gdn_verify
LIST
    tar cf "$out/bench.tar" -C "$out" bench && rm -r "$out/bench"
    ;;
*) echo "unknown phase $phase (certify|tests|thirdparty|bench)" >&2; exit 2 ;;
esac
