/* All-gather matmul, copy-engine decomposition (backend `ce`): the copy thread brings the peers'
 * shards chunk by chunk while the rank thread multiplies whatever has landed; the local shard's
 * GEMM needs no copy at all. The algorithm of torch symmetric memory's all-gather matmul, and of
 * the GPU `ce` backend with one GEMM per chunk.
 *
 * Protocol of one run (W ranks, S = splits chunks per rank, epoch e of the plan):
 *   barrier 1    every shard is written
 *   copy thread  chunks of ranks rank+1, rank+2, ... (rotated, the order the GEMMs want them)
 *                into their rows of A, raising flag[chunk] to e after each (release); then the
 *                local shard into its rows of A
 *   rank thread  GEMM of the S local chunks straight from the shard, at once; then for each
 *                peer chunk in the same rotated order: wait (acquire, bounded) for flag[chunk]
 *                >= e, GEMM of its rows from A
 *   drain        every copy has landed (A is complete; no copy reads a peer's shard any more)
 *   barrier 2    nobody reads my shard any more: my caller may overwrite it after the run
 * The flags are never reset: a chunk is ready when its flag reaches this run's epoch. */
#include "cpu.h"

#include <stdlib.h>

#include "../core/schedule.h"
#include "../symm/symm.h"

typedef struct {
    agmm_cpu_gemm_ws ws;
    agmm_cpu_copy_engine *ce;
    uint32_t *flags;          /* W*S flags, AGMM_CPU_FLAG_STRIDE apart */
} ce_impl;

static agmm_status ce_create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    int chunks = ctx->world->nranks * plan->mm.splits;
    ce_impl *impl = calloc(1, sizeof *impl);
    if (impl == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", ctx->rank);
    plan->impl = impl;
    size_t flag_bytes = (size_t)chunks * AGMM_CPU_FLAG_STRIDE * sizeof(uint32_t);
    impl->flags = aligned_alloc(64, flag_bytes);
    if (impl->flags == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: %d chunk flags allocation failed", ctx->rank,
                         chunks);
    for (size_t i = 0; i < flag_bytes / sizeof(uint32_t); i++)
        impl->flags[i] = 0;
    agmm_status st = agmm_cpu_gemm_ws_init(&impl->ws, plan->mm.k, &ctx->err);
    if (st != AGMM_SUCCESS)
        return st;
    return agmm_cpu_ce_create(ctx, chunks + 1, &impl->ce);
}

/* GEMM of `rows` rows of A starting at `a` into C rows [c_row0, c_row0 + rows), all columns. */
static void chunk_gemm(agmm_plan *plan, const agmm_io *io, const uint16_t *a, int64_t c_row0, int64_t rows)
{
    ce_impl *impl = plan->impl;
    const agmm_ag_matmul_desc *d = &plan->mm;
    agmm_cpu_gemm_bf16(&impl->ws, a, d->k, rows, io->b, d->b_layout, d->n, 0, d->n,
                       (uint16_t *)io->c + c_row0 * d->n, d->n);
}

static agmm_status ce_run(agmm_plan *plan, const agmm_io *io, void *stream)
{
    ce_impl *impl = plan->impl;
    agmm_ctx *ctx = plan->ctx;
    const agmm_ag_matmul_desc *d = &plan->mm;
    int nranks = ctx->world->nranks, rank = ctx->rank;
    double timeout_s = ctx->world->timeout_s;
    uint16_t *a = io->a_gathered;
    agmm_sched s = {.m = d->m, .splits = d->splits};

    agmm_cpu_gemm_ws_forget_b(&impl->ws); /* B may hold new values since the last run */
    agmm_status st = agmm_cpu_barrier(ctx, "ag_matmul/ce opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    st = agmm_cpu_queue_gather(plan, impl->ce, a, impl->flags, NULL, NULL);

    /* The local chunks: no wait, the shard is this rank's own memory. */
    for (int sp = 0; st == AGMM_SUCCESS && sp < d->splits; sp++) {
        int64_t row0, rows;
        agmm_sched_chunk_rows(&s, sp, &row0, &rows);
        chunk_gemm(plan, io, (const uint16_t *)plan->input->local + row0 * d->k, (int64_t)rank * d->m + row0, rows);
    }
    /* The peers' chunks, each as soon as its own copy has landed. */
    for (int pos = 1; st == AGMM_SUCCESS && pos < nranks; pos++) {
        int src = (rank + pos) % nranks;
        for (int sp = 0; st == AGMM_SUCCESS && sp < d->splits; sp++) {
            int chunk = src * d->splits + sp;
            int64_t row0, rows;
            agmm_sched_chunk_rows(&s, sp, &row0, &rows);
            uint32_t seen = 0;
            if (!agmm_cpu_flag_wait(impl->flags + (size_t)chunk * AGMM_CPU_FLAG_STRIDE, plan->epoch, timeout_s,
                                    &seen)) {
                st = AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                               "rank %d: ag_matmul/ce waited %.2f s for chunk %d (rank %d's rows %lld..%lld) at epoch "
                               "%u: its copy never landed (flag reads %u)",
                               rank, timeout_s, chunk, src, (long long)row0, (long long)(row0 + rows - 1),
                               plan->epoch, seen);
                break;
            }
            int64_t grow0 = (int64_t)src * d->m + row0;
            chunk_gemm(plan, io, a + grow0 * d->k, grow0, rows);
        }
    }
    /* Even after a failure: no copy may still write the caller's A once we return. */
    agmm_status drained = agmm_cpu_ce_drain(impl->ce, timeout_s);
    if (st != AGMM_SUCCESS)
        return st;
    if (drained != AGMM_SUCCESS)
        return drained;
    return agmm_cpu_barrier(ctx, "ag_matmul/ce closing barrier");
}

static void ce_destroy(agmm_plan *plan)
{
    ce_impl *impl = plan->impl;
    agmm_cpu_ce_destroy(impl->ce);
    agmm_cpu_gemm_ws_free(&impl->ws);
    free(impl->flags);
    free(impl);
    plan->impl = NULL;
}

const agmm_backend_ops agmm_cpu_ag_matmul_ce_ops = {
    .id = AGMM_BACKEND_CE,
    .op = AGMM_OP_AG_MATMUL,
    .cpu = 1,
    .nccl = 0,
    .create = ce_create,
    .run = ce_run,
    .destroy = ce_destroy,
};
