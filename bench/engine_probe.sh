#!/usr/bin/env bash
# What bounds the GEMM engine's large shapes, in one call on the GPU machine (under 10 minutes for
# four configs): per tile config, the engine alone (gemm-lab --engine-only, no L2 flush between
# calls, so the GPU stays loaded) on 4096^3 and 8192x8192xK for K = 1024, 4096, 16384, with the
# whole GPU and with an SM budget of 66 and 33 CTAs (gemm-lab --max-ctas); the SM clock of each
# call measured on the GPU (gemm-lab --clock), the power sampled by nvidia-smi every 20 ms, each
# run about a second long so that the samples see it. bench/engine_probe.py turns the logs into cycles per K block per CTA at the
# loaded clock, and splits each config's time on the three K into a cost per K block and a cost
# per tile:
#   - cycles per K block falling at fewer CTAs: a shared limit (the L2's bandwidth, HBM);
#     the same at 33 and 66 CTAs: each SM's own;
#   - per K block above the MMAs' own cycles: the mainloop issues or is fed below the tensor
#     pipe's rate; per tile: what a tile costs outside its mainloop (the epilogue, the decode).
# The cycles are time x gemm-lab --clock's reading, which is above the calls' own clock (its
# header): on an H100 (2026-12-05) that put 128 x 256 at ~1150 cycles per K block at 33 CTAs where
# ncu counts the mainloop at the MMAs' 1024 (bench/wgmma_rate.cu). Compare configs and CTA counts
# within one run; take absolute cycles from ncu (bench/ncu_engine.sh): it found the feed to be
# the 132-CTA loss that this probe's numbers had ruled out (docs/results, fifteenth session).
#
#   OUT=dir [CTAS="132 33"] bench/engine_probe.sh [GEMM_LAB] [CONFIGS]
#   defaults: build/gemm-lab, "0 3 6 1", CTAS "132 66 33"
#
# Logs under $OUT (default ./out): probe_CONFIG_CTAS_SHAPE.{csv,log}, clk_CONFIG_CTAS_SHAPE.csv,
# gpu.txt, probe.txt (the tables).
set -u
LAB=${1:-build/gemm-lab}
CONFIGS=${2:-0 3 6 1}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv \
    >"$OUT/gpu.txt" 2>&1
# name rows n k; each shape in a run of its own, so that its clock samples are its own
SHAPES="cube:4096:4096:4096 k1:8192:8192:1024 k4:8192:8192:4096 k16:8192:8192:16384"
probe() { # probe CONFIG CTAS NAME ROWS N K
    local tag="$1_$2_$3"
    printf '%s 1 %s %s %s\n' "$3" "$4" "$5" "$6" >"$OUT/shape_$tag.txt"
    # ~1 s of calls at an assumed 5 TFLOP/s per CTA, 20 at least
    local reps
    reps=$(awk -v m="$4" -v n="$5" -v k="$6" -v c="$2" 'BEGIN { r = int(5e12 * c / (2 * m * n * k)); print (r < 20 ? 20 : r) }')
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 20 >"$OUT/clk_$tag.csv" 2>&1 &
    local smi=$!
    # with the whole GPU, cuBLASLt's fastest of 4 is timed beside it (its time and clock in the table)
    local lt="--algos 1 --engine-only"
    [ "$2" -ge 132 ] && lt="--algos 4"
    timeout 60 "$LAB" --shapes-file "$OUT/shape_$tag.txt" --configs "$1" --max-ctas "$2" $lt --clock \
        --no-flush --warmup 20 --reps "$reps" --csv "$OUT/probe_$tag.csv" >"$OUT/probe_$tag.log" 2>&1
    echo "config $1, $2 CTAs, $3 ($reps calls): rc=$?"
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
}
for ctas in ${CTAS:-132 66 33}; do
    for c in $CONFIGS; do
        for s in $SHAPES; do
            IFS=: read -r name rows n k <<<"$s"
            probe "$c" "$ctas" "$name" "$rows" "$n" "$k"
        done
    done
done
python3 "$(dirname "$0")/engine_probe.py" "$OUT" | tee "$OUT/probe.txt"
