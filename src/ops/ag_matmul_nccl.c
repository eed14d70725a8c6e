/* ag_matmul `nccl`: ncclAllGather of every rank's shard into the gathered A, then one cuBLASLt
 * GEMM over all W*M rows (the seed's nccl column). Plan time: the GEMM's descriptors and
 * algorithm, and its workspace. */
#include <stdlib.h>

#include "backend.h"
#include "gemm_lt.h"
#include "../world/ctx_gpu.h"
#include "../world/gpu_check.h"

typedef struct {
    agmm_gemm_lt *gemm;
    void *workspace;
} nccl_mm;

static void destroy(agmm_plan *p)
{
    nccl_mm *x = p->impl;
    agmm_gemm_lt_destroy(x->gemm);
    cudaFree(x->workspace);
    free(x);
    p->impl = NULL;
}

static agmm_status create(agmm_plan *p)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    nccl_mm *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", ctx->rank);
    p->impl = x;
    int64_t rows = (int64_t)ctx->world->nranks * p->mm.m;
    AGMM_TRY(st, agmm_gemm_lt_create(&x->gemm, ctx->gpu->lt, rows, p->mm.n, p->mm.k, p->mm.b_layout, 16,
                                     AGMM_GEMM_LT_WORKSPACE_BYTES, &ctx->err));
    AGMM_CUDA_TRY(st, &ctx->err, cudaMalloc(&x->workspace, AGMM_GEMM_LT_WORKSPACE_BYTES));
fail:
    return st;
}

static agmm_status run(agmm_plan *p, const agmm_io *io, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    nccl_mm *x = p->impl;
    cudaStream_t s = (cudaStream_t)stream;
    ncclComm_t comm = (ncclComm_t)ctx->nccl_comm;
    AGMM_NCCL_TRY(st, &ctx->err, comm,
                  ncclAllGather(p->input->local, io->a_gathered, (size_t)(p->mm.m * p->mm.k), ncclBfloat16, comm, s));
    AGMM_TRY(st, agmm_gemm_lt_run(x->gemm, io->a_gathered, io->b, io->c, x->workspace, s, &ctx->err));
    AGMM_TRY(st, agmm_ctx_gpu_note_run(ctx, s));
fail:
    return st;
}

const agmm_backend_ops agmm_gpu_ag_matmul_nccl_ops = {
    .id = AGMM_BACKEND_NCCL,
    .op = AGMM_OP_AG_MATMUL,
    .cpu = 0,
    .nccl = 1,
    .create = create,
    .run = run,
    .destroy = destroy,
};
