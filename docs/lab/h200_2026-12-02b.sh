#!/usr/bin/env bash
# The second 2026-12-02 H200 lease (issues #24-#27), phases in the order given, one or more a device call
# (results under $OUT, each step under a time limit, written as it goes):
#   stock           docs/lab/paged_stock_sdpa.py: the NVFP4-KV stock op on the sparse_nvfp4_kv recipe, SDPA backend by backend
#   certify:TAG:OP,OP   certify-cells on sm90 for those ops (none named: every op) at EXAMPLES draws a cell
#                   (default 14, the measured depth), WORKERS workers on the GPU (default 1), a cell's limit
#                   CELL_TIMEOUT_S (default 200; paged_decode at 100 draws needs more), with an empty
#                   quarantine ledger (a quarantined cell that certifies loses its entry), of the BACKEND
#                   kernel (default triton; BACKEND=cute after dsl: the CuTe DSL kernel's section);
#                   the certificates, the sections' reports and the run's come back in certificates_TAG.tar
#   bench:OP        tools/bench --op OP (graph-replayed rows with the copy bandwidth of the same run)
#   variants:OP     tools/bench --op OP --variants (every launch plan of bench_variants, same table)
#   ncu:OP:KERNEL[:VARIANT]  ncu (full set, clocks free) on one call of OP's first bench case (NCU_CASE=N: the
#                   N-th; the kernel, or a bench_variants plan, or NCU_IMPL=MODULE:ATTR, a third party's adapter),
#                   kernels matching KERNEL; ncu_OP[_caseN][_IMPL][_VARIANT].txt
#   tests           the GPU tests of the judge and the defences (canary, interpreter, hostile host, layouts, paged)
#   pytest:TAG:FILE,FILE  those GPU test files alone (-m sm90; PYTEST_K: a -k expression; PYTEST_N: xdist
#                   workers), under TESTS_LIMIT_S,
#                   log pytest_h200_TAG.log
#   layouts         every op judged through suites.legal_layouts (the kernel's outputs in a legal layout drawn
#                   afresh each call, issue 24.2) at LAYOUT_EXAMPLES draws a cell (default 3), each op under
#                   LAYOUT_OP_LIMIT_S (default 60); one log, layouts_h200.log
#   canary          docs/lab/canary_cost.py on cuda (issue 25.3), CANARY_STEPS timed steps a setting (default 200)
#   ahead:FILE      tools/compile-ahead compile FILE on every core (the records made here, carried): Triton's cache
#                   filled before a certify phase; ahead_FILE.log
#   against:FOLDER  docs/lab/paged_orders_against.py (from docs/lab/pending/judge-side-2026-12-05d.patch) on cuda: the
#                   paged references' orders and truth against the earlier ones in FOLDER (carried: `git archive
#                   HEAD references/attention | tar x -C FOLDER` here), AGAINST_DRAWS draws a cell (default 5),
#                   recipes round the cells until AGAINST_SECONDS an op (default 50); against_h200.log, with the
#                   orders' milliseconds an example computed together and one at a time
#   dsl             the CuTe DSL's libraries and apache-tvm-ffi installed from tools/pack-wheels parts carried in
#                   .whl/cut-a (one call), .whl/cut-b and .whl/tvmffi (the next: parts gather in /tmp/cutlass-parts,
#                   kept between the calls of a lease), the later phases of the same call then see the CuTe kernel
#                   (docs/results/2026-12-06f/README.md: how the parts were packed and split); dsl.log
#   scale           tools/scale-measure on one GPU: every cell of the catalog (the CuTe kernel's too after dsl) at
#                   EXAMPLES draws a cell (default 100, issue 26's), WORKERS workers (default 6), no warm-up (fill
#                   Triton's cache with ahead:FILE first), under SCALE_LIMIT_S (default 430); scale_1gpu.md, scale.log
#   profile:TAG:OP,OP  cProfile of certify-cells on cuda (--no-isolate) and of its implementation host
#                   (docs/lab/profile_host.py) at EXAMPLES draws a cell (default 40, issue 26's baseline), under
#                   PROFILE_LIMIT_S; profile_TAG.log, profile_TAG_judge.txt, profile_TAG_host.txt
set -uo pipefail
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" || $# -eq 0 ]]; then sed -n '2,/^set /p' "$0" | grep '^#' | cut -c3-; exit 0; fi
out=${OUT:?set OUT to the folder that comes back}
export PYTHONUNBUFFERED=1
printf 'version: 1\nquarantine: []\n' > /tmp/no_quarantine.yml
for phase in "$@"; do
    start=$(date +%s)
    case "$phase" in
    stock)
        timeout 90 python3 docs/lab/paged_stock_sdpa.py > "$out/paged_stock_sdpa_h200.log" 2>&1
        echo "stock: exit $?"; tail -6 "$out/paged_stock_sdpa_h200.log"
        ;;
    certify:*)
        IFS=: read -r _ tag names <<< "$phase"
        ops=(); for op in ${names//,/ }; do ops+=(--op "$op"); done
        timeout "${CERTIFY_LIMIT_S:-480}" tools/certify-cells --device cuda --backend "${BACKEND:-triton}" --cell-timeout "${CELL_TIMEOUT_S:-200}" \
            --max-examples "${EXAMPLES:-14}" ${WORKERS:+-n "$WORKERS"} "${ops[@]}" --quarantine /tmp/no_quarantine.yml \
            --report "certify_sm90_$tag.json" > "$out/certify_sm90_$tag.log" 2>&1
        echo "certify $tag: exit $?"
        grep -E "^[a-z_0-9]+/[a-z_0-9]+: |^summary|wrote" "$out/certify_sm90_$tag.log" | cut -c1-220
        tar cf "$out/certificates_$tag.tar" ops/*/*.cert.json $(ls ops/*/*.sm90.report.json "certify_sm90_$tag.json" 2>/dev/null)
        ;;
    bench:*)
        op=${phase#bench:}
        timeout "${BENCH_LIMIT_S:-120}" tools/bench --op "$op" --out "$out/bench_$op.md" > "$out/bench_$op.log" 2>&1
        echo "bench $op: exit $?"; tail -8 "$out/bench_$op.log"
        ;;
    variants:*)
        op=${phase#variants:}
        timeout "${BENCH_LIMIT_S:-120}" tools/bench --op "$op" --variants --out "$out/bench_${op}_variants.md" \
            > "$out/bench_${op}_variants.log" 2>&1
        echo "variants $op: exit $?"; tail -14 "$out/bench_${op}_variants.log"
        ;;
    ncu:*)
        IFS=: read -r _ op kernel variant <<< "$phase"
        timeout "${NCU_LIMIT_S:-150}" ncu --clock-control none -k "regex:$kernel" --launch-skip 2 --launch-count 1 \
            --set full env PYTHONPATH=. python3 docs/lab/ncu_bench_case.py --op "$op" ${variant:+--variant "$variant"} \
            ${NCU_CASE:+--case "$NCU_CASE"} ${NCU_IMPL:+--impl "$NCU_IMPL"} \
            > "$out/ncu_${op}${NCU_CASE:+_case$NCU_CASE}${NCU_IMPL:+_${NCU_IMPL//[:.]/_}}${variant:+_${variant// /_}}.txt" 2>&1
        echo "ncu $op $variant: exit $?"; grep -E "Duration|Memory Throughput|Compute \(SM\)|Registers|Achieved Occupancy|Theoretical Occupancy|Stall|Issue Slots|L1/TEX Hit|Executed Ipc" "$out/ncu_${op}${NCU_CASE:+_case$NCU_CASE}${NCU_IMPL:+_${NCU_IMPL//[:.]/_}}${variant:+_${variant// /_}}.txt" | head -30
        ;;
    tests)
        timeout "${TESTS_LIMIT_S:-200}" python3 -m pytest -m sm90 -q -p no:cacheprovider -rfEs --tb=short \
            suites/attention/test_paged_decode_nvfp4kv.py suites/attention/test_paged_decode_on_gpu.py \
            suites/test_legal_layouts.py suites/test_canary_on_gpu.py suites/test_triton_interpreter.py \
            suites/faults/test_hostile_impls.py > "$out/pytest_h200.log" 2>&1
        echo "tests: exit $?"; grep -E "FAILED|ERROR|passed|failed" "$out/pytest_h200.log" | tail -15
        ;;
    pytest:*)
        IFS=: read -r _ tag names <<< "$phase"
        # SIGINT first: pytest then prints what failed so far (a plain timeout leaves only dots)
        timeout -s INT -k 30 "${TESTS_LIMIT_S:-200}" python3 -m pytest -m sm90 -v -p no:cacheprovider -rfEs \
            --tb=short --durations=0 ${PYTEST_K:+-k "$PYTEST_K"} ${PYTEST_N:+-n "$PYTEST_N"} ${names//,/ } > "$out/pytest_h200_$tag.log" 2>&1
        echo "pytest $tag: exit $?"; grep -E "FAILED|ERROR|passed|failed" "$out/pytest_h200_$tag.log" | tail -15
        ;;
    layouts)
        for op in $(python3 -c "from ops.catalog import entries; print(*sorted(entries()))"); do
            echo "== $op" >> "$out/layouts_h200.log"
            timeout "${LAYOUT_OP_LIMIT_S:-60}" tools/certify-cells --device cuda --op "$op" \
                --impl suites.legal_layouts --max-examples "${LAYOUT_EXAMPLES:-3}" >> "$out/layouts_h200.log" 2>&1
            echo "layouts $op: exit $?" | tee -a "$out/layouts_h200.log"
        done
        ;;
    canary)
        PYTHONPATH=. timeout "${CANARY_LIMIT_S:-240}" python3 docs/lab/canary_cost.py --device cuda \
            --steps "${CANARY_STEPS:-200}" --out "$out/canary_cost_h200.json" > "$out/canary_cost_h200.log" 2>&1
        echo "canary: exit $?"; tail -8 "$out/canary_cost_h200.log"
        ;;
    ahead:*)
        records=${phase#ahead:}
        timeout "${AHEAD_LIMIT_S:-300}" tools/compile-ahead compile "$records" > "$out/ahead_$(basename "$records").log" 2>&1
        echo "ahead $records: exit $?"; tail -3 "$out/ahead_$(basename "$records").log" | cut -c1-200
        ;;
    against:*)
        PYTHONPATH=. timeout "${AGAINST_LIMIT_S:-150}" python3 docs/lab/paged_orders_against.py "${phase#against:}" \
            --device cuda --draws "${AGAINST_DRAWS:-5}" --seconds "${AGAINST_SECONDS:-50}" > "$out/against_h200.log" 2>&1
        echo "against: exit $?"; tail -12 "$out/against_h200.log"
        ;;
    dsl)
        mkdir -p /tmp/cutlass-parts && cp .whl/cut-a/* .whl/cut-b/* /tmp/cutlass-parts/ 2>/dev/null
        if exports=$(python3 tools/install-wheels --from /tmp/cutlass-parts --target /tmp/cutlass-dsl 2>> "$out/dsl.log") &&
                more=$(python3 tools/install-wheels --from .whl/tvmffi --target /tmp/tvmffi 2>> "$out/dsl.log"); then
            eval "$exports"; eval "$more"
            # for docs/lab/h200_thirdparty.sh's `wheels cutedsl` in later calls of the lease
            printf '%s\n%s\n' "$exports" "$more" > /tmp/site-cutedsl.exports
            python3 -c "import ops.cute_dsl as dsl; print('cutlass', dsl.cutlass.__version__)" >> "$out/dsl.log" 2>&1
            echo "dsl: exit $?"
        else
            echo "dsl: not installed (dsl.log says why; a part missing: the parts so far wait in /tmp/cutlass-parts)"
        fi
        ;;
    scale)
        timeout "${SCALE_LIMIT_S:-430}" tools/scale-measure --gpus 1 -n "${WORKERS:-6}" --cell-timeout 300 \
            --max-examples "${EXAMPLES:-100}" --no-warm-up --out "$out/scale_1gpu.md" > "$out/scale.log" 2>&1
        echo "scale: exit $?"; grep -E "^summary|out of memory" "$out/scale.log" | cut -c1-200
        ;;
    profile:*)
        IFS=: read -r _ tag names <<< "$phase"
        ops=(); for op in ${names//,/ }; do ops+=(--op "$op"); done
        timeout -s INT -k 30 "${PROFILE_LIMIT_S:-200}" python3 docs/lab/profile_host.py "$out" "profile_$tag" -- \
            --device cuda --no-isolate --max-examples "${EXAMPLES:-40}" "${ops[@]}" --quarantine /tmp/no_quarantine.yml \
            > "$out/profile_$tag.log" 2>&1
        echo "profile $tag: exit $?"; grep -E "^[a-z_0-9]+/[a-z_0-9]+: |^summary" "$out/profile_$tag.log" | cut -c1-200
        ;;
    *) echo "unknown phase $phase (stock|certify:TAG:OPS|bench:OP|variants:OP|ncu:OP:KERNEL|tests|pytest:TAG:FILES|layouts|canary|ahead:FILE|against:FOLDER|dsl|scale|profile:TAG:OPS)" >&2; exit 2 ;;
    esac
    echo "  ($phase: $(( $(date +%s) - start )) s)"
done
