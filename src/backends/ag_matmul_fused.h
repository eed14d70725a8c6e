/* Test hooks and diagnostics of the `fused` backend (internal; the tests use them). */
#ifndef AGMM_BACKENDS_AG_MATMUL_FUSED_H
#define AGMM_BACKENDS_AG_MATMUL_FUSED_H

#include <stdint.h>
#include "agmm.h"

/* From the next run on, the copy of chunk `chunk` (src_rank * splits + split) starts `delay_ns`
 * late (-1: no delay): on the device on GPUs, as a sleep of the copy thread in the CPU world
 * (rounded to microseconds). Lets a test prove that the tiles of that chunk wait for it. Local;
 * call it between runs. AGMM_ERR_INVALID_ARG for a plan that is not a fused ag_matmul or a chunk
 * out of range. */
agmm_status agmm_fused_set_copy_delay(agmm_plan *plan, int chunk, int64_t delay_ns);

/* What the last run of a CPU-world fused plan saw for one chunk (monotonic ns): copy_done_ns when
 * its copy finished (just before its flag was raised; 0 for the local chunks, which are never
 * waited for), first_tile_ns when the GEMM of its first tile started (after its wait),
 * last_tile_ns when the GEMM of its last tile ended, and the number of its tiles. */
typedef struct {
    int64_t copy_done_ns, first_tile_ns, last_tile_ns;
    int64_t tiles;
} agmm_fused_times;

/* Fills *out for `chunk` after a run of a CPU-world fused plan. Local. AGMM_ERR_INVALID_ARG as
 * above, and for a GPU plan. */
agmm_status agmm_fused_chunk_times(agmm_plan *plan, int chunk, agmm_fused_times *out);

/* Re-plans the GEMM engine of a GPU fused plan with tile config `config` (an index of
 * agmm_gemm_config_name; -1: the engine's policy), for the runs from now on: lets a test run
 * fused with every config, or make the engine refuse an argument and see the message it gives.
 * Local; between runs, after the last one has completed (the old engine plan is freed). The
 * engine's statuses (AGMM_ERR_INVALID_ARG naming config= for a config out of range), with the
 * plan unchanged on failure; AGMM_ERR_UNSUPPORTED for any other plan. */
agmm_status agmm_fused_set_gemm_config(agmm_plan *plan, int config);

/* The GEMM engine's configuration of a GPU fused plan ("128x256 s4 ctas=131 ..."); "" otherwise. */
const char *agmm_fused_describe(const agmm_plan *plan);

#endif
