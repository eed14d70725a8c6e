/* All-gather matmul, baseline (backend `nccl` in the CPU world): gather every shard, then one
 * GEMM over all rows. It is what the seed's `nccl` column does (ncclAllGather, then cuBLAS),
 * with plain copies from the symmetric heap standing in for NCCL.
 *
 * Protocol of one run (W ranks, epoch e of the plan):
 *   barrier 1   every rank's shard is written (the caller wrote it before the run)
 *   gather      A[r*M : (r+1)*M] = shard of rank r, read through plan->input->peer[r]
 *   barrier 2   nobody reads my shard any more, so my caller may overwrite it after the run
 *   GEMM        C = A * B over all W*M rows
 *
 * (Named ag_matmul_allgather.c, not ag_matmul_nccl.c: the Makefile leaves *_nccl.c files out of
 * builds without CUDA, and this one has no NCCL in it.) */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    agmm_cpu_gemm_ws ws;
} allgather_impl;

static agmm_status allgather_create(agmm_plan *plan)
{
    allgather_impl *impl = calloc(1, sizeof *impl);
    if (impl == NULL)
        return AGMM_FAIL(&plan->ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", plan->ctx->rank);
    plan->impl = impl;
    return agmm_cpu_gemm_ws_init(&impl->ws, plan->mm.k, &plan->ctx->err);
}

static agmm_status allgather_run(agmm_plan *plan, const agmm_io *io, void *stream)
{
    allgather_impl *impl = plan->impl;
    agmm_ctx *ctx = plan->ctx;
    const agmm_ag_matmul_desc *d = &plan->mm;
    int nranks = ctx->world->nranks;
    size_t shard_bytes = (size_t)(d->m * d->k) * sizeof(uint16_t);
    uint16_t *a = io->a_gathered;

    agmm_status st = agmm_cpu_barrier(ctx, "ag_matmul/nccl opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    for (int r = 0; r < nranks; r++)
        memcpy(a + (size_t)r * (size_t)(d->m * d->k), plan->input->peer[r], shard_bytes);
    st = agmm_cpu_barrier(ctx, "ag_matmul/nccl closing barrier");
    if (st != AGMM_SUCCESS)
        return st;
    agmm_cpu_gemm_ws_forget_b(&impl->ws); /* B may hold new values since the last run */
    agmm_cpu_gemm_bf16(&impl->ws, a, d->k, nranks * d->m, io->b, d->b_layout, d->n, 0, d->n, io->c, d->n);
    return AGMM_SUCCESS;
}

static void allgather_destroy(agmm_plan *plan)
{
    allgather_impl *impl = plan->impl;
    agmm_cpu_gemm_ws_free(&impl->ws);
    free(impl);
    plan->impl = NULL;
}

const agmm_backend_ops agmm_cpu_ag_matmul_nccl_ops = {
    .id = AGMM_BACKEND_NCCL,
    .op = AGMM_OP_AG_MATMUL,
    .cpu = 1,
    .nccl = 0,
    .create = allgather_create,
    .run = allgather_run,
    .destroy = allgather_destroy,
};
