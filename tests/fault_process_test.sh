#!/usr/bin/env bash
# Injected faults in worlds of processes (AGMM_FAULT; tests/fault_scenario.h says what must hold):
# every point (join, create, plan, run) x every action (delay, hang, exit) in the CPU world of 3
# processes of agmm-proctest, started with torchrun's variables set by hand, each bounded by
# `timeout`. Per case, agmm-proctest --check reads every rank's outcome, stderr and exit status:
# a delay changes no result (exit 0 everywhere); after a hang or an exit every other process
# returns AGMM_ERR_TIMEOUT naming the faulted rank within the timeout + 1 s and exits 1, the hung
# one exits 1, the exited one 3. Here: every process ended by itself, and nothing of the job is
# left (no socket name in /proc/net/unix, nothing in /dev/shm).
# Prints PASS/FAIL lines and "N passed, N failed, N skipped".
set -u
proctest=${AGMM_PROCTEST:-build/agmm-proctest}
label=fault
. "$(dirname "$0")/proc_lib.sh"

timeout_s=0.5
# A hung rank is held 3 x the timeout; every process must be done well before this.
bound_s=8

# POINT,ACTION,F,OP: rank 0 at the join (its peers wait for its control segment: their own
# timeouts), rank 1 at the later points, and all_reduce's run with rank 2 too.
cases=()
for action in delay hang exit; do cases+=("join,$action,0,ag_matmul"); done
for point in create plan run; do
    for action in delay hang exit; do cases+=("$point,$action,1,ag_matmul"); done
done
for action in delay hang exit; do cases+=("run,$action,2,all_reduce"); done

for c in "${cases[@]}"; do
    t0=$(now)
    start 3 "0 1 2" -- timeout -k 1 "$bound_s" "$proctest" --fault-case "$c" --timeout "$timeout_s"
    finish
    took=$(elapsed "$t0" "$ENDED")
    for r in 0 1 2; do echo "${RC[$r]}" >"$OUT.$r.rc"; done
    out=$("$proctest" --fault-case "$c" --timeout "$timeout_s" --check "$OUT" 3 2>&1)
    printf '%s\n' "$out" | grep -E '^(PASS|FAIL|SKIP) '
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        check "$c: agmm-proctest --check printed no summary: $(printf '%s' "$out" | head -c 300)" 1
    else
        passed=$((passed + ${line%% passed*}))
        f=${line#* passed, }
        failed=$((failed + ${f%% failed*}))
    fi
    ok=0
    for r in 0 1 2; do [ "${RC[$r]}" -ne 124 ] && [ "${RC[$r]}" -ne 137 ] || ok=1; done
    left=$(left_behind)
    [ -z "$left" ] || ok=1
    check "$c: every process ended by itself (exit ${RC[*]}) after $took s, nothing of the job left: '$left'" $ok
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
