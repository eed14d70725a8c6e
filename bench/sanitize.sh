#!/usr/bin/env bash
# One compute-sanitizer tool over `agmm-gputest sanitize` (tests/gpu/test_steps.c: small shapes of
# every kernel and backend, W = 1 and emulated worlds of 2 and 4 ranks, graphs and streams), for
# bench/gpu_run.sh or by hand:
#
#   bench/sanitize.sh BUILD_DIR TOOL       TOOL: memcheck, racecheck or synccheck
#
# Exit status: 3 when the tool reports an error, else agmm-gputest's (1: a test failed). Failing
# CUDA calls are not counted (--report-api-errors no): NCCL's start-up makes some by design
# (kernel images for other architectures, handle types it probes). The report goes to stdout.
# Waits are bounded by AGMM_GPUTEST_TIMEOUT (default here 60 s): a sanitizer slows kernels by
# orders of magnitude, and a peer's kernel may take that long to arrive.
set -u -o pipefail
BUILD=${1:?usage: bench/sanitize.sh BUILD_DIR memcheck|racecheck|synccheck}
TOOL=${2:?usage: bench/sanitize.sh BUILD_DIR memcheck|racecheck|synccheck}
case $TOOL in memcheck | racecheck | synccheck) ;; *) echo "sanitize.sh: unknown tool $TOOL" >&2; exit 2 ;; esac
SAN=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if [ ! -x "$SAN" ]; then
    echo "sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2
    exit 2
fi
export AGMM_GPUTEST_TIMEOUT=${AGMM_GPUTEST_TIMEOUT:-60}
exec "$SAN" --tool "$TOOL" --report-api-errors no --error-exitcode 3 --print-limit 50 \
    "$BUILD/agmm-gputest" sanitize
