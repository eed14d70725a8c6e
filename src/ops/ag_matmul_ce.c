/* ag_matmul `ce`: the copy-engine decomposition (PyTorch's, kraken_symm_mem.md §2.2, without its
 * host overhead). Per run, on the caller's stream S and the context's high-priority copy stream C:
 *
 *   S: record ev_in (the caller's writes of the shard are before it)
 *   C: wait ev_in; entry barrier (every rank's shard is written)           [W > 1]
 *   S: GEMM of the local rows straight from the shard: no wait, no copy first
 *   for step 1..W-1, src = (rank + step) % W, for each of its `splits` chunks:
 *      C: cudaMemcpyAsync peer shard chunk -> its rows of the gathered A; record ev_chunk
 *      S: wait ev_chunk; GEMM of those rows
 *   C: the local shard -> its rows of the gathered A (overlaps the last GEMMs)
 *   C: closing barrier (every rank has finished reading the others' shards)  [W > 1]
 *   C: record ev_done;  S: wait ev_done   (the caller's stream is after all of it)
 *
 * Chunk readiness is a local matter (my copy stream to my compute stream), so it is an event, not
 * a flag: nothing there waits for a peer, nothing needs a bound. One event serves every chunk:
 * cudaStreamWaitEvent binds to the record made just before it, so the next record cannot
 * disturb an earlier wait. Cross-rank waits are only the two barriers, bounded kernels on the
 * copy stream: the entry one is enqueued before the local GEMM so it finds an SM first, and the
 * closing one runs while S still computes. At W = 1 there are no barriers: the run is the GEMM
 * and, beside it, one device-to-device copy of the shard.
 *
 * Plan time: the GEMMs' descriptors and algorithms (one for the shard, one or two chunk heights),
 * a workspace, three events; where ranks share a GPU, each GEMM is also run once so its kernel is
 * loaded before any run can spin in a barrier (warm_gemms). */
#ifdef AGMM_HAVE_CUDA
#include <stdlib.h>

#include "backend.h"
#include "gemm_lt.h"
#include "../core/schedule.h"
#include "../world/ctx_gpu.h"
#include "../world/gpu_check.h"

typedef struct {
    agmm_gemm_lt *local;        /* rows = m: the shard itself */
    agmm_gemm_lt *chunk[2];     /* rows = floor(m/S) and floor(m/S) + 1: peers' chunks */
    int64_t chunk_rows[2];
    void *workspace;            /* every GEMM runs on S, one after another: one workspace */
    cudaEvent_t ev_in, ev_chunk, ev_done;
} ce_plan;

static void destroy(agmm_plan *p)
{
    ce_plan *x = p->impl;
    /* Collective: no rank frees while a peer's run may still use it (peers only read the shard,
     * which plan.c frees after this with its own meeting; this one covers cudaFree's device sync). */
    agmm_world_barrier(p->ctx);
    agmm_gemm_lt_destroy(x->local);
    agmm_gemm_lt_destroy(x->chunk[0]);
    agmm_gemm_lt_destroy(x->chunk[1]);
    cudaFree(x->workspace);
    if (x->ev_in)
        cudaEventDestroy(x->ev_in);
    if (x->ev_chunk)
        cudaEventDestroy(x->ev_chunk);
    if (x->ev_done)
        cudaEventDestroy(x->ev_done);
    cudaGetLastError();
    free(x);
    p->impl = NULL;
}

static agmm_sched sched_of(const agmm_plan *p)
{
    agmm_sched s = {0};
    s.m = p->mm.m;
    s.n = p->mm.n;
    s.nranks = p->ctx->world->nranks;
    s.rank = p->ctx->rank;
    s.splits = p->mm.splits;
    return s;
}

/* Where ranks share a device, each GEMM's kernel is loaded now (lazy loading may synchronise the
 * context, which a peer's barrier spinning in a run would turn into a timeout). Scratch B and C,
 * zeroed; A is the shard. All ranks are inside this collective call, so nothing of theirs waits. */
static agmm_status warm_gemms(agmm_plan *p, ce_plan *x)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    cudaStream_t s = ctx->gpu->copy_stream;
    size_t b_elems = (size_t)(p->mm.k * p->mm.n), c_elems = (size_t)(p->mm.m * p->mm.n);
    char *scratch = NULL;
    AGMM_CUDA_TRY(st, &ctx->err, cudaMalloc((void **)&scratch, (b_elems + c_elems) * 2 + 16));
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemsetAsync(scratch, 0, (b_elems + c_elems) * 2 + 16, s));
    /* B at offset 0, C 16-byte aligned after it. */
    char *c = scratch + (b_elems * 2 + 15) / 16 * 16;
    const agmm_gemm_lt *all[3] = {x->local, x->chunk[0], x->chunk[1]};
    for (int i = 0; i < 3; i++)
        if (all[i])
            AGMM_TRY(st, agmm_gemm_lt_warm(all[i], p->input->local, scratch, c, x->workspace, s, &ctx->err));
fail:
    cudaFree(scratch);
    return st;
}

static agmm_status create(agmm_plan *p)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    int nranks = ctx->world->nranks;
    int64_t m = p->mm.m, n = p->mm.n, k = p->mm.k;
    ce_plan *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", ctx->rank);
    p->impl = x;

    /* Alignment of the C rows each GEMM writes (A rows are 16-byte aligned: k % 8 == 0). */
    unsigned align_local = agmm_gemm_lt_align((uint64_t)(ctx->rank * m * n * 2));
    unsigned align_chunk = 16;
    agmm_sched s = sched_of(p);
    for (int src = 0; src < nranks; src++) {
        for (int sp = 0; sp < p->mm.splits; sp++) {
            int64_t r0, rows;
            agmm_sched_chunk_rows(&s, sp, &r0, &rows);
            unsigned a = agmm_gemm_lt_align((uint64_t)((src * m + r0) * n * 2));
            if (a < align_chunk)
                align_chunk = a;
        }
    }
    AGMM_TRY(st, agmm_gemm_lt_create(&x->local, ctx->gpu->lt, m, n, k, p->mm.b_layout, align_local,
                                     AGMM_GEMM_LT_WORKSPACE_BYTES, &ctx->err));
    if (nranks > 1) {
        x->chunk_rows[0] = m / p->mm.splits;
        x->chunk_rows[1] = x->chunk_rows[0] + 1;
        for (int i = 0; i < 2; i++)
            if (x->chunk_rows[i] >= 1 && (i == 0 || m % p->mm.splits != 0))
                AGMM_TRY(st, agmm_gemm_lt_create(&x->chunk[i], ctx->gpu->lt, x->chunk_rows[i], n, k, p->mm.b_layout,
                                                 align_chunk, AGMM_GEMM_LT_WORKSPACE_BYTES, &ctx->err));
    }
    AGMM_CUDA_TRY(st, &ctx->err, cudaMalloc(&x->workspace, AGMM_GEMM_LT_WORKSPACE_BYTES));
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventCreateWithFlags(&x->ev_in, cudaEventDisableTiming));
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventCreateWithFlags(&x->ev_chunk, cudaEventDisableTiming));
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventCreateWithFlags(&x->ev_done, cudaEventDisableTiming));
    if (ctx->gpu->ranks_on_device > 1 && nranks > 1)
        AGMM_TRY(st, warm_gemms(p, x));
    /* Where ranks share a device, a rank's first barrier must not meet a peer still inside
     * cudaMalloc (which may synchronise the device): everyone leaves plan time together. */
    AGMM_TRY(st, agmm_world_barrier(ctx));
fail:
    return st;
}

static const agmm_gemm_lt *chunk_gemm(const ce_plan *x, int64_t rows)
{
    return rows == x->chunk_rows[0] ? x->chunk[0] : x->chunk[1];
}

static agmm_status run(agmm_plan *p, const agmm_io *io, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    ce_plan *x = p->impl;
    cudaStream_t s = (cudaStream_t)stream, c = ctx->gpu->copy_stream;
    int nranks = ctx->world->nranks, rank = ctx->rank;
    int64_t m = p->mm.m, n = p->mm.n, k = p->mm.k;
    const size_t a_row = (size_t)k * 2, c_row = (size_t)n * 2;
    char *ag = io->a_gathered, *cc = io->c;
    char *const *shard = (char *const *)p->input->peer;

    AGMM_CUDA_TRY(st, &ctx->err, cudaEventRecord(x->ev_in, s));
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamWaitEvent(c, x->ev_in, 0));
    AGMM_TRY(st, agmm_ctx_gpu_barrier(ctx, c));
    AGMM_TRY(st, agmm_gemm_lt_run(x->local, p->input->local, io->b, cc + (size_t)(rank * m) * c_row, x->workspace, s,
                                  &ctx->err));
    agmm_sched sch = sched_of(p);
    for (int step = 1; step < nranks; step++) {
        int src = (rank + step) % nranks;
        for (int sp = 0; sp < p->mm.splits; sp++) {
            int64_t r0, rows;
            agmm_sched_chunk_rows(&sch, sp, &r0, &rows);
            size_t row = (size_t)(src * m + r0);
            AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(ag + row * a_row, shard[src] + (size_t)r0 * a_row,
                                                         (size_t)rows * a_row, cudaMemcpyDeviceToDevice, c));
            AGMM_CUDA_TRY(st, &ctx->err, cudaEventRecord(x->ev_chunk, c));
            AGMM_CUDA_TRY(st, &ctx->err, cudaStreamWaitEvent(s, x->ev_chunk, 0));
            AGMM_TRY(st, agmm_gemm_lt_run(chunk_gemm(x, rows), ag + row * a_row, io->b, cc + row * c_row,
                                          x->workspace, s, &ctx->err));
        }
    }
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(ag + (size_t)(rank * m) * a_row, p->input->local, (size_t)m * a_row,
                                                 cudaMemcpyDeviceToDevice, c));
    AGMM_TRY(st, agmm_ctx_gpu_barrier(ctx, c));
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventRecord(x->ev_done, c));
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamWaitEvent(s, x->ev_done, 0));
    AGMM_TRY(st, agmm_ctx_gpu_note_run(ctx, s));
fail:
    return st;
}

const agmm_backend_ops agmm_gpu_ag_matmul_ce_ops = {
    .id = AGMM_BACKEND_CE,
    .op = AGMM_OP_AG_MATMUL,
    .cpu = 0,
    .nccl = 0,
    .create = create,
    .run = run,
    .destroy = destroy,
};
#endif /* AGMM_HAVE_CUDA */
