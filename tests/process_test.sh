#!/usr/bin/env bash
# Worlds of processes on the CPU, as launchers start them (no GPU, no torch needed): N processes
# of agmm-proctest or agmm-bench with torchrun's variables set by hand (RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and with mpirun where it is installed.
#   - 2, 3 and 4 processes: every backend exact on odd shapes, all_reduce_rmsnorm's on T not
#     divisible by W (agmm-proctest; 3 processes with AGMM_CHECK_RUNS=1, every run checked); agmm-bench's table on rank 0 only, nothing from the other
#     ranks, exit 0 everywhere;
#   - ranks that claim different hosts: only the backends needing no peer memory, auto = nccl;
#   - faults: a rank killed with SIGKILL mid-sweep, a rank that never starts: every other rank
#     exits 1 within the timeout + 1 s naming it, and nothing of the job is left (no socket name,
#     nothing in /dev/shm);
#   - mistakes: ranks disagreeing on the world size, two processes claiming one rank, missing
#     variables: a message naming them.
# PROCESS_TEST=correctness runs the first group only (what CI runs under the sanitizers).
# Prints PASS/FAIL lines and "N passed, N failed, N skipped".
set -u
proctest=${AGMM_PROCTEST:-build/agmm-proctest}
bench=${AGMM_BENCH:-build/agmm-bench}
only=${PROCESS_TEST:-all}
label=proc
. "$(dirname "$0")/proc_lib.sh"

# ---- correctness: every backend, odd shapes, 2..4 processes ----

for n in 2 3 4; do
    # 3 processes with the run check (AGMM_CHECK_RUNS=1): every run above checked, and its own case
    checked=()
    [ "$n" -eq 3 ] && checked=(env AGMM_CHECK_RUNS=1)
    start "$n" "$(seq 0 $((n - 1)))" "${checked[@]}" -- "$proctest" --world cpu
    finish
    ok=0 detail=""
    for r in $(seq 0 $((n - 1))); do
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT.$r.out" | tail -n 1)
        [ "${RC[$r]}" -eq 0 ] && [[ "$line" == *" 0 failed"* ]] && [ "${line%% *}" -ge 60 ] &&
            [ "$(grep -c '^PASS rank [0-9]*: all_reduce_rmsnorm/' "$OUT.$r.out")" -eq 12 ] || ok=1
        [ "$n" -ne 3 ] || [ "$(grep -c "^PASS rank $r of 3 processes: all_reduce/.* with AGMM_CHECK_RUNS=1" "$OUT.$r.out")" -eq 1 ] || ok=1
        detail="$detail rank $r: exit ${RC[$r]}, ${line:-no summary};"
        grep '^FAIL' "$OUT.$r.out" | head -n 3
    done
    check "agmm-proctest, $n processes (torchrun variables$([ "$n" -eq 3 ] && echo ", AGMM_CHECK_RUNS=1: every run checked, and a rank whose io.input is elsewhere refused on every rank")): every backend exact on M=1,7,129 N=8,264 K=8,72, all_reduce n=1,7,129,4093, matmul_reduce_scatter and matmul_all_reduce M=1,7,130 N=8,33 K=8,72, all_reduce_rmsnorm T=1,n-1,2n+1,7 (12 checks) ($detail)" $ok
done

shapes=()
for m in 1 7 129; do for nn in 8 264; do for k in 8 72; do shapes+=(--shape "$m,$nn,$k"); done; done; done
for n in 2 3 4; do
    start "$n" "$(seq 0 $((n - 1)))" -- "$bench" --world cpu --check "${shapes[@]}"
    finish
    ok=0
    for r in $(seq 0 $((n - 1))); do [ "${RC[$r]}" -eq 0 ] || ok=1; done
    rows=$(grep -c -E '^\([0-9]+, [0-9]+, [0-9]+\) +bf16 +ok +ok +ok' "$OUT.0.out")
    [ "$rows" -eq 12 ] || ok=1
    quiet=0
    for r in $(seq 1 $((n - 1))); do [ -s "$OUT.$r.out" ] || [ -s "$OUT.$r.err" ] && quiet=1; done
    check "agmm-bench --check, $n processes: exit 0 on every rank (${RC[*]}), rank 0's table has the 12 odd shapes ok for nccl, ce and fused ($rows)" $ok
    check "agmm-bench, $n processes: ranks 1..$((n - 1)) print nothing" $quiet
done

start 3 "0 1 2" -- "$bench" --world cpu --op all_reduce --sizes 1,7,129,4093 --dtype fp32 --warmup 1 --iters 2
finish
rows=$(grep -c -E '^[0-9]+ +fp32 +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$OUT.0.out")
[ "${RC[0]}${RC[1]}${RC[2]}" = 000 ] && [ "$rows" -eq 4 ]
ok=$?
check "agmm-bench all_reduce timed, 3 processes: exit ${RC[*]}, rank 0's table times nccl, one_shot and two_shot on 4 sizes ($rows rows)" $ok

start 3 "0 1 2" -- sh -c 'AGMM_HOSTNAME=node$((RANK % 2)) exec "$0" "$@"' "$proctest" --world cpu --expect-span
finish
ok=0
for r in 0 1 2; do
    [ "${RC[$r]}" -eq 0 ] && grep -q '^[0-9]* passed, 0 failed' "$OUT.$r.out" || ok=1
done
check "3 processes claiming hosts node0/node1 (AGMM_HOSTNAME): symmetric backends skipped (\"ranks span nodes\"), auto = nccl, nccl exact (exit ${RC[*]})" $ok

# Explicit ranks and an id sent over the caller's own channel (a file here): no launcher's
# variables reach the processes.
start 3 "0 1 2" -- sh -c 'r=$RANK; exec env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE "$0" "$@" --rank $r' \
    "$proctest" --world cpu --nranks 3 --id-file "$tmp/id"
finish
[ "${RC[0]}${RC[1]}${RC[2]}" = 000 ] && [ "$(cat "$OUT".?.out | grep -c '^[0-9]* passed, 0 failed')" -eq 3 ] &&
    grep -q "rank=1, nranks=3" "$OUT.1.out"
ok=$?
check "agmm_unique_id_create + agmm_world_join with rank, nranks and the id (3 processes, no launcher): every rank exact (exit ${RC[*]})" $ok

if command -v mpirun >/dev/null; then
    root=()
    [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
    mpirun "${root[@]}" --oversubscribe -n 3 "$proctest" --world cpu >"$tmp/mpi.out" 2>"$tmp/mpi.err"
    rc=$?
    n0=$(grep -c -E '^[0-9]+ passed, 0 failed' "$tmp/mpi.out")
    [ $rc -eq 0 ] && [ "$n0" -eq 3 ]
    ok=$?
    check "mpirun -n 3 agmm-proctest: every rank exact (exit $rc, $n0 clean summaries; $(head -c 200 "$tmp/mpi.err"))" $ok
    mpirun "${root[@]}" --oversubscribe -n 3 "$bench" --world cpu --check --shape 7,264,72 --op ag_matmul \
        >"$tmp/mpi.out" 2>"$tmp/mpi.err"
    rc=$?
    [ $rc -eq 0 ] && [ "$(grep -c 'Best Backend' "$tmp/mpi.out")" -eq 1 ] && grep -q "Open MPI" "$tmp/mpi.out" &&
        ! grep -qv '^agmm-bench: row ' "$tmp/mpi.err"
    ok=$?
    check "mpirun -n 3 agmm-bench: one table (rank 0's), the world from OMPI_COMM_WORLD_*, nothing on stderr but rank 0's progress (exit $rc)" $ok
else
    echo "SKIP proc: mpirun is not installed (the launcher's variables are tested by hand above)"
    skipped=$((skipped + 1))
fi

if [ "$only" = correctness ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]
    exit
fi

# ---- faults ----

timeout_s=2
for victim in 1 0; do
    start 3 "0 1 2" -- "$bench" --world cpu --shapes 64:256:16 --timeout $timeout_s
    # Kill once the sweep runs (rank 0 reports rows as they finish).
    for _ in $(seq 200); do grep -q 'row 1/' "$OUT.0.err" 2>/dev/null && break; sleep 0.05; done
    kill -9 "${PIDS[$victim]}"
    killed=$(now)
    finish
    late=$(elapsed "$killed" "$ENDED")
    ok=0 names=""
    for r in 0 1 2; do
        [ "$r" -eq "$victim" ] && continue
        [ "${RC[$r]}" -eq 1 ] || ok=1
        grep -q "rank $victim" "$OUT.$r.err" || ok=1
        names="$names rank $r: \"$(grep -m1 "rank $victim" "$OUT.$r.err" | cut -c1-220)\""
    done
    le "$late" $((timeout_s + 1)) || ok=1
    check "kill -9 of rank $victim mid-sweep (3 processes, timeout ${timeout_s} s): the others exit 1 ($(echo "${RC[*]}")) naming it within ${late} s:$names" $ok
    if [ "$victim" -ne 0 ]; then
        # The cells the sweep never reached say why, never an empty "not run: ".
        empty=$(grep -c -E 'not run: *$' "$OUT.0.out")
        said=$(grep -c -E 'not run: the sweep stopped when the world failed: .*rank 1' "$OUT.0.out")
        [ "$empty" -eq 0 ] && [ "$said" -ge 1 ]
        ok=$?
        check "kill -9 of rank $victim: rank 0's table gives every cell not run a reason ($said say the world failed, naming rank 1; $empty empty): \"$(grep -m1 'not run: ' "$OUT.0.out" | cut -c1-200)\"" $ok
    fi
    left=$(left_behind)
    [ -z "$left" ]
    ok=$?
    check "kill -9 of rank $victim: nothing of the job is left (sockets, /dev/shm): '$left'" $ok
done

for missing in 2 0; do
    ranks=$(seq 0 3 | grep -v "^$missing\$" | tr '\n' ' ')
    t0=$(now)
    start 4 "$ranks" -- "$bench" --world cpu --shapes 64:64:64 --timeout 1
    finish
    took=$(elapsed "$t0" "$ENDED")
    ok=0
    for r in $ranks; do
        [ "${RC[$r]}" -eq 1 ] && grep -q "rank $missing never arrived" "$OUT.$r.err" || ok=1
    done
    le "$took" 2 || ok=1
    check "rank $missing of 4 never starts (timeout 1 s): ranks $ranks exit 1 ($(echo "${RC[*]}")) naming it after ${took} s: \"$(head -c 200 "$OUT.$(echo $ranks | cut -d' ' -f1).err")\"" $ok
    left=$(left_behind)
    [ -z "$left" ]
    ok=$?
    check "rank $missing never starts: nothing of the job is left: '$left'" $ok
done

# ---- mistakes ----

# Ranks given different identities (rank 1 another MASTER_PORT) never meet: each times out
# saying which identity it had, so the two messages show why.
start 2 "0" -- "$bench" --world cpu --shape 8,8,8 --check --timeout 1
(PORT=$((PORT + 1000)); rank_env 1 2 "$bench" --world cpu --shape 8,8,8 --check --timeout 1 >"$OUT.1.out" 2>"$OUT.1.err")
rc1=$?
finish
grep -q "rank 1 never arrived (nobody listens.*job \"torchrun/127.0.0.1:$PORT/$ID" "$OUT.0.err" &&
    grep -q "rank 0 never arrived.*job \"torchrun/127.0.0.1:$((PORT + 1000))/$ID" "$OUT.1.err" &&
    [ "$rc1" -ne 0 ] && [ "${RC[0]}" -ne 0 ]
ok=$?
check "ranks given different MASTER_PORTs never meet; each timeout names its own identity: \"$(head -c 300 "$OUT.0.err")\" / \"$(head -c 300 "$OUT.1.err")\"" $ok

start 2 "0" -- "$bench" --world cpu --shape 8,8,8 --check --timeout 1
(rank_env 1 3 "$bench" --world cpu --shape 8,8,8 --check --timeout 1 >"$OUT.1.out" 2>"$OUT.1.err")
rc1=$?
finish
grep -q "says the world has 3 ranks, rank 0 says 2" "$OUT.1.err" && grep -q "rank 1 gave up on the world" "$OUT.0.err" &&
    [ "$rc1" -ne 0 ] && [ "${RC[0]}" -ne 0 ]
ok=$?
check "ranks disagree on WORLD_SIZE (2 vs 3): both fail, naming the sizes: \"$(head -c 220 "$OUT.1.err")\"" $ok

start 2 "0 1" -- "$bench" --world cpu --shapes 64:256:32 --iters 3 --timeout 2
for _ in $(seq 200); do grep -q 'row 1/' "$OUT.0.err" 2>/dev/null && break; sleep 0.05; done
(rank_env 1 2 "$bench" --world cpu --shape 8,8,8 --check --timeout 2 >"$OUT.dup.out" 2>"$OUT.dup.err")
rc=$?
finish
grep -q "rank 1 of job .* is taken" "$OUT.dup.err" && [ $rc -eq 2 ]
ok=$?
check "a second process claiming rank 1 exits 2 saying it is taken (got $rc: \"$(head -c 200 "$OUT.dup.err")\")" $ok

# Ranks given different options (a script's mistake): both exit 2 at once naming the first that
# differs, where the sweep fell out of step after its first row; output paths may differ.
start 2 "0" -- "$bench" --world cpu --shape 8,8,8 --shape 16,16,16 --iters 3 --warmup 1 --csv "$tmp/r0.csv" --timeout 5
(rank_env 1 2 "$bench" --world cpu --shape 8,8,8 --shape 16,16,16 --iters 5 --warmup 1 --csv "$tmp/r1.csv" \
    --timeout 5 >"$OUT.1.out" 2>"$OUT.1.err")
rc1=$?
finish
grep -q "rank 1 was given other options than rank 0: '5' where rank 0 has '3' (after '--iters')" \
    "$OUT.0.err" && grep -q "rank 1 was given other options" "$OUT.1.err" && [ "$rc1" -eq 2 ] && [ "${RC[0]}" -eq 2 ] &&
    ! grep -q "Benchmarking results" "$OUT.0.out"
ok=$?
check "ranks given different --iters: both exit 2 ($rc1, ${RC[0]}) naming it: \"$(head -c 240 "$OUT.0.err")\"" $ok
start 2 "0 1" -- sh -c 'exec "$0" --world cpu --shape 8,8,8 --check --csv "$1.$RANK.csv"' "$bench" "$tmp/c"
finish
[ "${RC[0]}${RC[1]}" = 00 ]
ok=$?
check "ranks given different --csv paths (only rank 0 writes): both exit 0 (${RC[*]})" $ok

env RANK=0 "$bench" --world cpu --shape 8,8,8 --check >"$tmp/v.out" 2>"$tmp/v.err"
rc=$?
grep -q "WORLD_SIZE=(unset)" "$tmp/v.err" && [ $rc -eq 2 ]
ok=$?
check "RANK without WORLD_SIZE: exit 2 naming WORLD_SIZE (got $rc: \"$(head -c 160 "$tmp/v.err")\")" $ok
env RANK=0 WORLD_SIZE=2 "$bench" --world cpu --shape 8,8,8 --check >"$tmp/v.out" 2>"$tmp/v.err"
rc=$?
grep -q "nothing names this job" "$tmp/v.err" && [ $rc -eq 2 ]
ok=$?
check "RANK and WORLD_SIZE without MASTER_PORT or AGMM_JOB_ID: exit 2 saying nothing names the job (got $rc)" $ok
start 2 "0 1" AGMM_JOB_ID="$ID" MASTER_PORT= -- "$bench" --world cpu --shape 8,8,8 --check
finish
[ "${RC[0]}${RC[1]}" = 00 ] && grep -q "(8, 8, 8)" "$OUT.0.out"
ok=$?
check "AGMM_JOB_ID names the job where the launcher does not (exit ${RC[*]})" $ok
long_id=$(printf 'j%.0s' $(seq 300))
env RANK=0 WORLD_SIZE=1 AGMM_JOB_ID="$long_id" "$bench" --world cpu --shape 8,8,8 --check >"$tmp/v.out" 2>"$tmp/v.err"
rc=$?
grep -q "AGMM_JOB_ID is 300 characters: at most" "$tmp/v.err" && [ $rc -eq 2 ]
ok=$?
check "an AGMM_JOB_ID too long for a job's identity: exit 2 saying so, not cut (two jobs could meet as one) (got $rc: \"$(head -c 160 "$tmp/v.err")\")" $ok
# A world of one process is a process world: an injected exit ends the process with status 3.
env RANK=0 WORLD_SIZE=1 AGMM_JOB_ID="$ID-one" AGMM_FAULT=rank=0,at=run,action=exit "$bench" --world cpu \
    --shape 8,8,8 --check >"$tmp/v.out" 2>"$tmp/v.err"
rc=$?
[ $rc -eq 3 ]
ok=$?
check "AGMM_FAULT action=exit at run in a joined world of one process: exit 3 (got $rc)" $ok

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
