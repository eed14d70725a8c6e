/* All-reduce in the CPU world: the `nccl` stand-in, `one_shot` and `two_shot` (design.md §2).
 *
 * Every backend sums in fp32, element by element, over ranks 0, 1, ..., W-1 in that order, and
 * rounds once to the output type. So all ranks get bit for bit the same result, and so do all
 * three backends.
 *
 * one_shot (and nccl, which has no NCCL to call in the CPU world and runs the same algorithm as
 * the plain sum an ncclAllReduce would be checked against):
 *   barrier 1   every rank's input is written
 *   sum         every rank reads all W inputs and sums them into its output
 *   barrier 2   nobody reads my input any more: my caller may overwrite it after the run
 *   In place (out == my input) a peer may still be reading my input while I would write the sum
 *   over it, so the sum goes to a private staging buffer and is copied out after barrier 2.
 *
 * two_shot:
 *   barrier 1   every rank's input is written
 *   reduce-scatter  rank r sums slice r (elements [r*n/W, (r+1)*n/W), empty when n < W) of all
 *               inputs into the same slice of its symmetric scratch
 *   barrier 2   every slice is reduced, and nobody reads any input any more (so writing the
 *               output over my input is safe from here, in place or not)
 *   all-gather  every rank copies slice s from rank s's scratch into its output
 *   No closing barrier: my scratch is next written in the next run's reduce-scatter, after that
 *   run's barrier 1, which no rank passes before every rank has finished this all-gather. */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#include "../core/numeric.h"
#include "../core/validate.h"
#include "../symm/symm.h"

#define SUM_BLOCK 1024

typedef struct {
    void *staging;             /* one_shot/nccl: n elements, private (in-place runs) */
    agmm_symm_buf *scratch;    /* two_shot: n elements, symmetric */
} ar_impl;

/* dst[i - lo] = sum over r of in[r][i], i in [lo, hi): fp32, ranks in order 0..W-1. */
static void sum_range(void *const *in, int nranks, agmm_dtype dtype, int64_t lo, int64_t hi, void *dst)
{
    float acc[SUM_BLOCK];
    for (int64_t b = lo; b < hi; b += SUM_BLOCK) {
        int64_t len = hi - b < SUM_BLOCK ? hi - b : SUM_BLOCK;
        if (dtype == AGMM_DTYPE_F32) {
            memcpy(acc, (const float *)in[0] + b, (size_t)len * sizeof(float));
            for (int r = 1; r < nranks; r++) {
                const float *x = (const float *)in[r] + b;
                for (int64_t i = 0; i < len; i++)
                    acc[i] += x[i];
            }
            memcpy((float *)dst + (b - lo), acc, (size_t)len * sizeof(float));
        } else {
            const uint16_t *x0 = (const uint16_t *)in[0] + b;
            for (int64_t i = 0; i < len; i++)
                acc[i] = agmm_bf16_to_f32(x0[i]);
            for (int r = 1; r < nranks; r++) {
                const uint16_t *x = (const uint16_t *)in[r] + b;
                for (int64_t i = 0; i < len; i++)
                    acc[i] += agmm_bf16_to_f32(x[i]);
            }
            uint16_t *out = (uint16_t *)dst + (b - lo);
            for (int64_t i = 0; i < len; i++)
                out[i] = agmm_f32_to_bf16(acc[i]);
        }
    }
}

static agmm_status ar_create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    size_t bytes = (size_t)plan->ar.n * agmm_dtype_bytes(plan->ar.dtype);
    ar_impl *impl = calloc(1, sizeof *impl);
    if (impl == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", ctx->rank);
    plan->impl = impl;
    if (plan->ar.backend == AGMM_BACKEND_TWO_SHOT)
        return agmm_symm_alloc(ctx, bytes, &impl->scratch);
    impl->staging = malloc(bytes);
    if (impl->staging == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: all_reduce staging of %zu bytes allocation failed",
                         ctx->rank, bytes);
    return AGMM_SUCCESS;
}

static void ar_destroy(agmm_plan *plan)
{
    ar_impl *impl = plan->impl;
    agmm_symm_free(plan->ctx, impl->scratch);
    free(impl->staging);
    free(impl);
    plan->impl = NULL;
}

static agmm_status sum_all_run(agmm_plan *plan, const agmm_io *io, const char *opening, const char *closing)
{
    ar_impl *impl = plan->impl;
    agmm_ctx *ctx = plan->ctx;
    int64_t n = plan->ar.n;
    int in_place = io->out == plan->input->local;

    agmm_status st = agmm_cpu_barrier(ctx, opening);
    if (st != AGMM_SUCCESS)
        return st;
    sum_range(plan->input->peer, ctx->world->nranks, plan->ar.dtype, 0, n, in_place ? impl->staging : io->out);
    st = agmm_cpu_barrier(ctx, closing);
    if (st != AGMM_SUCCESS)
        return st;
    if (in_place)
        memcpy(io->out, impl->staging, (size_t)n * agmm_dtype_bytes(plan->ar.dtype));
    return AGMM_SUCCESS;
}

static agmm_status nccl_run(agmm_plan *plan, const agmm_io *io, void *stream)
{
    return sum_all_run(plan, io, "all_reduce/nccl opening barrier", "all_reduce/nccl closing barrier");
}

static agmm_status one_shot_run(agmm_plan *plan, const agmm_io *io, void *stream)
{
    return sum_all_run(plan, io, "all_reduce/one_shot opening barrier", "all_reduce/one_shot closing barrier");
}

static agmm_status two_shot_run(agmm_plan *plan, const agmm_io *io, void *stream)
{
    ar_impl *impl = plan->impl;
    agmm_ctx *ctx = plan->ctx;
    int nranks = ctx->world->nranks, rank = ctx->rank;
    int64_t n = plan->ar.n;
    size_t es = agmm_dtype_bytes(plan->ar.dtype);

    agmm_status st = agmm_cpu_barrier(ctx, "all_reduce/two_shot opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    int64_t lo = (int64_t)rank * n / nranks, hi = (int64_t)(rank + 1) * n / nranks;
    sum_range(plan->input->peer, nranks, plan->ar.dtype, lo, hi, (char *)impl->scratch->local + (size_t)lo * es);
    st = agmm_cpu_barrier(ctx, "all_reduce/two_shot reduce-scatter barrier");
    if (st != AGMM_SUCCESS)
        return st;
    /* All-gather, starting with my own slice and going round: ranks pull from different peers. */
    for (int pos = 0; pos < nranks; pos++) {
        int src = (rank + pos) % nranks;
        int64_t s_lo = (int64_t)src * n / nranks, s_hi = (int64_t)(src + 1) * n / nranks;
        if (s_hi > s_lo)
            memcpy((char *)io->out + (size_t)s_lo * es, (const char *)impl->scratch->peer[src] + (size_t)s_lo * es,
                   (size_t)(s_hi - s_lo) * es);
    }
    return AGMM_SUCCESS;
}

const agmm_backend_ops agmm_cpu_all_reduce_nccl_ops = {
    .id = AGMM_BACKEND_NCCL,
    .op = AGMM_OP_ALL_REDUCE,
    .cpu = 1,
    .nccl = 0,
    .create = ar_create,
    .run = nccl_run,
    .destroy = ar_destroy,
};

const agmm_backend_ops agmm_cpu_all_reduce_one_shot_ops = {
    .id = AGMM_BACKEND_ONE_SHOT,
    .op = AGMM_OP_ALL_REDUCE,
    .cpu = 1,
    .nccl = 0,
    .create = ar_create,
    .run = one_shot_run,
    .destroy = ar_destroy,
};

const agmm_backend_ops agmm_cpu_all_reduce_two_shot_ops = {
    .id = AGMM_BACKEND_TWO_SHOT,
    .op = AGMM_OP_ALL_REDUCE,
    .cpu = 1,
    .nccl = 0,
    .create = ar_create,
    .run = two_shot_run,
    .destroy = ar_destroy,
};
