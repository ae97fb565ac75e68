#!/usr/bin/env bash
# session-3 final call 1 (2-GPU H200): certify every Triton kernel on sm90 (a worker per GPU), then fla-core's
# verify/commit judged + its replay detail on GPU 0 while GPU 1 benches every op; then the GPU tests
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
stale=$(PYTHONPATH=. python3 docs/lab/h200_calls_2026-11-30/stale_ops.py 2>/dev/null)
echo "stale sm90 certificates: $stale" > $OUT/certify_sm90.log
( time timeout ${CERTIFY_LIMIT_S:-230} tools/certify-cells $(printf -- '--op %s ' $stale) --device cuda --backend triton --cell-timeout 150 --max-examples ${EXAMPLES:-6} \
    --gpus all --report $OUT/certify_sm90.json ) >> $OUT/certify_sm90.log 2>&1
tar cf $OUT/certificates.tar ops/*/*.cert.json
(
  export CUDA_VISIBLE_DEVICES=0
  for op in gdn_verify gdn_commit; do
    echo "\$ tools/certify-cells --op $op --impl suites.ssm.fla_adapter:$op --device cuda --max-examples 6 --no-shrink"
    timeout 70 tools/certify-cells --op $op --impl suites.ssm.fla_adapter:$op --device cuda --max-examples 6 --cell-timeout 60 --no-shrink
  done
  for recipe in '{"B":1,"Dk":64,"Dv":128,"H":1,"free_slots":1,"group":1,"layout":"contiguous","padding":"none","qk_l2norm":false,"scale":"inv_sqrt_dk","seed":8160434701979350565,"slots":"last_slot_live","state_dtype":"float32","values":"edges"}' \
                '{"B":1,"Dk":64,"Dv":128,"H":1,"free_slots":1,"group":1,"layout":"contiguous","padding":"none","qk_l2norm":false,"scale":"inv_sqrt_dk","seed":7283959653469614181,"slots":"last_slot_live","state_dtype":"bfloat16","values":"edges"}'; do
    echo "\$ python -m suites.ssm.fla_replay_detail '$recipe' --device cuda"
    timeout 40 python3 -m suites.ssm.fla_replay_detail "$recipe" --device cuda
  done
) > $OUT/fla_h200.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout ${BENCH_LIMIT_S:-200} tools/bench $(printf -- "--op %s " paged_decode fp8_gemv nvfp4_gemv nvfp4_quantize gdn_decode gdn_verify rms_norm_gated greedy_argmax strict_accept rollback_restore rollback_save) --out $OUT/bench_h200.md > $OUT/bench.log 2>&1
wait
timeout ${TESTS_LIMIT_S:-120} python3 -m pytest ${GPU_TESTS:-} -v --tb=short -p no:cacheprovider -n 4 > $OUT/pytest_h200.log 2>&1
for f in $OUT/*.log; do echo "== $f"; tail -n 3 "$f"; done
