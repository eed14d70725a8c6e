/* all_reduce, backend one_shot, on GPUs: every rank loads all W inputs over NVLink, sums them in
 * fp32 in rank order and writes its own output (kernels/all_reduce.cu has the kernel and its
 * barriers). Latency-optimal for small messages: two barriers and one pass, but each rank reads
 * W times the message.
 *
 * The plan owns: a symmetric signal pad (grid * W uint32 per rank, epoch-valued flags, never
 * reset) and, when an in-place run could not hold its sums in registers across the closing
 * barrier, a local staging buffer of the message's size. */
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "../core/validate.h"
#include "../kernels/all_reduce.h"
#include "../world/ctx_gpu.h"

typedef struct {
    agmm_symm_buf *pad;  /* signal pad: grid * nranks flags per rank */
    void *scratch;       /* in-place staging (nvec vectors), or NULL when registers suffice */
    int grid;            /* blocks per rank, equal on every rank */
    int64_t nvec;        /* 16-byte vectors of the message, the last possibly partial */
} one_shot_impl;

static void destroy(agmm_plan *plan)
{
    one_shot_impl *im = plan->impl;
    if (im == NULL)
        return;
    if (im->scratch)
        cudaFree(im->scratch);
    agmm_symm_free(plan->ctx, im->pad);
    free(im);
    plan->impl = NULL;
}

static agmm_status create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    const int nranks = ctx->world->nranks;
    one_shot_impl *im = calloc(1, sizeof *im);
    if (im == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "one_shot plan allocation failed");
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
    /* One vector per thread until the SM share is used up, then a grid-stride loop. */
    const int vec = agmm_ar_vec_elems(plan->ar.dtype);
    im->nvec = (plan->ar.n + vec - 1) / vec;
    int64_t want = (im->nvec + AGMM_AR_THREADS - 1) / AGMM_AR_THREADS;
    im->grid = want < max_blocks ? (int)want : max_blocks;

    st = agmm_symm_alloc(ctx, (size_t)im->grid * (size_t)nranks * sizeof(uint32_t), &im->pad);
    if (st != AGMM_SUCCESS)
        return st;
    if (im->nvec > (int64_t)im->grid * AGMM_AR_THREADS * AGMM_AR_REG_VECS) {
        size_t bytes = (size_t)im->nvec * AGMM_AR_VEC_BYTES;
        ce = cudaMalloc(&im->scratch, bytes);
        if (ce != cudaSuccess) {
            im->scratch = NULL;
            return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "one_shot in-place staging: cudaMalloc(%zu bytes): %s",
                             bytes, cudaGetErrorString(ce));
        }
    }
    return AGMM_SUCCESS;
}

static agmm_status run(agmm_plan *plan, const agmm_io *io, void *stream)
{
    agmm_ctx *ctx = plan->ctx;
    one_shot_impl *im = plan->impl;
    const int in_place = io->out == plan->input->local; /* plan.c refused a partial overlap */

    agmm_all_reduce_args a = {0};
    a.in = plan->input->d_peer;
    a.res = NULL;
    a.pad = im->pad->d_peer;
    a.out = io->out;
    a.scratch = im->scratch;
    a.n = plan->ar.n;
    a.rank = ctx->rank;
    a.nranks = ctx->world->nranks;
    a.grid = im->grid;
    /* In place, sums may overwrite our input only after the closing barrier: hold them in
     * registers when they fit, else stage them (kernels/all_reduce.cu). */
    if (!in_place)
        a.stage = AGMM_AR_STAGE_NONE;
    else if (im->scratch == NULL)
        a.stage = AGMM_AR_STAGE_REGS;
    else
        a.stage = AGMM_AR_STAGE_SCRATCH;
    a.epoch = plan->epoch;
    a.err = ctx->gpu->err_dev;
    a.timeout_ns = ctx->gpu->timeout_ns ? ctx->gpu->timeout_ns : 5000000000ull;
    cudaError_t ce = agmm_all_reduce_one_shot_launch(&a, plan->ar.dtype, (cudaStream_t)stream);
    if (ce != cudaSuccess)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_CUDA, "one_shot launch (grid %d, n=%lld): %s", im->grid,
                         (long long)plan->ar.n, cudaGetErrorString(ce));
    return agmm_ctx_gpu_note_run(ctx, (cudaStream_t)stream);
}

const agmm_backend_ops agmm_gpu_all_reduce_one_shot_ops = {
    .id = AGMM_BACKEND_ONE_SHOT,
    .op = AGMM_OP_ALL_REDUCE,
    .cpu = 0,
    .nccl = 0,
    .create = create,
    .run = run,
    .destroy = destroy,
};
