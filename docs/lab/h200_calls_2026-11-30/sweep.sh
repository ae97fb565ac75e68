#!/usr/bin/env bash
# session-3 call 2 (2-GPU H200): launch-plan/design sweep of the ops whose targets were missed, one GPU per half,
# then the GPU-only checks of the new inline PTX (quantize lean paths, GEMV float32 decode)
set -uo pipefail
export PYTHONUNBUFFERED=1
limit=${SWEEP_LIMIT_S:-420}
CUDA_VISIBLE_DEVICES=0 timeout $limit tools/bench --variants --op fp8_gemv --op nvfp4_gemv --op rms_norm_gated --out $OUT/bench_variants_gemv_rms.md > $OUT/sweep_gemv_rms.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $limit tools/bench --variants --op nvfp4_quantize --op paged_decode --out $OUT/bench_variants_quantize_paged.md > $OUT/sweep_quantize_paged.log 2>&1 &
wait
timeout ${CHECK_LIMIT_S:-80} python3 -m pytest suites/gemm/test_gemv_on_gpu.py suites/quant/test_nvfp4_quantize.py -k "ptx_decode or lean or e4m3_by_cvt or bf16x2 or variant" \
    -v --tb=short -p no:cacheprovider -n 4 > $OUT/pytest_ptx_h200.log 2>&1
tail -3 $OUT/*.log
