/* all_reduce `one_shot`: every rank loads all W inputs, sums them in fp32 in rank order and
 * writes its own output. Latency-optimal for small messages: two barriers and one pass, but each
 * rank reads W times the message.
 *
 * GPU: kernels/all_reduce.cu has the kernel and its barriers. The plan owns a symmetric signal pad
 * (grid * W uint32 per rank, epoch-valued flags, never reset) and, when an in-place run could not
 * hold its sums in registers across the closing barrier, a local staging buffer of the message's
 * size.
 * CPU world: the one-pass sum of all_reduce_cpu.h. */
#include <stdint.h>
#include <stdlib.h>

#include "all_reduce_cpu.h"

#define WHAT "all_reduce/one_shot"

static agmm_status cpu_run(agmm_plan *plan, const void *io, void *stream)
{
    return agmm_ar_cpu_sum_run(plan, io, WHAT);
}

static const agmm_backend_impl one_shot_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = agmm_ar_cpu_sum_create,
    .run = cpu_run,
    .destroy = agmm_ar_cpu_sum_destroy,
    .mem_need = agmm_ar_cpu_sum_mem_need,
};

#ifdef AGMM_HAVE_CUDA
#include "../core/validate.h"
#include "../kernels/all_reduce.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_symm_buf *pad;  /* signal pad: grid * nranks flags per rank */
    void *scratch;       /* in-place staging (nvec vectors), or NULL when registers suffice */
    int grid;            /* blocks per rank, equal on every rank */
    int64_t nvec;        /* 16-byte vectors of the message, the last possibly partial */
} one_shot_impl;

static void gpu_destroy(agmm_plan *plan)
{
    one_shot_impl *im = plan->state;
    if (im == NULL)
        return;
    if (im->scratch)
        cudaFree(im->scratch);
    agmm_symm_free(plan->ctx, im->pad);
    free(im);
    plan->state = NULL;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const int nranks = ri->nranks;
    one_shot_impl *im = calloc(1, sizeof *im);
    if (im == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "one_shot plan allocation failed");
    plan->state = im;
    if ((uintptr_t)plan->input->local % AGMM_AR_VEC_BYTES != 0)
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "symmetric input %p is not 16-byte aligned", plan->input->local);

    cudaError_t ce = cudaSetDevice(ri->device);
    if (ce != cudaSuccess)
        return AGMM_FAIL(err, AGMM_ERR_CUDA, "cudaSetDevice(%d): %s", ri->device, cudaGetErrorString(ce));
    int max_blocks = 1;
    agmm_status st = agmm_gpu_agreed_sm_share(ctx, &max_blocks);
    if (st != AGMM_SUCCESS)
        return st;
    /* One vector per thread until the SM share is used up, then a grid-stride loop. */
    const int vec = agmm_ar_vec_elems(plan->desc.ar.dtype);
    im->nvec = (plan->desc.ar.n + vec - 1) / vec;
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
            return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "one_shot in-place staging: cudaMalloc(%zu bytes): %s",
                             bytes, cudaGetErrorString(ce));
        }
    }
    return AGMM_SUCCESS;
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    const agmm_all_reduce_io *io = vio;
    agmm_ctx *ctx = plan->ctx;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    one_shot_impl *im = plan->state;
    const int in_place = io->out == agmm_plan_in(plan); /* the op's io check refused a partial overlap */

    agmm_all_reduce_args a = {0};
    a.in = plan->in->d_peer;
    a.in_offset = plan->in_offset;
    a.res = NULL;
    a.pad = im->pad->d_peer;
    a.out = io->out;
    a.scratch = im->scratch;
    a.n = plan->desc.ar.n;
    a.rank = ri->rank;
    a.nranks = ri->nranks;
    a.grid = im->grid;
    /* In place, sums may overwrite our input only after the closing barrier: hold them in
     * registers when they fit, else stage them (kernels/all_reduce.cu). */
    if (!in_place)
        a.stage = AGMM_AR_STAGE_NONE;
    else if (im->scratch == NULL)
        a.stage = AGMM_AR_STAGE_REGS;
    else
        a.stage = AGMM_AR_STAGE_SCRATCH;
    a.err = g->err_dev;
    a.timeout_ns = g->timeout_ns; /* the world's, never 0 (world_common.c) */
    cudaError_t ce = agmm_all_reduce_one_shot_launch(&a, plan->desc.ar.dtype, (cudaStream_t)stream);
    if (ce != cudaSuccess)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_CUDA, "one_shot launch (grid %d, n=%lld): %s", im->grid,
                         (long long)plan->desc.ar.n, cudaGetErrorString(ce));
    return agmm_gpu_note_run(ctx, (cudaStream_t)stream);
}

/* The pad (grid <= SMs) and, at most, the in-place staging of the whole message. */
static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    int64_t nvec = (plan->desc.ar.n + agmm_ar_vec_elems(plan->desc.ar.dtype) - 1) /
                   agmm_ar_vec_elems(plan->desc.ar.dtype);
    need->symmetric_bytes += (uint64_t)agmm_ctx_gpu(plan->ctx)->num_sms * (uint64_t)ri->nranks * sizeof(uint32_t);
    need->staging_bytes += (uint64_t)nvec * AGMM_AR_VEC_BYTES;
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

const agmm_backend agmm_backend_all_reduce_one_shot = {
    .name = "one_shot",
    .op = AGMM_OP_ALL_REDUCE,
    .summary = "every rank loads all peers' inputs and sums them: one pass, two barriers (small messages)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 0,
    .cpu = &one_shot_cpu_impl,
    .gpu = ONE_SHOT_GPU,
};
