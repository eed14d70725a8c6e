/* What the all_reduce_rmsnorm backends share in the CPU world (internal; all_reduce_rmsnorm_cpu.c).
 *
 * Every row goes through core/rmsnorm.h's epilogue, the kernels' fp32 order, so one_shot and
 * two_shot give bit for bit the same r' and y here as on GPUs, on every rank; `nccl` rounds the
 * sum to bf16 first, as an ncclAllReduce's output is (its CPU stand-in sums in rank order). */
#ifndef AGMM_BACKENDS_ALL_REDUCE_RMSNORM_CPU_H
#define AGMM_BACKENDS_ALL_REDUCE_RMSNORM_CPU_H

#include "backend.h"

/* Rows [lo, hi) on this rank: acc = the fp32 sum over x[0..nx) of the row (in that order), then
 * the epilogue with the io's bias, residual and gamma, r' to r_out and y to y (row t at t * H of
 * each). acc: H floats of scratch. */
void agmm_arn_cpu_rows(const agmm_plan *plan, const agmm_all_reduce_rmsnorm_io *io, void *const *x, int nx,
                       int64_t lo, int64_t hi, float *acc, uint16_t *y, uint16_t *r_out);

/* The row scratch (H floats) as plan->state's first member, for the backends that need no more. */
agmm_status agmm_arn_cpu_scratch_create(agmm_plan *plan);
void agmm_arn_cpu_scratch_destroy(agmm_plan *plan);
void agmm_arn_cpu_scratch_mem_need(const agmm_plan *plan, agmm_mem_need *need);

/* One pass (one_shot):
 *   barrier 1   every rank's input is written
 *   rows        every rank sums every row from all W inputs and runs the epilogue into its outputs
 *   barrier 2   nobody reads my input any more: my caller may overwrite it after the run
 * The outputs never overlap the input (the op's io check), so nothing is staged. */
agmm_status agmm_arn_cpu_one_pass(agmm_plan *plan, const agmm_all_reduce_rmsnorm_io *io, const char *what);

#endif
