/* all_reduce_rmsnorm `two_shot`: rows are shared out, rank q owning [lo(q), lo(q+1)), lo(q) =
 * q*T/W (T need not divide by W; with T < W some ranks own none). Reduce-scatter by loads: every
 * rank sums its own rows from all W inputs and runs the epilogue on them, into its outputs and its
 * symmetric result buffer (y rows, then r' rows). A barrier. All-gather by loads: every rank pulls
 * the other ranks' finished y and r' rows. Each rank reads about (1 + 2(W-1)/W) times the
 * message, where one_shot reads W times it: large T.
 *
 * GPU: kernels/all_reduce_rmsnorm.cu has the kernel and why it needs no closing barrier. The plan
 * owns a symmetric signal pad (grid x W uint32 per rank, epoch-valued flags, never reset) and the
 * symmetric result buffer (2 x T x H bf16); at W = 1 neither (the kernel is the epilogue alone).
 *
 * CPU world, the same protocol:
 *   barrier 1       every rank's input is written; and every rank has finished the previous run's
 *                   all-gather (it reaches this barrier only from a new run), so nobody still
 *                   reads my result buffer
 *   reduce-scatter  my rows: sum, epilogue, into my outputs and my result buffer
 *   barrier 2       every rank's rows are in its result buffer, and nobody reads any input any
 *                   more
 *   all-gather      every other rank's rows from its result buffer into my outputs, starting with
 *                   rank r+1's so that ranks spread their reads
 *   No closing barrier: my result buffer is next written after the next run's barrier 1. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce_rmsnorm_cpu.h"

#define WHAT "all_reduce_rmsnorm/two_shot"

/* Rank q's first row. */
static int64_t row_lo(int64_t tokens, int q, int nranks) { return (int64_t)q * tokens / nranks; }

typedef struct {
    agmm_symm_buf *res;  /* y rows, then r' rows (2 x T x H bf16); rank q writes rows lo(q)..lo(q+1) */
    float *acc;          /* one row of fp32 scratch */
} two_shot_cpu;

static void cpu_destroy(agmm_plan *plan)
{
    two_shot_cpu *s = plan->state;
    if (s) {
        agmm_symm_free(plan->ctx, s->res);
        free(s->acc);
        free(s);
    }
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    two_shot_cpu *s = calloc(1, sizeof *s);
    plan->state = s;
    if (s)
        s->acc = malloc((size_t)d->hidden * sizeof *s->acc);
    if (s == NULL || s->acc == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY, WHAT " plan allocation failed");
    return agmm_symm_alloc(plan->ctx, 2 * (size_t)(d->tokens * d->hidden) * 2, &s->res);
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->symmetric_bytes += 2 * (uint64_t)(plan->desc.arn.tokens * plan->desc.arn.hidden) * 2;
    need->workspace_bytes += (uint64_t)plan->desc.arn.hidden * sizeof(float);
}

static agmm_status cpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    const agmm_all_reduce_rmsnorm_io *io = vio;
    const int64_t t_all = plan->desc.arn.tokens, h = plan->desc.arn.hidden;
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    const int nranks = ri->nranks, rank = ri->rank;
    two_shot_cpu *s = plan->state;
    uint16_t *res_y = s->res->local, *res_r = res_y + t_all * h;

    agmm_status st = agmm_symm_barrier_host(plan->ctx, WHAT " opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    void *in[AGMM_MAX_RANKS];
    for (int r = 0; r < nranks; r++)
        in[r] = agmm_plan_in_peer(plan, r);
    const int64_t lo = row_lo(t_all, rank, nranks), hi = row_lo(t_all, rank + 1, nranks);
    agmm_arn_cpu_rows(plan, io, in, nranks, lo, hi, s->acc, res_y, res_r);
    const size_t mine = (size_t)((hi - lo) * h) * 2;
    memcpy((uint16_t *)io->y + lo * h, res_y + lo * h, mine);
    memcpy((uint16_t *)io->residual_out + lo * h, res_r + lo * h, mine);
    st = agmm_symm_barrier_host(plan->ctx, WHAT " reduce-scatter barrier");
    if (st != AGMM_SUCCESS)
        return st;
    for (int j = 1; j < nranks; j++) {
        const int q = (rank + j) % nranks;
        const int64_t q_lo = row_lo(t_all, q, nranks), q_hi = row_lo(t_all, q + 1, nranks);
        const uint16_t *peer_y = s->res->peer[q], *peer_r = peer_y + t_all * h;
        const size_t bytes = (size_t)((q_hi - q_lo) * h) * 2;
        memcpy((uint16_t *)io->y + q_lo * h, peer_y + q_lo * h, bytes);
        memcpy((uint16_t *)io->residual_out + q_lo * h, peer_r + q_lo * h, bytes);
    }
    return AGMM_SUCCESS;
}

static const agmm_backend_impl two_shot_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
    .mem_need = cpu_mem_need,
};

#ifdef AGMM_HAVE_CUDA
#include "../kernels/all_reduce_rmsnorm.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_symm_buf *pad;  /* signal pad: grid * nranks flags per rank */
    agmm_symm_buf *res;  /* y rows, then r' rows: rank q's rows live in rank q's buffer */
    int grid;            /* blocks per rank, equal on every rank */
} two_shot_gpu;

static void gpu_destroy(agmm_plan *plan)
{
    two_shot_gpu *im = plan->state;
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
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    two_shot_gpu *im = calloc(1, sizeof *im);
    if (im == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, WHAT " plan allocation failed");
    plan->state = im;
    cudaError_t ce = cudaSetDevice(ri->device);
    if (ce != cudaSuccess)
        return AGMM_FAIL(err, AGMM_ERR_CUDA, "cudaSetDevice(%d): %s", ri->device, cudaGetErrorString(ce));
    /* W = 1: no peer, so no barrier, pad or result buffer (kernels/all_reduce_rmsnorm.cu): the
     * norm kernel's grid. */
    if (ri->nranks == 1) {
        im->grid = agmm_arn_norm_grid(d->tokens, agmm_ctx_gpu(ctx)->num_sms);
        return AGMM_SUCCESS;
    }
    int max_blocks = 1;
    agmm_status st = agmm_gpu_agreed_sm_share(ctx, &max_blocks);
    if (st != AGMM_SUCCESS)
        return st;
    /* A block per row of the largest share (ceil(T/W) rows) until the SM share is used up. */
    const int64_t rows = (d->tokens + ri->nranks - 1) / ri->nranks;
    im->grid = rows < max_blocks ? (int)rows : max_blocks;
    st = agmm_symm_alloc(ctx, (size_t)im->grid * (size_t)ri->nranks * sizeof(uint32_t), &im->pad);
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(ctx, 2 * (size_t)(d->tokens * d->hidden) * 2, &im->res);
    return st;
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    const agmm_all_reduce_rmsnorm_io *io = vio;
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    agmm_ctx *ctx = plan->ctx;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    two_shot_gpu *im = plan->state;
    agmm_arn_args a = {0};
    a.in = plan->in->d_peer;
    a.in_offset = plan->in_offset;
    a.res = im->res ? im->res->d_peer : NULL;
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
    cudaError_t ce = agmm_arn_two_shot_launch(&a, (cudaStream_t)stream);
    if (ce != cudaSuccess)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_CUDA, WHAT " launch (grid %d, T=%lld H=%lld): %s", im->grid,
                         (long long)d->tokens, (long long)d->hidden, cudaGetErrorString(ce));
    return agmm_gpu_note_run(ctx, (cudaStream_t)stream);
}

/* The pad (grid <= SMs) and the result buffer; neither at W = 1. */
static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const int nranks = agmm_ctx_info(plan->ctx)->nranks;
    if (nranks > 1)
        need->symmetric_bytes += (uint64_t)agmm_ctx_gpu(plan->ctx)->num_sms * (uint64_t)nranks * sizeof(uint32_t) +
                                 2 * (uint64_t)(plan->desc.arn.tokens * plan->desc.arn.hidden) * 2;
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

const agmm_backend agmm_backend_all_reduce_rmsnorm_two_shot = {
    .name = "two_shot",
    .op = AGMM_OP_ALL_REDUCE_RMSNORM,
    .summary = "each rank sums and normalises its own rows (reduce-scatter by loads), then all-gathers the "
               "finished y and r' rows by loads (large T)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 1,
    .cpu = &two_shot_cpu_impl,
    .gpu = TWO_SHOT_GPU,
};
