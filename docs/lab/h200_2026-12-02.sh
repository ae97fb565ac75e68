#!/usr/bin/env bash
# The 2026-12-02 H200 lease (issues #24-#27), one or more phases a device call (results under $OUT):
#   draws         python -m suites.measure_draws on cuda, seeds 0,1,2, under the pinned draws (docs/draws.md)
#   tests         the GPU tests of the judge and the defences (hostile host, canary, interpreter, layouts)
#   certify OP... as docs/lab/h200_2026-12-01b.sh certify (EXAMPLES draws a cell), its tar tagged TAG
#   canary        docs/lab/canary_cost.py on cuda (issue 25.3)
set -uo pipefail
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then sed -n '2,6p' "$0" | cut -c3-; exit 0; fi
phase=${1:?usage: docs/lab/h200_2026-12-02.sh draws|tests|certify OP...|canary}
shift
out=${OUT:?set OUT to the folder that comes back}
export PYTHONUNBUFFERED=1
case "$phase" in
draws)
    start=$(date +%s)
    timeout "${DRAWS_LIMIT_S:-380}" python3 -m suites.measure_draws --device cuda --seeds 0,1,2 \
        --seconds-per-impl 30 --seconds "${DRAWS_SECONDS:-350}" > "$out/measure_draws_h200.md" 2> "$out/measure_draws_h200.err"
    echo "draws: exit $?, $(( $(date +%s) - start )) s wall"; tail -3 "$out/measure_draws_h200.err"
    ;;
tests)
    timeout "${TESTS_LIMIT_S:-170}" python3 -m pytest -m sm90 -q -p no:cacheprovider -rfEs --tb=short \
        suites/test_canary_on_gpu.py suites/test_triton_interpreter.py suites/faults/test_hostile_impls.py \
        suites/test_legal_layouts.py suites/attention/test_paged_decode_nvfp4kv.py "$@" > "$out/pytest_h200.log" 2>&1
    echo "tests: exit $?"; grep -E "FAILED|ERROR|passed|failed" "$out/pytest_h200.log" | tail -15
    ;;
certify)
    exec docs/lab/h200_2026-12-01b.sh certify "$@"
    ;;
canary)
    PYTHONPATH=. timeout "${CANARY_LIMIT_S:-240}" python3 docs/lab/canary_cost.py --device cuda --out "$out/canary_cost_h200.json" \
        > "$out/canary_cost_h200.log" 2>&1
    echo "canary: exit $?"; tail -8 "$out/canary_cost_h200.log"
    ;;
*) echo "unknown phase $phase (draws|tests|certify|canary)" >&2; exit 2 ;;
esac
