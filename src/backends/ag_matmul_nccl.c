/* ag_matmul `nccl`: gather every shard, then one GEMM over all W*M rows (the seed's nccl column).
 *
 * GPU: ncclAllGather of every rank's shard into the gathered A, then one cuBLASLt GEMM. Plan
 * time: the GEMM's descriptors and algorithm, and its workspace.
 *
 * CPU world (no NCCL there): the same two steps with plain copies from the symmetric heap
 * standing in for ncclAllGather:
 *   barrier 1   every rank's shard is written (the caller wrote it before the run)
 *   gather      A[r*M : (r+1)*M] = shard of rank r, read through agmm_plan_in_peer(plan, r)
 *   barrier 2   nobody reads my shard any more, so my caller may overwrite it after the run
 *   GEMM        C = A * B over all W*M rows */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "../cpu/cpu.h"

/* ---- CPU world ---- */

static void cpu_destroy(agmm_plan *plan)
{
    agmm_cpu_gemm_ws *ws = plan->state;
    if (ws == NULL)
        return;
    agmm_cpu_gemm_ws_free(ws);
    free(ws);
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    agmm_cpu_gemm_ws *ws = calloc(1, sizeof *ws);
    if (ws == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed",
                         agmm_ctx_info(plan->ctx)->rank);
    plan->state = ws;
    return agmm_cpu_gemm_ws_init(ws, plan->desc.mm.k, agmm_ctx_err(plan->ctx));
}

static agmm_status cpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    const agmm_ag_matmul_io *io = vio;
    agmm_cpu_gemm_ws *ws = plan->state;
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    int nranks = agmm_ctx_info(plan->ctx)->nranks;
    size_t shard_bytes = (size_t)(d->m * d->k) * sizeof(uint16_t);
    uint16_t *a = io->a_gathered;

    agmm_status st = agmm_symm_barrier_host(plan->ctx, "ag_matmul/nccl opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    for (int r = 0; r < nranks; r++)
        memcpy(a + (size_t)r * (size_t)(d->m * d->k), agmm_plan_in_peer(plan, r), shard_bytes);
    st = agmm_symm_barrier_host(plan->ctx, "ag_matmul/nccl closing barrier");
    if (st != AGMM_SUCCESS)
        return st;
    agmm_cpu_gemm_ws_forget_b(ws); /* B may hold new values since the last run */
    agmm_cpu_gemm_bf16(ws, a, d->k, nranks * d->m, io->b, d->b_layout, d->n, 0, d->n, io->c, d->n);
    return AGMM_SUCCESS;
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->workspace_bytes += agmm_cpu_gemm_ws_bytes(plan->desc.mm.k);
}

/* Like NCCL it needs no peer memory: a CPU world's ranks all run on one host and map each
 * other's host memory, even where they claim different hosts (a world spanning nodes, tested). */
static const agmm_backend_impl nccl_cpu_impl = {
    .needs = 0,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
    .mem_need = cpu_mem_need,
};

/* ---- GPUs ---- */
#ifdef AGMM_HAVE_CUDA
#include "gemm_lt.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_gemm_lt *gemm;
    void *workspace;
} nccl_gpu;

static void gpu_destroy(agmm_plan *plan)
{
    nccl_gpu *x = plan->state;
    if (x == NULL)
        return;
    agmm_gemm_lt_destroy(x->gemm);
    cudaFree(x->workspace);
    free(x);
    plan->state = NULL;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    nccl_gpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", agmm_ctx_info(ctx)->rank);
    plan->state = x;
    int64_t rows = (int64_t)agmm_ctx_info(ctx)->nranks * d->m;
    /* cuBLASLt: the baseline is what frameworks run. */
    AGMM_TRY(st, agmm_gemm_lt_create(&x->gemm, agmm_ctx_gpu(ctx)->lt, rows, d->n, d->k, d->b_layout, 16,
                                     AGMM_GEMM_LT_WORKSPACE_BYTES, 0, err));
    AGMM_CUDA_TRY(st, err, cudaMalloc(&x->workspace, AGMM_GEMM_LT_WORKSPACE_BYTES));
fail:
    return st;
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_ag_matmul_io *io = vio;
    agmm_error *err = agmm_ctx_err(plan->ctx);
    nccl_gpu *x = plan->state;
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    cudaStream_t s = (cudaStream_t)stream;
    ncclComm_t comm = agmm_ctx_gpu(plan->ctx)->nccl_comm;
    AGMM_TRY(st, agmm_gpu_nccl_settle(plan->ctx,
                                      ncclAllGather(agmm_plan_in(plan), io->a_gathered, (size_t)(d->m * d->k),
                                                    ncclBfloat16, comm, s),
                                      "ncclAllGather"));
    AGMM_TRY(st, agmm_gemm_lt_run(x->gemm, io->a_gathered, io->b, io->c, x->workspace, s, err));
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, s));
fail:
    return st;
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->workspace_bytes += AGMM_GEMM_LT_WORKSPACE_BYTES;
}

static const agmm_backend_impl nccl_gpu_impl = {
    .needs = AGMM_CAP_NCCL,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define NCCL_GPU (&nccl_gpu_impl)
#else
#define NCCL_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_ag_matmul_nccl = {
    .name = "nccl",
    .op = AGMM_OP_AG_MATMUL,
    .summary = "ncclAllGather of the shards, then one cuBLASLt GEMM over all rows (the seed's baseline)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 2,
    .cpu = &nccl_cpu_impl,
    .gpu = NCCL_GPU,
};
