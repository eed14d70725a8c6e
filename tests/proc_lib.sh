# Helpers of the tests that launch worlds of processes as torchrun would (process_test.sh,
# fault_process_test.sh): sourced, after the script sets `label` (its PASS/FAIL lines' prefix).
# Keeps the counts (passed, failed, skipped), a temporary folder removed at exit, and the jobs.
passed=0 failed=0 skipped=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job=0

# check <description> <status: 0 passes>. Take a condition's status into a variable first: a
# $(...) in the description would reset $? before check reads it.
check() {
    if [ "$2" -eq 0 ]; then echo "PASS $label: $1"; passed=$((passed + 1)); else echo "FAIL $label: $1"; failed=$((failed + 1)); fi
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# le A B: A <= B as decimals.
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# The name agmm's sockets get for job identity $1: "agmm-<FNV-1a 64 of it in hex>" (host_procs.c).
job_hash() {
    local s=$1 h=-3750763034362895579 i c # the FNV offset basis 14695981039346656037 as a signed 64-bit value
    for ((i = 0; i < ${#s}; i++)); do
        printf -v c '%d' "'${s:i:1}"
        h=$(((h ^ c) * 1099511628211))
    done
    printf 'agmm-%016x' "$h"
}

# start <n> <ranks to start, e.g. "0 1 3"> <extra env...> -- <command...>: starts those ranks of a
# world of n in the background with torchrun's variables; sets PIDS[rank], OUT (file prefix),
# PORT and ID (MASTER_PORT and TORCHELASTIC_RUN_ID: together unique to this test run, as the
# job's identity must be among jobs running at the same time on a host).
start() {
    local n=$1 ranks=$2
    shift 2
    local extra=()
    while [ "$1" != "--" ]; do extra+=("$1"); shift; done
    shift
    job=$((job + 1))
    ID="proctest-$$-$job"
    PORT=$((20000 + job))
    OUT="$tmp/j$job"
    PIDS=()
    for r in $ranks; do
        rank_env "$r" "$n" "${extra[@]}" "$@" >"$OUT.$r.out" 2>"$OUT.$r.err" &
        PIDS[$r]=$!
    done
}

# rank_env <rank> <n> <command...>: runs it with torchrun's variables of the current job.
rank_env() {
    local r=$1 n=$2
    shift 2
    # exec: the background job's pid is the rank's own (what the kill tests kill).
    exec env RANK="$r" WORLD_SIZE="$n" LOCAL_RANK="$r" LOCAL_WORLD_SIZE="$n" MASTER_ADDR=127.0.0.1 \
        MASTER_PORT="$PORT" TORCHELASTIC_RUN_ID="$ID" "$@"
}

# finish: waits for every started rank; sets RC[rank] and ENDED (time the last one ended).
finish() {
    RC=()
    for r in "${!PIDS[@]}"; do
        { wait "${PIDS[$r]}"; } 2>/dev/null # (no "Killed" notice)
        RC[$r]=$?
    done
    ENDED=$(now)
}

# left_behind: the job's socket names still bound, and anything of agmm's in /dev/shm.
left_behind() {
    local h
    h=$(job_hash "torchrun/127.0.0.1:$PORT/$ID/")
    { grep -o "@$h-[0-9]*" /proc/net/unix 2>/dev/null; ls /dev/shm 2>/dev/null | grep -i agmm; } | tr '\n' ' '
}
