#!/usr/bin/env bash
# The GPU machine's check of fault injection, memory checks and leaks, in one call of a few
# minutes, from a prebuilt tree (built elsewhere with CUDA: make BUILD=build):
#
#   tests/gpu/robustness_run.sh [BUILD_DIR]      default build; logs under $OUT (default ./out)
#
#   leaks     agmm-gputest leaks: 1000 plan and 100 world cycles (emulated W=2, GPU W=1) keep host
#             memory, device memory, mappings and descriptors flat
#   memory    --shape 65536,64,65536 --world emulated --ranks 8 ends within seconds, exit 1 with the
#             memory needed and available, never 137
#   faults    agmm-bench --fault on an emulated world of 4: exit and hang end bounded (exit 1),
#             a delay changes nothing (exit 0)
#   make test the CPU and command-line tests on this machine (its memory and overcommit policy)
# The last lines are a summary: one line per step with its exit status and what was expected.
set -u -o pipefail
BUILD=${1:-build}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
SUMMARY=$OUT/robustness_summary.txt
: >"$SUMMARY"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
# NCCL's library must match the headers agmm was built with: the PyTorch wheel's (bench/gpu_run.sh).
NCCL_PKG=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
if [ -n "$NCCL_PKG" ] && [ -e "$NCCL_PKG/lib/libnccl.so.2" ]; then
    export LD_LIBRARY_PATH=$NCCL_PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
B=$BUILD/agmm-bench

# step NAME EXPECTED_RC PATTERN LOG TIMEOUT command...: runs it bounded; ok when it exits with
# EXPECTED_RC and its output holds PATTERN (grep -E).
step() {
    local name=$1 want=$2 pattern=$3 log=$4 limit=$5
    shift 5
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/step.out" 2>&1
    local rc=$?
    { echo "== $name: $*"; cat "$OUT/step.out"; } >>"$log"
    local verdict=ok
    [ "$rc" = "$want" ] && grep -q -E -- "$pattern" "$OUT/step.out" || verdict=WRONG
    printf '%-44s rc=%-3s (want %s) %4ss %s\n' "$name" "$rc" "$want" "$((SECONDS - t0))" "$verdict" | tee -a "$SUMMARY"
}

step "gputest leaks" 0 " 0 failed" "$OUT/leaks.log" 150 "$BUILD/agmm-gputest" leaks
grep -E "^(PASS|FAIL)" "$OUT/leaks.log" | grep -v " rank [0-9]" | cut -c1-230 >>"$SUMMARY"

step "memory: emulated W=8 65536,64,65536" 1 "needs .* is available" "$OUT/memory.log" 40 \
    "$B" --shape 65536,64,65536 --world emulated --ranks 8
grep -m1 -o "needs .* is available ([^)]*)" "$OUT/memory.log" | cut -c1-200 >>"$SUMMARY"
step "memory: gpu W=1 all_reduce 2^40" 1 "needs .* is available" "$OUT/memory.log" 40 \
    "$B" --world gpu --ranks 1 --op all_reduce --sizes 2^40 --warmup 0 --iters 1

F=(--world emulated --ranks 4 --shape 256,256,256 --warmup 2 --iters 5 --timeout 1)
step "fault: exit at run (emulated W=4)" 1 "injected fault \\(AGMM_FAULT\\): exit at run" "$OUT/faults.log" 40 "$B" "${F[@]}" --fault rank=1,at=run,action=exit
step "fault: hang at plan (emulated W=4)" 1 "rank 2 never arrived" "$OUT/faults.log" 40 "$B" "${F[@]}" --fault rank=2,at=plan,action=hang
step "fault: exit at create (emulated W=4)" 1 "rank 3 never arrived" "$OUT/faults.log" 40 "$B" "${F[@]}" --fault rank=3,at=create,action=exit
step "fault: random delays at run (emulated W=4)" 0 "Best Backend" "$OUT/faults.log" 90 "$B" "${F[@]}" \
    --fault rank=any,at=run,action=delay,ms=20
grep -E "injected fault|never arrived" "$OUT/faults.log" | sort | uniq -c | sort -rn | head -n 4 | cut -c1-200 >>"$SUMMARY"

step "make test (CPU + CLI tests here)" 0 " 0 failed" "$OUT/maketest.log" 120 \
    env AGMM_BENCH="$B" ./tests/run.sh "$BUILD/agmm-test"
grep -E "^FAIL" "$OUT/maketest.log" | head -n 5 | cut -c1-200 >>"$SUMMARY"
tail -n 1 "$OUT/maketest.log" >>"$SUMMARY"

rm -f "$OUT/step.out"
echo "---- summary ($OUT/robustness_summary.txt)"
cat "$SUMMARY"
