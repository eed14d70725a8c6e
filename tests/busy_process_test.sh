#!/usr/bin/env bash
# Work one rank does alone counts against nobody's timeout (agmm_ctx_busy_begin), in the CPU world
# of 3 processes of agmm-bench started with torchrun's variables (issue 23):
#   - rank 0 times the plain GEMM alone for at least 3 x the timeout while ranks 1 and 2 wait for
#     it at the next meeting: every rank exits 0 with the row correct (before: ranks 1 and 2 failed
#     after the timeout with "rank 0 never arrived (alive but has not reached this step)");
#   - a longer solo spell, and a kill -9 once rank 0 says it is still timing (its progress line,
#     printed once a row has run 3 s): of rank 0, its peers exit 1 within the timeout + 1 s naming
#     it as killed; of rank 1, rank 2 does so (while still waiting for busy rank 0). A busy rank
#     that dies, or one that dies while another is busy, is still seen within the bound.
# The solo spell is sized from a calibration of the GEMM on this machine (1 process). Prints
# PASS/FAIL lines and "N passed, N failed, N skipped".
set -u
bench=${AGMM_BENCH:-build/agmm-bench}
label=busy
. "$(dirname "$0")/proc_lib.sh"

timeout_s=0.5
shape=128,256,256
# --turns 1: the plain GEMM's calls in one block, one solo spell (bench_turns.h).
common=(--world cpu --warmup 0 --no-flush --backends nccl --turns 1 --timeout "$timeout_s")

# csv_field FILE COLUMN: the column's value in the first row of an agmm-bench CSV.
csv_field() {
    awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { print $c[col]; exit }' "$1" 2>/dev/null
}

# The plain GEMM of the gathered shape (3 x 128 rows) alone, in one process: us per call.
"$bench" --world cpu --ranks 1 --shape 384,256,256 --warmup 0 --iters 20 --no-flush --backends nccl \
    --csv "$tmp/cal.csv" >/dev/null 2>&1
gemm_us=$(csv_field "$tmp/cal.csv" gemm_us)
if ! le 1 "${gemm_us:-0}"; then
    check "calibration: the plain GEMM of (384, 256, 256) timed in one process (got '${gemm_us:-nothing}')" 1
    echo "$passed passed, $failed failed, $skipped skipped"
    exit 1
fi
# iters_for SECONDS: calls of the plain GEMM that take at least that long here.
iters_for() { awk -v s="$1" -v us="$gemm_us" 'BEGIN { printf "%d", s * 1e6 / us + 1 }'; }

# ---- rank 0 alone for >= 3 x the timeout; the row then runs on all three ----
# Sized for 5 x the timeout from the calibration; a machine that got faster since (others' load
# went) gets another try with twice the calls.
iters=$(iters_for "$(awk -v t=$timeout_s 'BEGIN { print 5 * t }')")
for try in 1 2 3; do
    start 3 "0 1 2" -- "$bench" "${common[@]}" --shape "$shape" --iters "$iters" --csv "$tmp/solo.csv"
    finish
    solo_s=$(awk -v us="$(csv_field "$tmp/solo.csv" gemm_us)" -v n="$iters" 'BEGIN { printf "%.2f", us * n * 1e-6 }')
    long=0
    le "$(awk -v t=$timeout_s 'BEGIN { print 3 * t }')" "$solo_s" || long=1
    [ "${RC[0]}${RC[1]}${RC[2]}" = 000 ] && [ $long -eq 1 ] && [ $try -lt 3 ] || break
    iters=$((iters * 2))
done
state=$(csv_field "$tmp/solo.csv" state)
ok=0
[ "${RC[0]}${RC[1]}${RC[2]}" = 000 ] && [ "$state" = ok ] && [ $long -eq 0 ] || ok=1
check "rank 0 times the plain GEMM alone for $solo_s s (>= 3 x the ${timeout_s} s timeout; $iters calls) while its peers wait: exit ${RC[*]}, the row ${state:-missing}$(cat "$OUT".?.err | grep -m1 -v '^agmm-bench: row' | sed 's/^/; /' | cut -c1-240)" $ok

# ---- a kill during rank 0's solo spell ----
# A spell far longer than the test waits (30 s by the calibration): whatever the load, rank 0 is
# still timing when it says so at 3 s, and it is killed too once its peers have been checked.
iters=$(iters_for 30)
for victim in 0 1; do
    start 3 "0 1 2" -- "$bench" "${common[@]}" --shape "$shape" --iters "$iters"
    # Rank 0 says what it does once the row has run 3 s: it is then busy timing, alone.
    for _ in $(seq 400); do grep -q 'timing the plain GEMM, round 1 of 1' "$OUT.0.err" 2>/dev/null && break; sleep 0.05; done
    told=$(grep -c 'timing the plain GEMM, round 1 of 1 (' "$OUT.0.err")
    kill -9 "${PIDS[$victim]}"
    killed=$(now)
    ok=0 names=""
    for r in 1 2; do
        [ "$r" -eq "$victim" ] && continue
        { wait "${PIDS[$r]}"; } 2>/dev/null
        rc=$?
        took=$(elapsed "$killed" "$(now)")
        [ "$rc" -eq 1 ] && grep -q "rank $victim.*killed or crashed" "$OUT.$r.err" &&
            le "$took" "$(awk -v t=$timeout_s 'BEGIN { print t + 1 }')" || ok=1
        names="$names rank $r: exit $rc after $took s: \"$(grep -m1 "rank $victim" "$OUT.$r.err" | cut -c1-200)\";"
    done
    [ "$victim" -eq 0 ] || kill -9 "${PIDS[0]}" 2>/dev/null
    finish
    [ "$told" -ge 1 ] || ok=1
    check "kill -9 of rank $victim while rank 0 times alone (3 processes, timeout ${timeout_s} s; rank 0 told it was timing: $told):$names" $ok
    left=$(left_behind)
    [ -z "$left" ]
    ok=$?
    check "kill -9 of rank $victim during a solo spell: nothing of the job is left: '$left'" $ok
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
