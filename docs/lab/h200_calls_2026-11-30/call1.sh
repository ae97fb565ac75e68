#!/usr/bin/env bash
# session-3 call 1: gdn fix proof + certification, fla-core judged on the H200, launch-plan sweep
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/session.log
( time timeout 100 tools/certify-cells --check-quarantine --device cuda --cell-timeout 90 --max-examples 4 ) >> $OUT/session.log 2>&1
printf 'version: 1\nquarantine: []\n' > /tmp/empty_quarantine.yml
( time timeout 150 tools/certify-cells --device cuda --op gdn_decode --op gdn_verify --op gdn_commit --quarantine /tmp/empty_quarantine.yml \
    --cell-timeout 120 --max-examples 4 --report $OUT/certify_gdn_sm90.json ) > $OUT/certify_gdn_sm90.log 2>&1
tar cf $OUT/gdn_certificates.tar ops/ssm/*.cert.json
( time timeout 130 tools/certify-cells --op gdn_decode --impl suites.ssm.fla_adapter:gdn_decode --device cuda \
    --max-examples 2 --cell-timeout 100 --no-shrink ) > $OUT/fla_h200.log 2>&1
timeout 200 tools/bench --variants --op fp8_gemv --op nvfp4_gemv --op nvfp4_quantize --op paged_decode --out $OUT/bench_variants.md >> $OUT/session.log 2>&1
tail -5 $OUT/*.log
