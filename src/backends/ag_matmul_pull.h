/* Test hooks of the `pull` backend (internal; the tests use them). */
#ifndef AGMM_BACKENDS_AG_MATMUL_PULL_H
#define AGMM_BACKENDS_AG_MATMUL_PULL_H

#include <stdint.h>
#include "agmm.h"

/* From the next run on, this rank's GEMM starts reading `delay_ns` after the rank raised its
 * ready flag (0: no delay): inside the kernel on GPUs (the flag goes up at the kernel's start, its
 * producers start late; a parameter of the kernel, so a CUDA graph captured now keeps it), a
 * sleep of the rank's thread in the CPU world (rounded to microseconds). Makes this rank the slow
 * reader of its peers' shards, so a test can prove that they do not return (and let their
 * callers overwrite their shards) before it is done. Local; call it between runs.
 * AGMM_ERR_INVALID_ARG for a plan that is not a pull ag_matmul, or delay_ns < 0. */
agmm_status agmm_pull_set_delay(agmm_plan *plan, int64_t delay_ns);

#endif
