/* all_reduce_rmsnorm `one_shot`: every rank loads every row of all W inputs, sums them in fp32 in
 * rank order and runs the epilogue (bias, residual, r', the norm, y) on the sum while it is still
 * in registers: one kernel, two barriers, no intermediate buffer. Each rank reads W times the
 * message: small T.
 *
 * GPU: kernels/all_reduce_rmsnorm.cu has the kernel. The plan owns a symmetric signal pad (grid x W
 * uint32 per rank, epoch-valued flags, never reset), as all_reduce's one_shot; at W = 1 none: the
 * kernel is then the epilogue alone, with no barrier.
 * CPU world: the one pass of all_reduce_rmsnorm_cpu.h. */
#include <stdint.h>
#include <stdlib.h>

#include "all_reduce_rmsnorm_cpu.h"

#define WHAT "all_reduce_rmsnorm/one_shot"

static agmm_status cpu_run(agmm_plan *plan, const void *io, void *stream)
{
    return agmm_arn_cpu_one_pass(plan, io, WHAT);
}

static const agmm_backend_impl one_shot_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = agmm_arn_cpu_scratch_create,
    .run = cpu_run,
    .destroy = agmm_arn_cpu_scratch_destroy,
    .mem_need = agmm_arn_cpu_scratch_mem_need,
};

#ifdef AGMM_HAVE_CUDA
#include "../kernels/all_reduce_rmsnorm.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_symm_buf *pad;  /* signal pad: grid * nranks flags per rank; none at W = 1 */
    int grid;            /* blocks per rank, equal on every rank */
} one_shot_impl;

static void gpu_destroy(agmm_plan *plan)
{
    one_shot_impl *im = plan->state;
    if (im == NULL)
        return;
    agmm_symm_free(plan->ctx, im->pad);
    free(im);
    plan->state = NULL;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    one_shot_impl *im = calloc(1, sizeof *im);
    if (im == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, WHAT " plan allocation failed");
    plan->state = im;
    cudaError_t ce = cudaSetDevice(ri->device);
    if (ce != cudaSuccess)
        return AGMM_FAIL(err, AGMM_ERR_CUDA, "cudaSetDevice(%d): %s", ri->device, cudaGetErrorString(ce));
    /* W = 1: no peer to wait for (the kernel has no barrier), so the grid need not stay resident
     * together: the norm kernel's, a block per row up to 8 per SM. */
    const int64_t rows = plan->desc.arn.tokens;
    if (ri->nranks == 1) {
        im->grid = agmm_arn_norm_grid(rows, agmm_ctx_gpu(ctx)->num_sms);
        return AGMM_SUCCESS;
    }
    int max_blocks = 1;
    agmm_status st = agmm_gpu_agreed_sm_share(ctx, &max_blocks);
    if (st != AGMM_SUCCESS)
        return st;
    /* A block per row until the SM share is used up, then rows b, b + grid, ... */
    im->grid = rows < max_blocks ? (int)rows : max_blocks;
    return agmm_symm_alloc(ctx, (size_t)im->grid * (size_t)ri->nranks * sizeof(uint32_t), &im->pad);
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    const agmm_all_reduce_rmsnorm_io *io = vio;
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    agmm_ctx *ctx = plan->ctx;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    one_shot_impl *im = plan->state;
    agmm_arn_args a = {0};
    a.in = plan->in->d_peer;
    a.in_offset = plan->in_offset;
    a.pad = im->pad ? im->pad->d_peer : NULL;
    a.y = io->y;
    a.residual_out = io->residual_out;
    a.gamma = io->gamma;
    a.bias = io->bias;
    a.residual = io->residual;
    a.tokens = d->tokens;
    a.hidden = d->hidden;
    a.eps = (float)d->eps;
    a.rank = ri->rank;
    a.nranks = ri->nranks;
    a.grid = im->grid;
    a.err = g->err_dev;
    a.timeout_ns = g->timeout_ns; /* the world's, never 0 (world_common.c) */
    cudaError_t ce = agmm_arn_one_shot_launch(&a, (cudaStream_t)stream);
    if (ce != cudaSuccess)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_CUDA, WHAT " launch (grid %d, T=%lld H=%lld): %s", im->grid,
                         (long long)d->tokens, (long long)d->hidden, cudaGetErrorString(ce));
    return agmm_gpu_note_run(ctx, (cudaStream_t)stream);
}

/* The pad: grid <= SMs (none at W = 1). */
static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const int nranks = agmm_ctx_info(plan->ctx)->nranks;
    if (nranks > 1)
        need->symmetric_bytes += (uint64_t)agmm_ctx_gpu(plan->ctx)->num_sms * (uint64_t)nranks * sizeof(uint32_t);
}

static const agmm_backend_impl one_shot_gpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define ONE_SHOT_GPU (&one_shot_gpu_impl)
#else
#define ONE_SHOT_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_all_reduce_rmsnorm_one_shot = {
    .name = "one_shot",
    .op = AGMM_OP_ALL_REDUCE_RMSNORM,
    .summary = "every rank loads every row of all peers' inputs, sums and normalises it in registers: one "
               "kernel, two barriers (small T)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 0,
    .cpu = &one_shot_cpu_impl,
    .gpu = ONE_SHOT_GPU,
};
