#!/usr/bin/env bash
# The soak (tests/soak.c, agmm-soak): thousands of steps of random operations (every one of the
# library's), backends and shapes, random per-rank delays, inputs overwritten right after each run,
# every step checked, memory and descriptors flat. Worlds:
#   cpu        3 processes of the CPU world started with torchrun's variables (no GPU needed)
#   emulated   4 ranks sharing GPU 0, threads of one process
#
#   bench/soak.sh [BUILD_DIR]       default BUILD_DIR: build
#
# Environment: SOAK_WORLDS (default "emulated cpu" where nvidia-smi sees a GPU, else "cpu"),
# SOAK_STEPS (default 10000), SOAK_TIMEOUT (seconds per wait for a peer, default 10), AGMM_SOAK
# (the binary; default BUILD_DIR/agmm-soak). Every rank's exit status must be 0; rank 0's summary
# line (PASS/FAIL soak ...) is printed for each world, then "N passed, N failed, N skipped".
set -u
BUILD=${1:-build}
soak=${AGMM_SOAK:-$BUILD/agmm-soak}
steps=${SOAK_STEPS:-10000}
wait_s=${SOAK_TIMEOUT:-10}
if [ -z "${SOAK_WORLDS:-}" ]; then
    SOAK_WORLDS=cpu
    nvidia-smi -L >/dev/null 2>&1 && SOAK_WORLDS="emulated cpu"
fi
# On the GPU machine: no multicast, hardware queues, and the NCCL library our headers match.
case " $SOAK_WORLDS " in *" emulated "*) . "$(dirname "$0")/gpu_env.sh" && echo "$NCCL_NOTE" ;; esac
passed=0 failed=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# A whole run is bounded too: a hang is a failure, not a stuck script.
limit=$((120 + steps / 20))

verdict() { # verdict WORLD STATUSES: rank 0's summary line, and whether every rank exited 0
    local line
    line=$(grep -h -E '^(PASS|FAIL) soak' "$out"/*.out | head -n 1)
    if [ -n "$line" ] && [ -z "$(echo "$2" | tr -d ' 0')" ] && [[ "$line" == PASS* ]]; then
        echo "$line (exit $2)"
        passed=$((passed + 1))
    else
        echo "FAIL soak $1: exit $2; ${line:-no summary}"
        cat "$out"/*.err | grep -v '^agmm-soak: step' | head -n 5
        failed=$((failed + 1))
    fi
    rm -f "$out"/*
}

for world in $SOAK_WORLDS; do
    case $world in
    cpu)
        pids=()
        for r in 0 1 2; do
            RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29400 + $$ % 500)) \
                TORCHELASTIC_RUN_ID="soak-$$" timeout "$limit" "$soak" --world cpu --steps "$steps" \
                --timeout "$wait_s" >"$out/$r.out" 2>"$out/$r.err" &
            pids[$r]=$!
        done
        rcs=""
        for r in 0 1 2; do
            wait "${pids[$r]}"
            rcs="$rcs${rcs:+ }$?"
        done
        verdict "CPU, 3 processes" "$rcs"
        ;;
    emulated)
        timeout "$limit" "$soak" --world emulated --ranks 4 --steps "$steps" --timeout "$wait_s" \
            >"$out/0.out" 2>"$out/0.err"
        verdict "emulated W=4" "$?"
        ;;
    *)
        echo "FAIL soak: unknown world '$world' in SOAK_WORLDS (cpu or emulated)"
        failed=$((failed + 1))
        ;;
    esac
done
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
