/* Test hook of the `fused` matmul_reduce_scatter backend (internal; the tests use it). */
#ifndef AGMM_BACKENDS_MATMUL_REDUCE_SCATTER_FUSED_H
#define AGMM_BACKENDS_MATMUL_REDUCE_SCATTER_FUSED_H

#include <stdint.h>
#include "agmm.h"

/* From the next run on, this rank's GEMM starts `gemm_delay_ns` late (its partials land late at
 * their owners: they must wait for its flags), and, in the CPU world, its first sum starts
 * `reduce_delay_ns` late (it reads its slots late: its peers' next runs must not overwrite them
 * before). 0: no delay. On GPUs the GEMM delay is the engine's (its producers start late; a
 * kernel parameter, so a CUDA graph captured now keeps it) and reduce_delay_ns must be 0. Local;
 * call it between runs. AGMM_ERR_INVALID_ARG for a plan that is not a fused matmul_reduce_scatter
 * or a negative delay; AGMM_ERR_UNSUPPORTED for a reduce delay on GPUs. */
agmm_status agmm_mr_fused_set_delay(agmm_plan *plan, int64_t gemm_delay_ns, int64_t reduce_delay_ns);

#endif
