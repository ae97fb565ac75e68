#!/usr/bin/env bash
# session-3 call 3 (2-GPU H200): the second design sweep (nvfp4_gemv | paged_decode), then the GPU-only checks
# of the new inline PTX (nvfp4 placed decode, e4m3 -> fp16 of V) and the paged variants' contract test
set -uo pipefail
export PYTHONUNBUFFERED=1
limit=${SWEEP_LIMIT_S:-300}
CUDA_VISIBLE_DEVICES=0 timeout $limit tools/bench --variants --op nvfp4_gemv --out $OUT/bench_variants_nvfp4_gemv.md > $OUT/sweep_nvfp4_gemv.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $limit tools/bench --variants --op paged_decode --out $OUT/bench_variants_paged_decode.md > $OUT/sweep_paged_decode.log 2>&1 &
wait
timeout ${CHECK_LIMIT_S:-90} python3 -m pytest suites/gemm/test_gemv_on_gpu.py suites/attention/test_paged_decode_on_gpu.py \
    "suites/attention/test_paged_decode.py::test_bench_variants_keep_the_contract" -v --tb=short -p no:cacheprovider -n 4 > $OUT/pytest_ptx_h200.log 2>&1
for f in $OUT/*.log; do echo "== $f"; tail -n 3 "$f"; done
