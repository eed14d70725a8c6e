#!/usr/bin/env bash
# pull and auto on the GPU machine, in one call of about 3 minutes (docs/auto.md, docs/architecture.md):
#   1. the GPU tests they touch: every ag_matmul case (pull at W = 1 and emulated W = 2..8, its
#      ready/closing/io.input/timeout cases, fused's waits after the engine's change), auto, and
#      the GEMM engine's quick cases (its producer changed)
#   2. auto's target: agmm-bench at W = 1 over the seed's 31 shapes with nccl, ce, fused, pull and
#      auto in one run, auto measuring from an empty cache (its tuning cost per shape)
#   3. pull's per-call fixed cost: tiny shapes without the L2 flush, 1000 calls, next to the others;
#      and emulated W = 8 (8 ranks on one GPU: waits and the closing barrier, not NVLink)
# Writes under $OUT: gputest.log, bench.log, w1.csv, fixed.csv, emu8.csv, summary.txt (printed last).
#
#   OUT=out bash bench/pull_auto_gpu.sh build
set -u -o pipefail
BUILD=${1:-build}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
# The library must match the 2.28.9 headers we built with: the PyTorch wheel's (bench/gpu_run.sh).
NCCL_PKG=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$NCCL_PKG" ] && export LD_LIBRARY_PATH=$NCCL_PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$BUILD/agmm-bench
T=$BUILD/agmm-gputest
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

step() { # step NAME SECONDS LOG command...
    local name=$1 limit=$2 log=$3
    shift 3
    echo "== $name: $*" >>"$log"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    printf '%-28s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" >>"$SUMMARY"
}

step "gputest ag_matmul" 80 "$OUT/gputest.log" "$T" ag_matmul
step "gputest auto" 30 "$OUT/gputest.log" "$T" auto
AGMM_GEMM_QUICK=1 step "gputest gemm_engine" 30 "$OUT/gputest.log" "$T" gemm_engine
grep -E "^(FAIL|SKIP)|passed, " "$OUT/gputest.log" >>"$SUMMARY"

# An empty cache, so every shape is measured (AGMM_LOG=info prints each choice and its figures).
CACHE=$(mktemp -u /tmp/agmm-tune-XXXXXX.txt)
AGMM_TUNE_CACHE=$CACHE AGMM_LOG=info step "bench W=1 seed + auto" 90 "$OUT/bench.log" "$B" --op ag_matmul \
    --world gpu --ranks 1 --backends nccl,ce,fused,pull,auto --csv "$OUT/w1.csv"
step "bench fixed cost W=1" 15 "$OUT/bench.log" "$B" --world gpu --ranks 1 --shape 1,64,64 --shape 16,128,128 \
    --shape 128,256,256 --backends nccl,ce,fused,pull --no-flush --warmup 200 --iters 1000 --csv "$OUT/fixed.csv"
step "bench emulated W=8" 30 "$OUT/bench.log" "$B" --world emulated --ranks 8 --shape 8,128,64 \
    --shape 256,256,256 --shape 1024,1024,1024 --shape 2048,2048,2048 --backends ce,fused,pull \
    --warmup 20 --iters 100 --timeout 10 --csv "$OUT/emu8.csv"
rm -f "$CACHE" "$CACHE.lock"

python3 "$(dirname "$0")/auto_check.py" "$OUT/w1.csv" --fixed "$OUT/fixed.csv" "$OUT/emu8.csv" >>"$SUMMARY" 2>&1
echo "auto_check rc=$?" >>"$SUMMARY"
cat "$SUMMARY"
