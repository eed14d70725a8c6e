/* all_reduce_rmsnorm `nccl`, the baseline: ncclAllReduce of x (bf16) from the plan's symmetric
 * input into a plan-owned symmetric buffer (both NCCL windows, so NCCL may take its symmetric
 * kernels), then one kernel that adds bias and residual and normalises (kernels/all_reduce_rmsnorm.cu,
 * the same epilogue as one_shot and two_shot). The sum reaches the epilogue rounded to bf16, in
 * NCCL's order: r' and y match the fused backends within rounding, not bit for bit.
 *
 * CPU world (no NCCL there), the same protocol with a stand-in for ncclAllReduce:
 *   barrier 1   every rank's input is written
 *   sum         every rank sums all W inputs (fp32, ranks in order) and rounds to bf16 into its
 *               private staging buffer: what the ncclAllReduce leaves
 *   barrier 2   nobody reads my input any more
 *   epilogue    every row from the staging buffer, locally */
#include <stdlib.h>

#include "all_reduce_cpu.h"
#include "all_reduce_rmsnorm_cpu.h"

typedef struct {
    float *acc;         /* one row of fp32 scratch */
    uint16_t *sum;      /* T x H: the rounded sum */
} nccl_cpu_state;

static void cpu_destroy(agmm_plan *plan)
{
    nccl_cpu_state *s = plan->state;
    if (s) {
        free(s->acc);
        free(s->sum);
        free(s);
    }
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    nccl_cpu_state *s = calloc(1, sizeof *s);
    plan->state = s;
    if (s) {
        s->acc = malloc((size_t)d->hidden * sizeof *s->acc);
        s->sum = malloc((size_t)(d->tokens * d->hidden) * sizeof *s->sum);
    }
    if (s == NULL || s->acc == NULL || s->sum == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY,
                         "rank %d: all_reduce_rmsnorm/nccl staging of %lld x %lld bf16: allocation failed",
                         agmm_ctx_info(plan->ctx)->rank, (long long)d->tokens, (long long)d->hidden);
    return AGMM_SUCCESS;
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    need->staging_bytes += (uint64_t)(d->tokens * d->hidden) * 2;
    need->workspace_bytes += (uint64_t)d->hidden * sizeof(float);
}

static agmm_status cpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    const agmm_all_reduce_rmsnorm_io *io = vio;
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    nccl_cpu_state *s = plan->state;
    agmm_status st = agmm_symm_barrier_host(plan->ctx, "all_reduce_rmsnorm/nccl opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    void *in[AGMM_MAX_RANKS];
    const int nranks = agmm_ctx_info(plan->ctx)->nranks;
    for (int r = 0; r < nranks; r++)
        in[r] = agmm_plan_in_peer(plan, r);
    agmm_ar_cpu_sum(in, nranks, AGMM_DTYPE_BF16, 0, d->tokens * d->hidden, s->sum);
    st = agmm_symm_barrier_host(plan->ctx, "all_reduce_rmsnorm/nccl closing barrier");
    if (st != AGMM_SUCCESS)
        return st;
    void *sum = s->sum;
    agmm_arn_cpu_rows(plan, io, &sum, 1, 0, d->tokens, s->acc, io->y, io->residual_out);
    return AGMM_SUCCESS;
}

/* Like NCCL it needs no peer memory (all_reduce_nccl.c says why that holds in the CPU world). */
static const agmm_backend_impl nccl_cpu_impl = {
    .needs = 0,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
    .mem_need = cpu_mem_need,
};

#ifdef AGMM_HAVE_CUDA
#include "../kernels/all_reduce_rmsnorm.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_symm_buf *sum;  /* T x H bf16, an NCCL window: ncclAllReduce's output */
    int grid;
} nccl_gpu_state;

static void gpu_destroy(agmm_plan *plan)
{
    nccl_gpu_state *s = plan->state;
    if (s) {
        agmm_symm_free(plan->ctx, s->sum);
        free(s);
    }
    plan->state = NULL;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    nccl_gpu_state *s = calloc(1, sizeof *s);
    plan->state = s;
    if (s == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY, "all_reduce_rmsnorm/nccl plan allocation failed");
    s->grid = agmm_arn_norm_grid(d->tokens, agmm_ctx_gpu(plan->ctx)->num_sms);
    return agmm_symm_alloc(plan->ctx, (size_t)(d->tokens * d->hidden) * 2, &s->sum);
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_all_reduce_rmsnorm_io *io = vio;
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    nccl_gpu_state *s = plan->state;
    ncclComm_t comm = agmm_ctx_gpu(plan->ctx)->nccl_comm;
    cudaStream_t cs = (cudaStream_t)stream;
    AGMM_TRY(st, agmm_gpu_nccl_settle(plan->ctx,
                                      ncclAllReduce(agmm_plan_in(plan), s->sum->local, (size_t)(d->tokens * d->hidden),
                                                    ncclBfloat16, ncclSum, comm, cs),
                                      "ncclAllReduce"));
    agmm_arn_args a = {0};
    a.sum = s->sum->local;
    a.y = io->y;
    a.residual_out = io->residual_out;
    a.gamma = io->gamma;
    a.bias = io->bias;
    a.residual = io->residual;
    a.tokens = d->tokens;
    a.hidden = d->hidden;
    a.eps = (float)d->eps;
    a.grid = s->grid;
    cudaError_t ce = agmm_arn_norm_launch(&a, cs);
    if (ce != cudaSuccess)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_CUDA, "all_reduce_rmsnorm/nccl norm launch (grid %d): %s",
                         s->grid, cudaGetErrorString(ce));
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, cs));
fail:
    return st;
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->symmetric_bytes += (uint64_t)(plan->desc.arn.tokens * plan->desc.arn.hidden) * 2;
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
#endif

const agmm_backend agmm_backend_all_reduce_rmsnorm_nccl = {
    .name = "nccl",
    .op = AGMM_OP_ALL_REDUCE_RMSNORM,
    .summary = "ncclAllReduce of x into an NCCL window, then one kernel adds bias and residual and normalises "
               "(the baseline)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 2,
    .cpu = &nccl_cpu_impl,
    .gpu = NCCL_GPU,
};
