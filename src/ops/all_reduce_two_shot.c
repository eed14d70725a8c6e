/* all_reduce, backend two_shot, on GPUs: reduce-scatter by loads (rank r sums its 1/W slice
 * from all W inputs into its symmetric result buffer), a barrier, then all-gather by loads (every
 * rank pulls the other slices from their owners' result buffers). Each rank moves 2(W-1)/W of
 * the message over NVLink, which is what large messages need (kernels/all_reduce.cu has the
 * kernel and why it needs no closing barrier).
 *
 * The plan owns: a symmetric signal pad (grid * W uint32 per rank, epoch-valued flags, never
 * reset) and a symmetric result buffer of the message's size rounded up to 16-byte vectors. */
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "../core/validate.h"
#include "../kernels/all_reduce.h"
#include "../world/ctx_gpu.h"

typedef struct {
    agmm_symm_buf *pad;  /* signal pad: grid * nranks flags per rank */
    agmm_symm_buf *res;  /* reduced slices: rank r's slice lives in rank r's buffer */
    int grid;            /* blocks per rank, equal on every rank */
} two_shot_impl;

static void destroy(agmm_plan *plan)
{
    two_shot_impl *im = plan->impl;
    if (im == NULL)
        return;
    agmm_symm_free(plan->ctx, im->res);
    agmm_symm_free(plan->ctx, im->pad);
    free(im);
    plan->impl = NULL;
}

static agmm_status create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    const int nranks = ctx->world->nranks;
    two_shot_impl *im = calloc(1, sizeof *im);
    if (im == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "two_shot plan allocation failed");
    plan->impl = im;
    if ((uintptr_t)plan->input->local % AGMM_AR_VEC_BYTES != 0)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL, "symmetric input %p is not 16-byte aligned",
                         plan->input->local);

    cudaError_t ce = cudaSetDevice(ctx->device);
    if (ce != cudaSuccess)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_CUDA, "cudaSetDevice(%d): %s", ctx->device, cudaGetErrorString(ce));
    int max_blocks = 1;
    agmm_status st = agmm_ctx_gpu_agreed_sm_share(ctx, &max_blocks);
    if (st != AGMM_SUCCESS)
        return st;
    /* One vector of the rank's slice per thread until the SM share is used up, then a
     * grid-stride loop. */
    const int vec = agmm_ar_vec_elems(plan->ar.dtype);
    const int64_t nvec = (plan->ar.n + vec - 1) / vec;
    const int64_t slice = (nvec + nranks - 1) / nranks;
    int64_t want = (slice + AGMM_AR_THREADS - 1) / AGMM_AR_THREADS;
    im->grid = want < 1 ? 1 : want < max_blocks ? (int)want : max_blocks;

    st = agmm_symm_alloc(ctx, (size_t)im->grid * (size_t)nranks * sizeof(uint32_t), &im->pad);
    if (st != AGMM_SUCCESS)
        return st;
    st = agmm_symm_alloc(ctx, (size_t)nvec * AGMM_AR_VEC_BYTES, &im->res);
    if (st != AGMM_SUCCESS)
        return st;
    if ((uintptr_t)im->res->local % AGMM_AR_VEC_BYTES != 0)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL, "symmetric result buffer %p is not 16-byte aligned",
                         im->res->local);
    return AGMM_SUCCESS;
}

static agmm_status run(agmm_plan *plan, const agmm_io *io, void *stream)
{
    agmm_ctx *ctx = plan->ctx;
    two_shot_impl *im = plan->impl;

    /* In place needs nothing special here: see the kernel's step 2 and 4. */
    agmm_all_reduce_args a = {0};
    a.in = plan->input->d_peer;
    a.res = im->res->d_peer;
    a.pad = im->pad->d_peer;
    a.out = io->out;
    a.scratch = NULL;
    a.n = plan->ar.n;
    a.rank = ctx->rank;
    a.nranks = ctx->world->nranks;
    a.grid = im->grid;
    a.stage = AGMM_AR_STAGE_NONE;
    a.epoch = plan->epoch;
    a.err = ctx->gpu->err_dev;
    a.timeout_ns = ctx->gpu->timeout_ns ? ctx->gpu->timeout_ns : 5000000000ull;
    cudaError_t ce = agmm_all_reduce_two_shot_launch(&a, plan->ar.dtype, (cudaStream_t)stream);
    if (ce != cudaSuccess)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_CUDA, "two_shot launch (grid %d, n=%lld): %s", im->grid,
                         (long long)plan->ar.n, cudaGetErrorString(ce));
    return agmm_ctx_gpu_note_run(ctx, (cudaStream_t)stream);
}

const agmm_backend_ops agmm_gpu_all_reduce_two_shot_ops = {
    .id = AGMM_BACKEND_TWO_SHOT,
    .op = AGMM_OP_ALL_REDUCE,
    .cpu = 0,
    .nccl = 0,
    .create = create,
    .run = run,
    .destroy = destroy,
};
