#!/usr/bin/env bash
# The GEMM engine beside cuBLAS under ncu, one kernel at a time, in one call on the GPU machine:
# per kernel its time, SM clock, SM cycles, tensor pipe activity, L2 and DRAM bytes, L2 hit rate,
# and the L2 sectors the SMs read beside the bytes delivered to them (bench/ncu_table.py prints
# them). Cycles counted by ncu, unlike engine_probe.sh's, which are time x an idle clock's reading.
# How docs/results/h100_2026-12-05b/ncu.md and h100_2026-12-06/ncu_wave_tiles.md were made (the
# last two columns came later: h100_2026-12-06e/ncu_pairs_l2.md):
#
#   OUT=dir [SHAPES="seed 1 4096 4096 4096"] bench/ncu_engine.sh [GEMM_LAB] [CONFIGS] [gemm-lab options...]
#   defaults: build/gemm-lab, "0"; SHAPES: 4096^3 and 8192x8192x16384 (gemm-lab --shapes-file
#   lines, "label W M N K", one per line); e.g. `bench/ncu_engine.sh build/gemm-lab 0,6 --max-ctas 33`
#   or `... 0 --engine-only` (cuBLAS then runs only the lab's correctness check).
#
# Writes $OUT (default ./out)/ncu.csv, ncu.err and ncu.md; about 10 s per kernel at 8192x8192x16384.
set -u
LAB=${1:-build/gemm-lab}
CONFIGS=${2:-0}
shift $(($# < 2 ? $# : 2))
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
printf '%s\n' "${SHAPES:-seed 1 4096 4096 4096
big 1 8192 8192 16384}" >"$OUT/shapes.txt"
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max
M=$M,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,launch__grid_size
M=$M,lts__t_bytes.sum,dram__bytes.sum,lts__t_sector_hit_rate.pct
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__m_xbar2l1tex_read_bytes.sum
# --clock-control none: the card's own clock, as the benchmarks see it; caches flushed per pass.
ncu --clock-control none --metrics "$M" --csv -k regex:'gemm_ws|nvjet|sm90' \
    "$LAB" --shapes-file "$OUT/shapes.txt" --configs "$CONFIGS" --algos 1 --reps 1 --warmup 0 "$@" \
    >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
rc=$?
python3 "$(dirname "$0")/ncu_table.py" "$OUT/ncu.csv" | tee "$OUT/ncu.md"
[ $rc -eq 0 ] || { echo "ncu exited $rc: see $OUT/ncu.err" >&2; exit $rc; }
