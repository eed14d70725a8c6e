/* all_reduce_rmsnorm kernels (all_reduce_rmsnorm.cu): the epilogue alone after an ncclAllReduce
 * (`nccl`), and the symmetric-memory all-reduces with the epilogue fused (`one_shot`, `two_shot`).
 * bf16 in and out; docs/all_reduce_rmsnorm.md has the protocol and the numerics.
 *
 * Rows. x, y, residual and residual_out are T x H bf16, row-major; a row is H/8 16-byte vectors.
 * A block of AGMM_RMSNORM_LANES (256) threads owns a row at a time: thread j takes the row's
 * vectors j, j + 256, ...; the row's sum of squares is reduced across the block in the fixed
 * order of core/rmsnorm.h, and every fp32 operation of the epilogue is an explicit round-to-
 * nearest intrinsic (__fadd_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn: nothing contracted into a
 * fused multiply-add), so the CPU world computes every row bit for bit alike.
 *
 * Rows of a block: one_shot and the norm kernel, rows b, b + grid, ... of all T; two_shot, rows
 * lo(r) + b, lo(r) + b + grid, ... of the rank's own rows [lo(r), lo(r+1)), lo(q) = q*T/W (some
 * ranks own none when T < W). So block b of one rank touches the same rows (one_shot) or the rows
 * of the same blocks (two_shot) as block b of every other rank, and the barriers are per block, on
 * the signal pad of all_reduce.h (pad_barrier.cuh: epochs read from the device, bounded waits).
 *
 * Grid: one_shot and two_shot, `grid` blocks equal on every rank and at most the SMs this rank may
 * hold while it spins (the plan's agreed share, as all_reduce); the norm kernel has no waits and
 * takes agmm_arn_norm_grid, and so do one_shot and two_shot at W = 1, where they have no peer, no
 * barrier and no pad (pad and res NULL): the epilogue alone. Plain C11 (host C includes it). */
#ifndef AGMM_KERNELS_ALL_REDUCE_RMSNORM_H
#define AGMM_KERNELS_ALL_REDUCE_RMSNORM_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "agmm.h"
#include "dev_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block: the lanes that share a row (core/rmsnorm.h). */
#define AGMM_ARN_THREADS 256

typedef struct {
    void *const *in;        /* one_shot, two_shot: device table of every rank's symmetric input */
    size_t in_offset;       /* where x starts in each of them (the same on every rank) */
    void *const *res;       /* two_shot: device table of every rank's symmetric result buffer: the
                               y rows, then the r' rows (2 x T x H bf16); a rank writes its own rows */
    void *const *pad;       /* one_shot, two_shot: device table of every rank's signal pad */
    const void *sum;        /* norm kernel: the all-reduced x (T x H bf16) */
    void *y;                /* T x H out */
    void *residual_out;     /* T x H out; may equal residual */
    const void *gamma;      /* H */
    const void *bias;       /* H or NULL */
    const void *residual;   /* T x H or NULL */
    int64_t tokens, hidden; /* T, H (H a multiple of 8) */
    float eps;
    int rank, nranks;
    int grid;               /* blocks; one_shot, two_shot: equal on every rank, pad holds grid * W slots */
    agmm_dev_error *err;    /* one_shot, two_shot: where an expired wait is recorded */
    uint64_t timeout_ns;    /* bound of every wait */
} agmm_arn_args;

/* The norm kernel's grid for T rows on a device of num_sms SMs: a block per row, up to 8 per SM
 * (no waits, so any grid is safe). */
static inline int agmm_arn_norm_grid(int64_t tokens, int num_sms)
{
    const int64_t cap = 8 * (int64_t)(num_sms > 0 ? num_sms : 1);
    return (int)(tokens < cap ? tokens : cap);
}

/* Enqueue one run on `stream`; cudaGetLastError() after the launch. The fused ones follow
 * all_reduce.h's rules: every rank launches the same kernel with the same shape and grid, as many
 * times, on streams that may run concurrently. */
cudaError_t agmm_arn_norm_launch(const agmm_arn_args *args, cudaStream_t stream);
cudaError_t agmm_arn_one_shot_launch(const agmm_arn_args *args, cudaStream_t stream);
cudaError_t agmm_arn_two_shot_launch(const agmm_arn_args *args, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* AGMM_KERNELS_ALL_REDUCE_RMSNORM_H */
