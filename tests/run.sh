#!/usr/bin/env bash
# The test command's body: the CPU test binary, the command-line tests, worlds of processes
# (process_test.sh), faults injected in them (fault_process_test.sh), a rank's work alone longer
# than the timeout (busy_process_test.sh), a short soak of 3 processes (bench/soak.sh, 300 steps),
# then the installed library and its examples (install_test.sh); one closing line
# "N passed, N failed, N skipped" summing them.
set -u
test_bin=${1:-build/agmm-test}
here=$(dirname "$0")
export SOAK_STEPS=${SOAK_STEPS:-300} SOAK_WORLDS=cpu
total_p=0 total_f=0 total_s=0 status=0
for cmd in "$test_bin" "$here/cli_test.sh" "$here/process_test.sh" "$here/fault_process_test.sh" \
    "$here/busy_process_test.sh" "$here/../bench/soak.sh" "$here/install_test.sh"; do
    out=$("$cmd" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed'
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $cmd printed no summary (exit $rc)"
        total_f=$((total_f + 1))
        status=1
        continue
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -n -E 's/.*, ([0-9]+) skipped.*/\1/p')
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + ${s:-0}))
    [ $rc -eq 0 ] || status=1
done
echo "$total_p passed, $total_f failed, $total_s skipped"
exit $status
