/* What the all-reduce backends share in the CPU world (internal; all_reduce_cpu.c).
 *
 * Every CPU all-reduce sums in fp32, element by element, over ranks 0, 1, ..., W-1 in that order,
 * and rounds once to the output type: all ranks get bit for bit the same result, and so do all
 * the backends (and the GPU kernels, src/kernels/all_reduce.h). */
#ifndef AGMM_BACKENDS_ALL_REDUCE_CPU_H
#define AGMM_BACKENDS_ALL_REDUCE_CPU_H

#include "backend.h"

/* dst[i - lo] = sum over r of in[r][i], i in [lo, hi): fp32, ranks in order 0..W-1. */
void agmm_ar_cpu_sum(void *const *in, int nranks, agmm_dtype dtype, int64_t lo, int64_t hi, void *dst);

/* The one-pass sum (one_shot, and nccl's stand-in), with a private staging buffer of n elements
 * as the plan's state:
 *   barrier 1   every rank's input is written
 *   sum         every rank reads all W inputs and sums them into its output
 *   barrier 2   nobody reads my input any more: my caller may overwrite it after the run
 * In place (out == my input) a peer may still be reading my input while I would write the sum
 * over it, so the sum goes to the staging buffer and is copied out after barrier 2. */
agmm_status agmm_ar_cpu_sum_create(agmm_plan *plan);
/* What agmm_ar_cpu_sum_create allocates: the staging buffer. */
void agmm_ar_cpu_sum_mem_need(const agmm_plan *plan, agmm_mem_need *need);
void agmm_ar_cpu_sum_destroy(agmm_plan *plan);
agmm_status agmm_ar_cpu_sum_run(agmm_plan *plan, const agmm_all_reduce_io *io, const char *what);

#endif
