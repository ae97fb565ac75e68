#!/usr/bin/env bash
# The second 2026-12-01 H200 lease (issues #24-#30), one phase a device call (results under $OUT):
#   certify OP...   check the quarantine of the named ops (unless NO_QUARANTINE_CHECK); certify-cells on sm90 for
#                   them (EXAMPLES draws a cell, default 6, the sm90 policy; NO_SHRINK: failures not shrunk), with
#                   an empty ledger where a quarantined cell now passes;
#                   the certificates and run reports come back in a tar (TAG names the outputs)
#   tests           the GPU tests of this session's changes (NVFP4-KV scores, hostile host, canary, interpreter rules)
set -uo pipefail
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then sed -n '2,7p' "$0" | cut -c3-; exit 0; fi
phase=${1:?usage: docs/lab/h200_2026-12-01b.sh certify OP...|tests}
shift
out=${OUT:?set OUT to the folder that comes back}
export PYTHONUNBUFFERED=1
case "$phase" in
certify)
    ops=(); for op in "$@"; do ops+=(--op "$op"); done
    tag=${TAG:-all}
    ledger=()
    if [[ -z "${NO_QUARANTINE_CHECK:-}" ]]; then
        timeout 150 tools/certify-cells --check-quarantine --device cuda "${ops[@]}" > "$out/check_quarantine_$tag.log" 2>&1
        echo "check-quarantine $tag: exit $?"; tail -4 "$out/check_quarantine_$tag.log"
    fi
    if grep -qs "now passes" "$out/check_quarantine_$tag.log"; then
        printf 'version: 1\nquarantine: []\n' > /tmp/no_quarantine.yml
        ledger=(--quarantine /tmp/no_quarantine.yml)
    fi
    start=$(date +%s)
    timeout "${CERTIFY_LIMIT_S:-480}" tools/certify-cells --device cuda --backend triton --cell-timeout 200 \
        --max-examples "${EXAMPLES:-6}" ${NO_SHRINK:+--no-shrink} "${ops[@]}" "${ledger[@]}" --report "$out/certify_sm90_$tag.json" \
        > "$out/certify_sm90_$tag.log" 2>&1
    echo "certify $tag: exit $?, $(( $(date +%s) - start )) s wall"
    grep -E "^[a-z_0-9]+/[a-z_0-9]+: |^summary" "$out/certify_sm90_$tag.log" | cut -c1-200
    tar cf "$out/certificates_$tag.tar" ops/*/*.cert.json $(ls ops/*/*.sm90.report.json 2>/dev/null)
    ;;
tests)
    timeout "${TESTS_LIMIT_S:-300}" python3 -m pytest -m sm90 -q -p no:cacheprovider -rfEs --tb=short \
        suites/attention/test_paged_decode_nvfp4kv.py suites/faults/test_hostile_impls.py suites/test_canary_on_gpu.py \
        suites/test_triton_interpreter.py suites/test_legal_layouts.py "$@" > "$out/pytest_h200.log" 2>&1
    echo "tests: exit $?"; grep -E "FAILED|ERROR|passed|failed" "$out/pytest_h200.log" | tail -15
    ;;
*) echo "unknown phase $phase (certify|tests)" >&2; exit 2 ;;
esac
