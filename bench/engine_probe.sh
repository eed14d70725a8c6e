#!/usr/bin/env bash
# What bounds the GEMM engine's large shapes, in one call on the GPU machine (under 10 minutes):
# per tile config, the engine's time on 8192x8192x4096 and 4096^3 with the whole GPU and with an
# SM budget of 66 and 33 CTAs (gemm-lab --max-ctas, --engine-only), the SM clock and power sampled
# by nvidia-smi during each run. bench/engine_probe.py turns the logs into cycles per K block per
# CTA at the loaded clock: if they fall when fewer SMs share the L2, the L2's total bandwidth bounds
# the config (multicast should pay); if they stay, each SM's own intake or pipeline latency does (a
# tile needing fewer operand bytes per MMA cycle should pay).
#
#   OUT=dir bench/engine_probe.sh [GEMM_LAB] [CONFIGS]     default: build/gemm-lab, "0 3 6 1"
#
# Logs under $OUT (default ./out): probe_CONFIG_CTAS.{csv,log}, clk_CONFIG_CTAS.csv, gpu.txt,
# probe.txt (the table).
set -u
LAB=${1:-build/gemm-lab}
CONFIGS=${2:-0 3 6 1}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
printf 'big 1 8192 8192 4096\ncube 1 4096 4096 4096\n' >"$OUT/probe_shapes.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv \
    >"$OUT/gpu.txt" 2>&1
probe() { # probe CONFIG CTAS
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 25 >"$OUT/clk_$1_$2.csv" 2>&1 &
    local smi=$!
    timeout 60 "$LAB" --shapes-file "$OUT/probe_shapes.txt" --configs "$1" --max-ctas "$2" --algos 1 --engine-only \
        --warmup 20 --reps 150 --csv "$OUT/probe_$1_$2.csv" >"$OUT/probe_$1_$2.log" 2>&1
    echo "config $1, $2 CTAs: rc=$?"
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
}
for ctas in 132 66 33; do
    for c in $CONFIGS; do probe "$c" "$ctas"; done
done
python3 "$(dirname "$0")/engine_probe.py" "$OUT" | tee "$OUT/probe.txt"
