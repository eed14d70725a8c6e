#!/usr/bin/env bash
# The GEMM engine's one GPU-machine call: the engine's GPU tests, the lab over the seed shapes at
# W = 1, 2, 4, 8 and the model shapes with the policy and every config forced (each against the
# fastest of 16 cuBLASLt algorithms), torch.matmul on the same shapes, and the ratio table last.
# Every step runs under `timeout`; about 6 minutes in all on an H200 (bounded at 9: the engine's
# GPU tests alone take over 2 minutes).
#
#   OUT=/some/dir bench/engine_lab.sh [BUILD_DIR]     default BUILD_DIR: build
#
# Takes BUILD_DIR/gemm-lab and BUILD_DIR/agmm-gputest as built (carry them over), or builds them
# where they are missing and nvcc exists. Writes at most 6 files under $OUT: gputest.log,
# lab.log, lab.csv, torch.log, torch.csv (with the kernel torch.matmul ran), ratio.md (with the
# yardstick's halves per shape). Environment: LAB_ARGS (extra gemm-lab options, e.g. "--reps 10"
# or "--lt-clusters"), CONFIGS (default "all"), SHAPE_ARGS (gemm-lab's shape options for
# the list every step runs, e.g. "--w 1,8": the seed shapes at W = 1 and 8 and the model shapes;
# default: all 130), and AGMM_GEMM_QUICK=1 (the GPU tests' odd shapes, hooks and pull mode under
# every config, without the large shapes the policy picks for).
#
# The ping-pong consumers against the configs the measured table picks, in about 2 minutes:
#   OUT=dir AGMM_GEMM_QUICK=1 SHAPE_ARGS="--w 1,8" CONFIGS=-1,0,1,2,5,6,7,8,9,10,11,12,13 \
#       LAB_ARGS="--reps 10" bench/engine_lab.sh build
set -u -o pipefail
BUILD=${1:-build}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.." || exit 1

# Never NVLink multicast (gpu-machine.md), also for anything started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# agmm-gputest links NCCL: prefer the PyTorch wheel's, which matches the headers we build with.
NCCL_PKG=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$NCCL_PKG" ] && [ -e "$NCCL_PKG/lib/libnccl.so.2" ] &&
    export LD_LIBRARY_PATH=$NCCL_PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

if [ ! -x "$BUILD/gemm-lab" ] || [ ! -x "$BUILD/agmm-gputest" ]; then
    echo "== building $BUILD/gemm-lab $BUILD/agmm-gputest" | tee "$OUT/lab.log"
    timeout 240 make BUILD="$BUILD" -j"$(nproc)" gemm-lab "$BUILD/agmm-gputest" >>"$OUT/lab.log" 2>&1 ||
        echo "build failed: see lab.log"
fi

step() { # step SECONDS LOG command...: one bounded step, its output appended to LOG
    local limit=$1 log=$2 t0=$SECONDS
    shift 2
    echo "== $*" | tee -a "$log"
    timeout "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    echo "== rc=$rc after $((SECONDS - t0)) s" | tee -a "$log"
}

SHAPES=$(mktemp)
trap 'rm -f "$SHAPES"' EXIT
# shellcheck disable=SC2086
"$BUILD/gemm-lab" --list-shapes ${SHAPE_ARGS:-} >"$SHAPES" || { echo "gemm-lab --list-shapes failed"; exit 1; }

step 300 "$OUT/gputest.log" "$BUILD/agmm-gputest" gemm_engine
tail -3 "$OUT/gputest.log"
# shellcheck disable=SC2086
step 150 "$OUT/lab.log" "$BUILD/gemm-lab" --shapes-file "$SHAPES" --configs "${CONFIGS:-all}" \
    --csv "$OUT/lab.csv" ${LAB_ARGS:-}
grep '^# ' "$OUT/lab.log" | tail -60
tail -2 "$OUT/lab.log"
step 90 "$OUT/torch.log" python3 bench/torch_matmul.py --shapes-file "$SHAPES" --kernels --csv "$OUT/torch.csv"
tail -2 "$OUT/torch.log"

TORCH_CSV=""
[ -s "$OUT/torch.csv" ] && TORCH_CSV=$OUT/torch.csv
if [ -s "$OUT/lab.csv" ]; then
    # shellcheck disable=SC2086
    timeout 30 python3 bench/gemm_ratio.py "$OUT/lab.csv" $TORCH_CSV --per-shape >"$OUT/ratio.md" 2>&1
    # The yardstick's two halves per shape (torch.matmul's kernel beside cuBLASLt's best algorithm).
    [ -n "$TORCH_CSV" ] && timeout 30 python3 bench/gemm_ratio.py "$OUT/lab.csv" "$TORCH_CSV" --yardstick \
        >>"$OUT/ratio.md" 2>&1
    # The summaries (every variant and the oracle) last; the per-shape table stays in ratio.md.
    sed '/: per shape/,$d' "$OUT/ratio.md"
else
    echo "no lab.csv: nothing to compare"
fi
