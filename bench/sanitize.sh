#!/usr/bin/env bash
# One compute-sanitizer tool over `agmm-gputest sanitize TOOL` (tests/gpu/sanitize.c: small shapes
# of every kernel and backend of the library's table, in groups at W = 1 and in emulated worlds of
# 2 and 4 ranks), for bench/gpu_run.sh or by hand:
#
#   bench/sanitize.sh BUILD_DIR TOOL       TOOL: memcheck, racecheck, synccheck or initcheck
#
# A group the tool cannot run at W > 1 (ranks spinning on each other on one GPU while the tool
# serialises kernels) runs its cases at W = 1 instead; the plan is printed first and every group's
# start line says which, after the seconds since the start (`agmm-gputest sanitize-plan` prints the
# plan of every tool; docs/architecture.md holds it). Budget: each tool within 3 minutes on the
# H200 (bench/gpu_run.sh's SAN_TIMEOUT).
#
# Exit status: 3 when the tool reports an error, else agmm-gputest's (1: a test failed). Failing
# CUDA calls are not counted (--report-api-errors no): NCCL's start-up makes some by design
# (kernel images for other architectures, handle types it probes). The report goes to stdout.
# Waits are bounded by AGMM_GPUTEST_TIMEOUT (default here 60 s): a sanitizer slows kernels by
# orders of magnitude, and a peer's kernel may take that long to arrive. SAN_ARGS adds options to
# compute-sanitizer (e.g. "--kernel-name-exclude kns=nccl" to leave NCCL's own kernels out).
set -u -o pipefail
usage="usage: bench/sanitize.sh BUILD_DIR memcheck|racecheck|synccheck|initcheck"
BUILD=${1:?$usage}
TOOL=${2:?$usage}
case $TOOL in memcheck | racecheck | synccheck | initcheck) ;; *) echo "sanitize.sh: unknown tool $TOOL ($usage)" >&2; exit 2 ;; esac
SAN=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if [ ! -x "$SAN" ]; then
    echo "sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2
    exit 2
fi
export AGMM_GPUTEST_TIMEOUT=${AGMM_GPUTEST_TIMEOUT:-60}
echo "== sanitize $TOOL: the plan (W = the worlds each group runs in under this tool)"
"$BUILD/agmm-gputest" sanitize-plan | awk -v t="$TOOL" -F' [|] ' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == t) c = i }
    NR > 2 && /^[|]/ { printf "   %-12s %s\n", substr($1, 3), $c } /^- / && index($0, t) { print "  " $0 }'
start=$SECONDS
# shellcheck disable=SC2086
"$SAN" --tool "$TOOL" --report-api-errors no --error-exitcode 3 --print-limit 50 ${SAN_ARGS:-} \
    "$BUILD/agmm-gputest" sanitize "$TOOL" 2>&1 |
    while IFS= read -r line; do
        case $line in "== sanitize $TOOL: group"*) line="== sanitize $TOOL: at $((SECONDS - start)) s:${line#*:}" ;; esac
        printf '%s\n' "$line"
    done
rc=${PIPESTATUS[0]}
echo "== sanitize $TOOL: exit $rc after $((SECONDS - start)) s"
exit "$rc"
