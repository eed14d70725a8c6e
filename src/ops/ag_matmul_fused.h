/* Test hooks and diagnostics of the GPU `fused` backend (internal). */
#ifndef AGMM_OPS_AG_MATMUL_FUSED_H
#define AGMM_OPS_AG_MATMUL_FUSED_H

#include <stdint.h>
#include "agmm.h"

/* From the next run on, the copy of chunk `chunk` (src_rank * splits + split) starts `delay_ns`
 * late on the device (-1: no delay). Lets a test prove that the tiles of that chunk wait for it.
 * AGMM_ERR_INVALID_ARG for a plan that is not a GPU fused ag_matmul or a chunk out of range. */
agmm_status agmm_gpu_fused_set_copy_delay(agmm_plan *plan, int chunk, uint64_t delay_ns);
/* The GEMM engine's configuration for this plan ("128x256 s4 ctas=131 ..."), "" for other plans. */
const char *agmm_gpu_fused_describe(const agmm_plan *plan);

#endif
