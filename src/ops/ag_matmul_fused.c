/* ag_matmul `fused`: the copy engine fills the gathered A chunk by chunk, raising one epoch flag
 * per chunk, while one persistent GEMM (src/kernels/gemm_engine.cu) walks its tiles in the
 * schedule's order (local rows first, then rank+1's, ...) and waits once per tile on that tile's
 * chunk flag. Tiles of the local shard read A straight from the shard, with no wait and no copy
 * first (kraken's trick, for any M).
 *
 * Per run, on the caller's stream S and the context's high-priority copy stream C:
 *   S: record ev_in (the caller's writes of the shard and B are before it)
 *   C: wait ev_in; entry barrier (every rank's shard is written)                 [W > 1]
 *   S: the GEMM: local tiles at once; a peer tile waits (acquire, bounded) until
 *      flags[chunk] >= epoch, then its A is read from the gathered buffer
 *   C: for src = rank+1, rank+2, ...: for each chunk of src: copy the peer's rows into the
 *      gathered A, then flags[chunk] = epoch (a stream write whose default memory barrier orders
 *      the copied bytes before the flag; the GEMM's acquire load pairs with it)
 *   C: the local shard into its rows of the gathered A (nobody waits for it)
 *   C: closing barrier (no rank overwrites its shard while a peer may still read it)  [W > 1]
 *   C: record ev_done; S: wait ev_done (the caller's stream is after all of it)
 *
 * Flags: nranks*splits uint32 in this rank's device memory, written only by its copy stream,
 * read only by its GEMM; zeroed once at plan time and never reset (epochs, design.md §4).
 *
 * SMs: the barrier and flag kernels need an SM while the persistent GEMM holds the others. The
 * entry barrier is enqueued first, on a high-priority stream; with several ranks the GEMM
 * leaves one SM free, and where ranks share a GPU it takes at most SMs/ranks - 1, so every
 * rank's signalling kernels find room (design.md §3, emulated worlds). */
#ifdef AGMM_HAVE_CUDA
#include <stdlib.h>

#include "ag_matmul_fused.h"
#include "backend.h"
#include "gemm_lt.h"
#include "../core/schedule.h"
#include "../kernels/delay.h"
#include "../kernels/gemm_engine.h"
#include "../kernels/signal.h"
#include "../world/ctx_gpu.h"
#include "../world/gpu_check.h"

typedef struct {
    agmm_gemm_plan *gemm;
    uint32_t *flags;             /* nranks * splits chunk flags (device memory) */
    cudaEvent_t ev_in, ev_done;
    int delay_chunk;             /* test hook: chunk whose copy starts delay_ns late, -1: none */
    uint64_t delay_ns;
} fused_plan;

extern const agmm_backend_ops agmm_gpu_ag_matmul_fused_ops;

static void destroy(agmm_plan *p)
{
    fused_plan *x = p->impl;
    /* Collective: no rank frees while a peer's run may still read its shard (plan.c frees the
     * shard after this). */
    agmm_world_barrier(p->ctx);
    agmm_gemm_plan_destroy(x->gemm);
    cudaFree(x->flags);
    if (x->ev_in)
        cudaEventDestroy(x->ev_in);
    if (x->ev_done)
        cudaEventDestroy(x->ev_done);
    cudaGetLastError();
    free(x);
    p->impl = NULL;
}

/* The GEMM's SM budget (see the header comment). */
static int gemm_ctas(const agmm_ctx *ctx)
{
    const struct agmm_ctx_gpu *g = ctx->gpu;
    if (g->ranks_on_device > 1) {
        int share = g->num_sms / g->ranks_on_device - 1;
        return share > 0 ? share : 1;
    }
    return ctx->world->nranks > 1 ? g->num_sms - 1 : 0;
}

static agmm_status create(agmm_plan *p)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    int nranks = ctx->world->nranks;
    fused_plan *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", ctx->rank);
    p->impl = x;
    x->delay_chunk = -1;
    size_t flag_bytes = (size_t)nranks * (size_t)p->mm.splits * sizeof(uint32_t);
    AGMM_CUDA_TRY(st, &ctx->err, cudaMalloc((void **)&x->flags, flag_bytes));
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemset(x->flags, 0, flag_bytes));
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventCreateWithFlags(&x->ev_in, cudaEventDisableTiming));
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventCreateWithFlags(&x->ev_done, cudaEventDisableTiming));

    /* Operand pointers come with each run (set_ptrs re-encodes only what changed). */
    agmm_gemm_desc d = {
        .a_local = p->input->local,
        .b_layout = p->mm.b_layout,
        .m = p->mm.m,
        .n = p->mm.n,
        .k = p->mm.k,
        .nranks = nranks,
        .rank = ctx->rank,
        .splits = p->mm.splits,
        .chunk_flags = nranks > 1 ? x->flags : NULL,
        .dev_error = ctx->gpu->err_dev,
        .timeout_ns = ctx->gpu->timeout_ns,
        .max_ctas = gemm_ctas(ctx),
        .config = -1,
    };
    char why[256] = "";
    st = agmm_gemm_plan_create(&x->gemm, &d, why, sizeof why);
    if (st != AGMM_SUCCESS) {
        AGMM_FAIL(&ctx->err, st, "rank %d: GEMM engine plan: %s", ctx->rank, why);
        goto fail;
    }
    /* Everyone leaves plan time together: a rank's first barrier must not meet a peer still in
     * cudaMalloc, which may synchronise a shared device. */
    AGMM_TRY(st, agmm_world_barrier(ctx));
fail:
    return st;
}

static agmm_status run(agmm_plan *p, const agmm_io *io, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    fused_plan *x = p->impl;
    cudaStream_t s = (cudaStream_t)stream, c = ctx->gpu->copy_stream;
    int nranks = ctx->world->nranks, rank = ctx->rank;
    int64_t m = p->mm.m;
    const size_t a_row = (size_t)p->mm.k * 2;
    char *ag = io->a_gathered;
    char *const *shard = (char *const *)p->input->peer;
    char why[256] = "";
    st = agmm_gemm_plan_set_ptrs(x->gemm, io->a_gathered, NULL, io->b, io->c, why, sizeof why);
    if (st != AGMM_SUCCESS) {
        AGMM_FAIL(&ctx->err, st, "rank %d: GEMM engine operands: %s", rank, why);
        goto fail;
    }

    AGMM_CUDA_TRY(st, &ctx->err, cudaEventRecord(x->ev_in, s));
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamWaitEvent(c, x->ev_in, 0));
    AGMM_TRY(st, agmm_ctx_gpu_barrier(ctx, c));
    st = agmm_gemm_run(x->gemm, p->epoch, s);
    if (st != AGMM_SUCCESS) {
        AGMM_FAIL(&ctx->err, st, "rank %d: GEMM engine launch failed: %s", rank, cudaGetErrorString(cudaGetLastError()));
        goto fail;
    }
    agmm_sched sch = {.m = m, .n = p->mm.n, .nranks = nranks, .rank = rank, .splits = p->mm.splits};
    for (int step = 1; step < nranks; step++) {
        int src = (rank + step) % nranks;
        for (int sp = 0; sp < p->mm.splits; sp++) {
            int chunk = src * p->mm.splits + sp;
            int64_t r0, rows;
            agmm_sched_chunk_rows(&sch, sp, &r0, &rows);
            if (chunk == x->delay_chunk)
                AGMM_CUDA_TRY(st, &ctx->err, agmm_launch_delay(x->delay_ns, c));
            AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(ag + (size_t)(src * m + r0) * a_row, shard[src] + (size_t)r0 * a_row,
                                                         (size_t)rows * a_row, cudaMemcpyDefault, c));
            /* The flag goes up only after the copy completes; the write's default memory barrier
             * (or the kernel's release fence) makes the copied rows visible first. */
            if (ctx->gpu->write_value32) {
                if (ctx->gpu->write_value32(c, (uintptr_t)(x->flags + chunk), p->epoch, 0) != 0) {
                    st = AGMM_FAIL(&ctx->err, AGMM_ERR_CUDA, "rank %d: cuStreamWriteValue32 of chunk %d's flag failed",
                                   rank, chunk);
                    goto fail;
                }
            } else {
                AGMM_CUDA_TRY(st, &ctx->err, agmm_launch_flag_raise(x->flags + chunk, p->epoch, c));
            }
        }
    }
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(ag + (size_t)(rank * m) * a_row, p->input->local, (size_t)m * a_row,
                                                 cudaMemcpyDefault, c));
    AGMM_TRY(st, agmm_ctx_gpu_barrier(ctx, c));
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventRecord(x->ev_done, c));
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamWaitEvent(s, x->ev_done, 0));
    AGMM_TRY(st, agmm_ctx_gpu_note_run(ctx, s));
fail:
    return st;
}

agmm_status agmm_gpu_fused_set_copy_delay(agmm_plan *p, int chunk, uint64_t delay_ns)
{
    if (p == NULL || p->ops != &agmm_gpu_ag_matmul_fused_ops)
        return AGMM_ERR_INVALID_ARG;
    if (chunk < -1 || chunk >= p->ctx->world->nranks * p->mm.splits)
        return AGMM_FAIL(&p->ctx->err, AGMM_ERR_INVALID_ARG, "chunk=%d: must be -1 (none) or 0..%d", chunk,
                         p->ctx->world->nranks * p->mm.splits - 1);
    fused_plan *x = p->impl;
    x->delay_chunk = chunk;
    x->delay_ns = delay_ns;
    return AGMM_SUCCESS;
}

const char *agmm_gpu_fused_describe(const agmm_plan *p)
{
    if (p == NULL || p->ops != &agmm_gpu_ag_matmul_fused_ops)
        return "";
    return agmm_gemm_plan_describe(((const fused_plan *)p->impl)->gemm);
}

const agmm_backend_ops agmm_gpu_ag_matmul_fused_ops = {
    .id = AGMM_BACKEND_FUSED,
    .op = AGMM_OP_AG_MATMUL,
    .cpu = 0,
    .nccl = 0,
    .create = create,
    .run = run,
    .destroy = destroy,
};
#endif /* AGMM_HAVE_CUDA */
