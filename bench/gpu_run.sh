#!/usr/bin/env bash
# The one script for the GPU machine: takes a prebuilt tree (or builds one where it is missing and
# nvcc exists), runs the GPU tests, compute-sanitizer and the benchmark, and writes logs and CSVs
# under $OUT, with a short table last. GPU time is scarce and a machine's start is slow: one call
# does all of it. Exit status 1 when any step failed (the summary says which), else 0.
#
#   bench/gpu_run.sh [BUILD_DIR]          default BUILD_DIR: build
#
# Environment: OUT (default ./out), GPUTEST_FILTER (a case-name filter for agmm-gputest),
# AGMM_GPUTEST_PERF (default 1: the ce-vs-nccl timing case), SKIP_BENCH=1, BENCH_ARGS (extra
# agmm-bench options for every sweep), STEP_TIMEOUT (seconds per step, default 240), GPUTEST_TIMEOUT
# (seconds for every GPU test case together, default 480: they took 312 s on an H100), SANITIZE=0
# (skip compute-sanitizer), SAN_TIMEOUT (seconds per sanitizer tool, default 180: the budget each
# must finish in), SAN_TOOLS (default "memcheck racecheck synccheck initcheck").
# The environment (no multicast, the wheel's NCCL 2.28.9 matching our headers): bench/gpu_env.sh.
set -u -o pipefail
BUILD=${1:-build}
STEP_TIMEOUT=${STEP_TIMEOUT:-240}
. "$(dirname "$0")/gpu_env.sh"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
echo "$NCCL_NOTE" | tee -a "$SUMMARY"

{ nvidia-smi; nvidia-smi topo -m; } >"$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$OUT/nvidia-smi.txt"
head -20 "$OUT/nvidia-smi.txt"

if [ ! -x "$BUILD/agmm-gputest" ] || [ ! -x "$BUILD/agmm-bench" ]; then
    if command -v nvcc >/dev/null; then
        echo "building into $BUILD"
        make BUILD="$BUILD" -j"$(nproc)" "$BUILD/agmm-gputest" "$BUILD/agmm-bench" >"$OUT/build.log" 2>&1 ||
            echo "build failed: see build.log" | tee -a "$SUMMARY"
    else
        echo "no prebuilt $BUILD and no nvcc: nothing to run" | tee -a "$SUMMARY"
    fi
fi

FAILED=0
step() { # step NAME LOG command...: runs one bounded step, logs it, records its exit status
    local name=$1 log=$2
    shift 2
    echo "== $name: $*" | tee -a "$log"
    local t0=$SECONDS
    timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    printf '%-34s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" >>"$SUMMARY"
    [ "$rc" = 0 ] || FAILED=1
}

B="$BUILD/agmm-bench"
RUN_BENCH=0
[ -x "$B" ] && [ "${SKIP_BENCH:-0}" != 1 ] && RUN_BENCH=1
# Highest value first, so a cut-short call still brings back the seed table at W = 1.
# --graph: each W = 1 row also times replays of a CUDA graph of one run (graph_us).
if [ $RUN_BENCH = 1 ]; then
    step "bench ag_matmul W=1" "$OUT/bench.log" $B --op ag_matmul --world gpu --ranks 1 --graph \
        --csv "$OUT/ag_matmul_w1.csv" ${BENCH_ARGS:-}
fi
if [ -x "$BUILD/agmm-gputest" ]; then
    STEP_TIMEOUT=${GPUTEST_TIMEOUT:-480} AGMM_GPUTEST_PERF=${AGMM_GPUTEST_PERF:-1} step gputest "$OUT/gputest.log" \
        "$BUILD/agmm-gputest" ${GPUTEST_FILTER:-}
fi
# compute-sanitizer over small shapes of every kernel and backend (bench/sanitize.sh): any report
# fails its step, and so does a tool cut by its budget. One log for every tool; the summary gives
# each tool's seconds and the groups run at W = 1 only under it.
if [ -x "$BUILD/agmm-gputest" ] && [ "${SANITIZE:-1}" != 0 ]; then
    for tool in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
        STEP_TIMEOUT=${SAN_TIMEOUT:-180} step "sanitize $tool" "$OUT/sanitize.log" \
            "$(dirname "$0")/sanitize.sh" "$BUILD" "$tool"
    done
fi
if [ $RUN_BENCH = 1 ]; then
    step "bench all_reduce W=1" "$OUT/bench.log" $B --op all_reduce --world gpu --ranks 1 --graph \
        --csv "$OUT/all_reduce_w1.csv" ${BENCH_ARGS:-}
    # T = 1..2048 x H = 4096, 8192 (the default sweep), with bias and residual.
    step "bench all_reduce_rmsnorm W=1" "$OUT/bench.log" $B --op all_reduce_rmsnorm --world gpu --ranks 1 \
        --graph --backends nccl,one_shot,two_shot,auto --csv "$OUT/all_reduce_rmsnorm_w1.csv" ${BENCH_ARGS:-}
    # Emulated: 8 ranks share one GPU (its memory, not NVLink): correctness and relative cost only.
    step "bench ag_matmul emulated W=8" "$OUT/bench.log" $B --op ag_matmul --world emulated --ranks 8 \
        --shapes 256:2048:256 --backends ce,fused --warmup 10 --iters 30 --timeout 10 \
        --csv "$OUT/ag_matmul_emu8.csv" ${BENCH_ARGS:-}
    # Graphs where ranks share a GPU: every backend's replays after its runs (a timeout here once,
    # in a build that ran eager runs after a plan's replays: docs/results, 2026-12-07).
    step "bench ag_matmul emulated W=4 graph" "$OUT/bench.log" $B --op ag_matmul --world emulated --ranks 4 \
        --shapes 256:1024:384 --graph --warmup 2 --iters 10 --csv "$OUT/ag_matmul_emu4_graph.csv" ${BENCH_ARGS:-}
    step "bench all_reduce emulated W=8" "$OUT/bench.log" $B --op all_reduce --world emulated --ranks 8 \
        --sizes 4093,16387,2^16,2^20,2^24 --warmup 10 --iters 30 --timeout 10 \
        --csv "$OUT/all_reduce_emu8.csv" ${BENCH_ARGS:-}
    step "bench all_reduce_rmsnorm emulated W=4" "$OUT/bench.log" $B --op all_reduce_rmsnorm --world emulated \
        --ranks 4 --tokens 1,8,128,2048 --hidden 8192 --warmup 10 --iters 30 --timeout 10 \
        --csv "$OUT/all_reduce_rmsnorm_emu4.csv" ${BENCH_ARGS:-}
fi

echo
echo "==================== summary ===================="
cat "$SUMMARY"
if [ -f "$OUT/sanitize.log" ]; then
    grep -E '^(== sanitize [a-z]+: (exit|at)|========= (ERROR SUMMARY|RACECHECK SUMMARY)|FAIL|[0-9]+ passed, )' \
        "$OUT/sanitize.log" | cut -c1-160 | head -60
fi
if [ -f "$OUT/gputest.log" ]; then
    grep -E '^(FAIL|SKIP)' "$OUT/gputest.log" | head -20
    sed -n '/shape (M=N=K)/,/^PASS\|^FAIL/p' "$OUT/gputest.log" | grep -v '^PASS\|^FAIL' | head -40
    tail -1 "$OUT/gputest.log"
fi
# ce vs nccl at W = 1 from the benchmark's CSV (median us; issue 5's bar: ce <= 1.03 x nccl).
if [ -f "$OUT/ag_matmul_w1.csv" ]; then
    echo "-- ag_matmul W=1 (agmm-bench medians, us; engine = our GEMM alone on the shape)"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        { key = $col["m"] "," $col["n"] "," $col["k"]; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
          t[key, $col["backend"]] = ($col["state"] == "ok") ? $col["median_us"] : "-"
          if ($col["engine_us"] != "") eng[key] = $col["engine_us"] }
        END { printf "%-18s %10s %10s %10s %10s %8s %12s\n", "M,N,K", "nccl", "ce", "fused", "engine", "ce/nccl", "fused/engine"
              for (i = 1; i <= n; i++) { k = order[i]; r = (t[k, "nccl"] > 0 && t[k, "ce"] > 0) ? t[k, "ce"] / t[k, "nccl"] : 0
                  f = ((k, "fused") in t && t[k, "fused"] > 0 && eng[k] > 0) ? t[k, "fused"] / eng[k] : 0
                  printf "%-18s %10s %10s %10s %10s %8.3f %12.3f\n", k, t[k, "nccl"], t[k, "ce"], ((k, "fused") in t) ? t[k, "fused"] : "-", eng[k], r, f } }' \
        "$OUT/ag_matmul_w1.csv"
fi
# Graph replays against runs at W = 1, from the benchmark's CSVs: per backend, the geometric mean
# of replay / run medians over the rows, and the first (smallest) row's two medians in us.
for f in "$OUT/ag_matmul_w1.csv" "$OUT/all_reduce_w1.csv"; do
    [ -f "$f" ] || continue
    echo "-- $(basename "$f" .csv): CUDA-graph replay vs run (median us)"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        $col["state"] == "ok" && $col["graph_median_us"] != "" && $col["median_us"] > 0 {
            b = $col["backend"]; if (!(b in rows)) { order[++nb] = b; first_run[b] = $col["median_us"]; first_graph[b] = $col["graph_median_us"] }
            rows[b]++; lsum[b] += log($col["graph_median_us"] / $col["median_us"]) }
        END { printf "%-12s %5s %14s %16s %16s\n", "backend", "rows", "graph/run", "first row run", "first row graph"
              for (i = 1; i <= nb; i++) { b = order[i]
                  printf "%-12s %5d %14.3f %16s %16s\n", b, rows[b], exp(lsum[b] / rows[b]), first_run[b], first_graph[b] } }' "$f"
done
[ $FAILED = 0 ] || echo "FAILED: a step above has rc != 0"
exit $FAILED
