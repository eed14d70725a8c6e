/* all_reduce `two_shot`: reduce-scatter by loads (rank r sums its 1/W slice from all W inputs
 * into its symmetric result buffer), a barrier, then all-gather by loads (every rank pulls the
 * other slices from their owners' result buffers). Each rank moves 2(W-1)/W of the message, which
 * is what large messages need.
 *
 * GPU: kernels/all_reduce.cu has the kernel and why it needs no closing barrier. The plan owns a
 * symmetric signal pad (grid * W uint32 per rank, epoch-valued flags, never reset) and a
 * symmetric result buffer of the message's size rounded up to 16-byte vectors.
 *
 * CPU world:
 *   barrier 1       every rank's input is written
 *   reduce-scatter  rank r sums slice r (elements [r*n/W, (r+1)*n/W), empty when n < W) of all
 *                   inputs into the same slice of its symmetric scratch
 *   barrier 2       every slice is reduced, and nobody reads any input any more (so writing the
 *                   output over my input is safe from here, in place or not)
 *   all-gather      every rank copies slice s from rank s's scratch into its output
 *   No closing barrier: my scratch is next written in the next run's reduce-scatter, after that
 *   run's barrier 1, which no rank passes before every rank has finished this all-gather. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce_cpu.h"
#include "../core/validate.h"

static void cpu_destroy(agmm_plan *plan)
{
    agmm_symm_free(plan->ctx, plan->state);
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    const agmm_all_reduce_desc *d = &plan->desc.ar;
    agmm_symm_buf *scratch = NULL;
    agmm_status st = agmm_symm_alloc(plan->ctx, (size_t)d->n * agmm_dtype_bytes(d->dtype), &scratch);
    plan->state = scratch;
    return st;
}

static agmm_status cpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    const agmm_all_reduce_io *io = vio;
    const agmm_all_reduce_desc *d = &plan->desc.ar;
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    agmm_symm_buf *scratch = plan->state;
    int nranks = ri->nranks, rank = ri->rank;
    int64_t n = d->n;
    size_t es = agmm_dtype_bytes(d->dtype);

    agmm_status st = agmm_symm_barrier_host(plan->ctx, "all_reduce/two_shot opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    int64_t lo = (int64_t)rank * n / nranks, hi = (int64_t)(rank + 1) * n / nranks;
    void *in[AGMM_MAX_RANKS];
    for (int r = 0; r < nranks; r++)
        in[r] = agmm_plan_in_peer(plan, r);
    agmm_ar_cpu_sum(in, nranks, d->dtype, lo, hi, (char *)scratch->local + (size_t)lo * es);
    st = agmm_symm_barrier_host(plan->ctx, "all_reduce/two_shot reduce-scatter barrier");
    if (st != AGMM_SUCCESS)
        return st;
    /* All-gather, starting with my own slice and going round: ranks pull from different peers. */
    for (int pos = 0; pos < nranks; pos++) {
        int src = (rank + pos) % nranks;
        int64_t s_lo = (int64_t)src * n / nranks, s_hi = (int64_t)(src + 1) * n / nranks;
        if (s_hi > s_lo)
            memcpy((char *)io->out + (size_t)s_lo * es, (const char *)scratch->peer[src] + (size_t)s_lo * es,
                   (size_t)(s_hi - s_lo) * es);
    }
    return AGMM_SUCCESS;
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->symmetric_bytes += (uint64_t)plan->desc.ar.n * agmm_dtype_bytes(plan->desc.ar.dtype);
}

static const agmm_backend_impl two_shot_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
    .mem_need = cpu_mem_need,
};

#ifdef AGMM_HAVE_CUDA
#include "../kernels/all_reduce.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_symm_buf *pad;  /* signal pad: grid * nranks flags per rank */
    agmm_symm_buf *res;  /* reduced slices: rank r's slice lives in rank r's buffer */
    int grid;            /* blocks per rank, equal on every rank */
} two_shot_impl;

static void gpu_destroy(agmm_plan *plan)
{
    two_shot_impl *im = plan->state;
    if (im == NULL)
        return;
    agmm_symm_free(plan->ctx, im->res);
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
    two_shot_impl *im = calloc(1, sizeof *im);
    if (im == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "two_shot plan allocation failed");
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
    /* One vector of the rank's slice per thread until the SM share is used up, then a
     * grid-stride loop. */
    const int vec = agmm_ar_vec_elems(plan->desc.ar.dtype);
    const int64_t nvec = (plan->desc.ar.n + vec - 1) / vec;
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
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "symmetric result buffer %p is not 16-byte aligned",
                         im->res->local);
    return AGMM_SUCCESS;
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    const agmm_all_reduce_io *io = vio;
    agmm_ctx *ctx = plan->ctx;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    two_shot_impl *im = plan->state;

    /* In place needs nothing special here: see the kernel's step 2 and 4. */
    agmm_all_reduce_args a = {0};
    a.in = plan->in->d_peer;
    a.in_offset = plan->in_offset;
    a.res = im->res->d_peer;
    a.pad = im->pad->d_peer;
    a.out = io->out;
    a.scratch = NULL;
    a.n = plan->desc.ar.n;
    a.rank = ri->rank;
    a.nranks = ri->nranks;
    a.grid = im->grid;
    a.stage = AGMM_AR_STAGE_NONE;
    a.err = g->err_dev;
    a.timeout_ns = g->timeout_ns; /* the world's, never 0 (world_common.c) */
    cudaError_t ce = agmm_all_reduce_two_shot_launch(&a, plan->desc.ar.dtype, (cudaStream_t)stream);
    if (ce != cudaSuccess)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_CUDA, "two_shot launch (grid %d, n=%lld): %s", im->grid,
                         (long long)plan->desc.ar.n, cudaGetErrorString(ce));
    return agmm_gpu_note_run(ctx, (cudaStream_t)stream);
}

/* The pad (grid <= SMs) and the reduced slices (the message, in 16-byte vectors). */
static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    int64_t nvec = (plan->desc.ar.n + agmm_ar_vec_elems(plan->desc.ar.dtype) - 1) /
                   agmm_ar_vec_elems(plan->desc.ar.dtype);
    need->symmetric_bytes += (uint64_t)agmm_ctx_gpu(plan->ctx)->num_sms * (uint64_t)ri->nranks * sizeof(uint32_t) +
                             (uint64_t)nvec * AGMM_AR_VEC_BYTES;
}

static const agmm_backend_impl two_shot_gpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define TWO_SHOT_GPU (&two_shot_gpu_impl)
#else
#define TWO_SHOT_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_all_reduce_two_shot = {
    .name = "two_shot",
    .op = AGMM_OP_ALL_REDUCE,
    .summary = "reduce-scatter by loads, then all-gather by loads: 2(W-1)/W of the message per rank (large messages)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 1,
    .cpu = &two_shot_cpu_impl,
    .gpu = TWO_SHOT_GPU,
};
