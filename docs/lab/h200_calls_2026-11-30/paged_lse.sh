#!/usr/bin/env bash
# session-3: the paged_decode dense_bf16_kv lse finding — replayed on the kernel now and on the kernel before this
# session (ec1d8b7), the ledger checked, and paged_decode re-certified with the cell quarantined
set -uo pipefail
export PYTHONUNBUFFERED=1
# the kernel before this session, importable as gpu.old_paged_decode (run from a clone with its history)
mkdir -p gpu && git show ec1d8b7:ops/attention/paged_decode.py > gpu/old_paged_decode.py || exit 2
recipe='{"B": 2, "M": 1, "S": 16, "Hkv": 1, "group": 2, "D": 64, "T": null, "kv_dtype": "bfloat16", "lengths": "ragged", "holes": false, "values": "normal", "layout": "contiguous", "sm_scale": 0.125, "kv_scale": 1.0, "seed": 0}'
{
echo "\$ tools/certify-cells --op paged_decode --cell dense_bf16_kv --device cuda --replay '$recipe'"
printf 'version: 1\nquarantine: []\n' > /tmp/empty_quarantine.yml
timeout 60 tools/certify-cells --op paged_decode --cell dense_bf16_kv --device cuda --cell-timeout 50 --quarantine /tmp/empty_quarantine.yml --replay "$recipe"
echo "\$ tools/certify-cells --op paged_decode --cell dense_bf16_kv --device cuda --impl gpu.old_paged_decode:paged_decode --replay '$recipe'   # the kernel at ec1d8b7"
timeout 60 tools/certify-cells --op paged_decode --cell dense_bf16_kv --device cuda --cell-timeout 50 --impl gpu.old_paged_decode:paged_decode --replay "$recipe"
echo "\$ tools/certify-cells --check-quarantine --device cuda --max-examples 10"
timeout 80 tools/certify-cells --check-quarantine --device cuda --max-examples 10 --cell-timeout 60
} > $OUT/paged_decode_lse_h200.log 2>&1
timeout 120 tools/certify-cells --op paged_decode --device cuda --backend triton --cell-timeout 100 --max-examples 10 --gpus all     --report $OUT/certify_paged_sm90.json > $OUT/certify_paged_sm90.log 2>&1
tar cf $OUT/paged_certificate.tar ops/attention/paged_decode.cert.json
tail -n 4 $OUT/*.log
