#!/usr/bin/env bash
# The row-parallel matmuls (matmul_reduce_scatter, matmul_all_reduce) on the GPU machine, in one
# call: their GPU tests, agmm-bench at W = 1 (the seed's cubes, the 70B shapes and, for
# matmul_all_reduce, decode; with --graph) and emulated W = 8, decode's GEMMs alone (cuBLASLt's
# timed pick), bench/torch_bench.py's columns at W = 1, and the MLP example.
# Writes under $OUT: mr_gputest.log, mr_bench.log, mr_{rs,ar}_w1.csv, mr_{rs,ar}_emu8.csv,
# mr_ar_decode.csv, torch_matmul_*.{csv,json}, torch_mr_bench.log, tp_mlp.log; prints a summary.
#
#   bench/mr_run.sh [BUILD_DIR]          default BUILD_DIR: build
#
# Environment: OUT (default ./out), STEP_TIMEOUT (seconds per step, default 240), SKIP_TORCH=1,
# BENCH_ARGS (extra agmm-bench options for every sweep). Python: an installed agmm package, else
# this tree's python/ with AGMM_LIBRARY=BUILD_DIR/libagmm.so.
set -u -o pipefail
BUILD=${1:-build}
STEP_TIMEOUT=${STEP_TIMEOUT:-240}
. "$(dirname "$0")/gpu_env.sh"
SUMMARY=$OUT/mr_summary.txt
: >"$SUMMARY"
FAILED=0
step() { # step NAME LOG command...: one bounded step, logged, its exit status recorded
    local name=$1 log=$2
    shift 2
    echo "== $name: $*" | tee -a "$log"
    local t0=$SECONDS
    timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    printf '%-40s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" >>"$SUMMARY"
    [ "$rc" = 0 ] || FAILED=1
}

B="$BUILD/agmm-bench"
step "gputest matmul_reduce" "$OUT/mr_gputest.log" "$BUILD/agmm-gputest" matmul_reduce
step "gputest graph/steps (every backend)" "$OUT/mr_gputest.log" "$BUILD/agmm-gputest" graph_
step "gputest steps" "$OUT/mr_gputest.log" "$BUILD/agmm-gputest" steps_
step "bench matmul_reduce_scatter W=1" "$OUT/mr_bench.log" $B --op matmul_reduce_scatter --world gpu --ranks 1 \
    --graph --csv "$OUT/mr_rs_w1.csv" ${BENCH_ARGS:-}
step "bench matmul_all_reduce W=1" "$OUT/mr_bench.log" $B --op matmul_all_reduce --world gpu --ranks 1 \
    --graph --csv "$OUT/mr_ar_w1.csv" ${BENCH_ARGS:-}
# Decode's GEMMs: at W = 1 one_shot is the plain GEMM alone (cuBLASLt's timed pick).
step "bench matmul_all_reduce W=1 decode" "$OUT/mr_bench.log" $B --op matmul_all_reduce --world gpu --ranks 1 \
    --backends one_shot --shape 1,8192,3584 --shape 8,8192,3584 --shape 16,8192,3584 --shape 32,8192,3584 \
    --shape 64,8192,3584 --shape 8,28672,8192 --shape 8,8192,1024 --shape 8,1024,8192 --graph \
    --csv "$OUT/mr_ar_decode.csv" ${BENCH_ARGS:-}
# Emulated: 8 ranks share one GPU (its memory, not NVLink): correctness and relative cost only.
step "bench matmul_reduce_scatter emulated W=8" "$OUT/mr_bench.log" $B --op matmul_reduce_scatter --world emulated \
    --ranks 8 --shapes 256:2048:256 --shape 1000,1001,1024 --warmup 10 --iters 30 --timeout 10 \
    --csv "$OUT/mr_rs_emu8.csv" ${BENCH_ARGS:-}
step "bench matmul_all_reduce emulated W=8" "$OUT/mr_bench.log" $B --op matmul_all_reduce --world emulated \
    --ranks 8 --shape 1,8192,3584 --shape 32,8192,3584 --shape 128,8192,3584 --shape 77,1000,1024 --warmup 10 \
    --iters 30 --timeout 10 --csv "$OUT/mr_ar_emu8.csv" ${BENCH_ARGS:-}
if [ "${SKIP_TORCH:-0}" != 1 ]; then
    # The package from this tree where none is installed: its source with this build's library.
    if ! python3 -c 'import agmm' 2>/dev/null; then
        export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} AGMM_LIBRARY=${AGMM_LIBRARY:-$PWD/$BUILD/libagmm.so}
    fi
    for op in matmul_reduce_scatter matmul_all_reduce; do
        step "torch_bench $op W=1" "$OUT/torch_mr_bench.log" torchrun --nproc-per-node 1 bench/torch_bench.py \
            --op $op --out "$OUT"
    done
    step "examples/tp_mlp.py W=1" "$OUT/tp_mlp.log" torchrun --nproc-per-node 1 examples/tp_mlp.py
fi

echo
echo "==================== summary ===================="
cat "$SUMMARY"
grep -E '^(FAIL|SKIP)' "$OUT/mr_gputest.log" | head -20
grep -E '^[0-9]+ passed' "$OUT/mr_gputest.log"
sed -n '/^Benchmarking results for matmul/,/^$/p' "$OUT/mr_bench.log"
[ -f "$OUT/torch_mr_bench.log" ] && sed -n '/^Benchmarking results.*(time_us: median/,/^$/p' "$OUT/torch_mr_bench.log"
[ -f "$OUT/tp_mlp.log" ] && grep -E '^(check|agmm /|#)' "$OUT/tp_mlp.log"
[ $FAILED = 0 ] || echo "FAILED: a step above has rc != 0"
exit $FAILED
