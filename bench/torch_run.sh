#!/usr/bin/env bash
# The torch side of agmm on the GPU machine, in one call (under 7 minutes): installs the Python
# package from this tree (offline, into /tmp), runs python/tests under torchrun with one process
# (the torch tests, and the CPU-world ones), then the seed's benchmark with every column at W = 1
# (bench/torch_bench.py, the full sweep: 31 shapes, the seed's 14 all-reduce sizes and 12
# all_reduce_rmsnorm rows T x H). Writes under $OUT (8 files): torch_run.log (install + pytest),
# torch_bench.log, torch_ag_matmul.{csv,json}, torch_all_reduce.{csv,json},
# torch_all_reduce_rmsnorm.{csv,json}; prints the pytest verdict and the benchmark's tables last.
#
#   bench/torch_run.sh [BUILD_DIR]        default BUILD_DIR: build (a CUDA build of libagmm.so)
#
# Carry: BUILD_DIR (libagmm.so) and, where the machine's Python has no pytest, .whl/ with its
# wheels (made on a development machine by `python3 -m pip download pytest -d .whl`).
# Environment: OUT (default ./out), PYTEST_TIMEOUT (default 120 s) and BENCH_TIMEOUT (default 240 s)
# bound the two steps, BENCH_ARGS (extra torch_bench.py options, e.g. --shapes 256:4096:256, or
# --op all_reduce_rmsnorm for that table alone). The
# benchmark prints a line per shape as it goes, so a step cut short still brings back what it did.
set -u -o pipefail
BUILD=${1:-build}
PYTEST_TIMEOUT=${PYTEST_TIMEOUT:-120}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
. "$(dirname "$0")/gpu_env.sh"          # no multicast; the wheel's NCCL, which libagmm.so's headers match
LOG=$OUT/torch_run.log
: >"$LOG"
echo "$NCCL_NOTE" | tee -a "$LOG"

if [ ! -f "$BUILD/libagmm.so" ]; then
    echo "no $BUILD/libagmm.so: building it" | tee -a "$LOG"
    make BUILD="$BUILD" -j"$(nproc)" "$BUILD/libagmm.so" >>"$LOG" 2>&1 || echo "build failed (see torch_run.log)"
fi

SITE=/tmp/agmm-site
rm -rf "$SITE"
echo "== pip install ./python (offline) into $SITE" | tee -a "$LOG"
if AGMM_LIBRARY=$PWD/$BUILD/libagmm.so python3 -m pip install --no-index --no-deps --target "$SITE" ./python \
    >>"$LOG" 2>&1; then
    export PYTHONPATH=$SITE
else
    echo "pip install failed (see torch_run.log): using the source tree with AGMM_LIBRARY" | tee -a "$LOG"
    export PYTHONPATH=$PWD/python AGMM_LIBRARY=$PWD/$BUILD/libagmm.so
fi
if ! python3 -c 'import pytest' 2>/dev/null && [ -d .whl ]; then
    python3 -m pip install --no-index --find-links .whl --target "$SITE" pytest >>"$LOG" 2>&1
fi

# The torch tests first (pytest runs a file named twice once): the rest are CI's too.
echo "== torchrun --nproc-per-node 1 -m pytest python/tests/test_torch.py python/tests" | tee -a "$LOG"
if PYTHONPATH=$PYTHONPATH:$SITE python3 -c 'import pytest' 2>/dev/null; then
    PYTHONPATH=$PYTHONPATH:$SITE timeout "$PYTEST_TIMEOUT" torchrun --nproc-per-node 1 -m pytest -q -s \
        python/tests/test_torch.py python/tests >>"$LOG" 2>&1
    echo "pytest exit $?" >>"$LOG"
else
    echo "NOT RUN: no pytest here and no .whl/ to install it from (see the header of this script)" | tee -a "$LOG"
fi

echo "== torchrun --nproc-per-node 1 bench/torch_bench.py --out $OUT ${BENCH_ARGS:-}" | tee "$OUT/torch_bench.log"
timeout "$BENCH_TIMEOUT" torchrun --nproc-per-node 1 bench/torch_bench.py --out "$OUT" ${BENCH_ARGS:-} \
    >>"$OUT/torch_bench.log" 2>&1
echo "torch_bench.py exit $?" >>"$OUT/torch_bench.log"

echo
echo "==================== summary ===================="
grep -E "^(SKIPPED|FAILED|ERROR)|passed|failed|NOT RUN|pytest exit|agmm.torch:" "$LOG" | tail -25
grep -E "^# torch|torch_bench.py exit|Error|error" "$OUT/torch_bench.log" | head -8
sed -n '/^Benchmarking results/,$p' "$OUT/torch_bench.log"
exit 0
