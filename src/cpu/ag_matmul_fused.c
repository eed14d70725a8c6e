/* All-gather matmul, fused (backend `fused`): one GEMM walks the output tiles in the order of
 * src/core/schedule.h and waits once per tile for the chunk its rows come from, while the copy
 * thread fills A chunk by chunk. Tiles of the local shard read A straight from the shard, with
 * no wait (kraken's trick). The CPU twin of the GPU's persistent fused kernel: same schedule,
 * same flags, same epochs, so the CPU tests prove the order the GPU runs.
 *
 * Protocol of one run (W ranks, S = splits chunks per rank, epoch e of the plan):
 *   barrier 1    every shard is written
 *   copy role    (the copy thread) chunks of ranks rank+1, rank+2, ... into their rows of A,
 *                raising flag[chunk] to e after each (release); the local shard last, no flag
 *   gemm role    (the rank thread) tile i = agmm_sched_tile(i) for i = 0, 1, ...: local tiles
 *                (the first tiles_per_rank) at once from the shard; any other tile first waits
 *                (acquire, bounded) for flag[tile.chunk] >= e, then reads its rows of A. Each
 *                tile writes only its rows and columns of C.
 *   drain        every copy has landed
 *   barrier 2    nobody reads my shard any more
 * Flags: written by this plan's copy thread only, waited on by this rank's GEMM only, never
 * reset (ready means >= this run's epoch). */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#include "../core/schedule.h"
#include "../symm/symm.h"

/* Tile shape policy, by the rows of the largest chunk: the first entry that covers it. Short
 * chunks get short tiles so the last tile of a chunk wastes little. */
static const struct {
    int64_t max_chunk_rows;
    int bm, bn, group_m;
} tile_table[] = {
    {16, 16, 64, 8},
    {32, 32, 64, 8},
    {INT64_MAX, 64, 64, 8},
};

typedef struct {
    agmm_cpu_gemm_ws ws;
    agmm_cpu_copy_engine *ce;
    agmm_sched sched;
    int chunks;
    uint32_t *flags;              /* chunks flags, AGMM_CPU_FLAG_STRIDE apart */
    int64_t *delay_us;            /* per chunk: test hook, 0 normally */
    int64_t *copy_done_ns;        /* per chunk, written by the copy thread before the flag */
    agmm_cpu_chunk_times *times;  /* per chunk, written by the rank thread */
} fused_impl;

extern const agmm_backend_ops agmm_cpu_ag_matmul_fused_ops;

void agmm_cpu_fused_tile_shape(int64_t m, int64_t n, int splits, int *bm, int *bn, int *group_m)
{
    int64_t chunk_rows = (m + splits - 1) / splits;
    size_t i = 0;
    while (tile_table[i].max_chunk_rows < chunk_rows)
        i++;
    *bm = tile_table[i].bm;
    *bn = tile_table[i].bn;
    *group_m = tile_table[i].group_m;
}

static agmm_status fused_create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    const agmm_ag_matmul_desc *d = &plan->mm;
    fused_impl *impl = calloc(1, sizeof *impl);
    if (impl == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", ctx->rank);
    plan->impl = impl;
    impl->sched = (agmm_sched){.m = d->m, .n = d->n, .nranks = ctx->world->nranks, .rank = ctx->rank,
                               .splits = d->splits};
    agmm_cpu_fused_tile_shape(d->m, d->n, d->splits, &impl->sched.bm, &impl->sched.bn, &impl->sched.group_m);
    agmm_sched_init(&impl->sched);
    impl->chunks = ctx->world->nranks * d->splits;

    size_t flag_words = (size_t)impl->chunks * AGMM_CPU_FLAG_STRIDE;
    impl->flags = aligned_alloc(64, flag_words * sizeof(uint32_t));
    impl->delay_us = calloc((size_t)impl->chunks, sizeof *impl->delay_us);
    impl->copy_done_ns = calloc((size_t)impl->chunks, sizeof *impl->copy_done_ns);
    impl->times = calloc((size_t)impl->chunks, sizeof *impl->times);
    if (impl->flags == NULL || impl->delay_us == NULL || impl->copy_done_ns == NULL || impl->times == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: fused plan state for %d chunks allocation failed",
                         ctx->rank, impl->chunks);
    memset(impl->flags, 0, flag_words * sizeof(uint32_t));
    agmm_status st = agmm_cpu_gemm_ws_init(&impl->ws, d->k, &ctx->err);
    if (st != AGMM_SUCCESS)
        return st;
    return agmm_cpu_ce_create(ctx, impl->chunks + 1, &impl->ce);
}

/* The GEMM role: every tile of the schedule, in its order, each after its chunk's flag. */
static agmm_status gemm_role(agmm_plan *plan, const agmm_io *io)
{
    fused_impl *impl = plan->impl;
    agmm_ctx *ctx = plan->ctx;
    const agmm_ag_matmul_desc *d = &plan->mm;
    const agmm_sched *s = &impl->sched;
    double timeout_s = ctx->world->timeout_s;
    const uint16_t *shard = plan->input->local, *a = io->a_gathered;
    uint16_t *c = io->c;

    int64_t ntiles = agmm_sched_num_tiles(s);
    for (int64_t i = 0; i < ntiles; i++) {
        agmm_tile t;
        agmm_sched_tile(s, i, &t);
        const uint16_t *a_tile;
        if (t.local) {
            a_tile = shard + t.shard_row0 * d->k; /* this rank's own rows: nothing to wait for */
        } else {
            /* Acquire: pairs with the copy thread's release after it wrote these rows of A. */
            uint32_t seen = 0;
            if (!agmm_cpu_flag_wait(impl->flags + (size_t)t.chunk * AGMM_CPU_FLAG_STRIDE, plan->epoch, timeout_s,
                                    &seen))
                return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                                 "rank %d: ag_matmul/fused tile %lld (rows %lld..%lld, cols %lld..%lld) waited %.2f s "
                                 "for chunk %d (rank %d's split %d) at epoch %u: its copy never landed (flag reads %u)",
                                 ctx->rank, (long long)i, (long long)t.row0, (long long)(t.row0 + t.rows - 1),
                                 (long long)t.col0, (long long)(t.col0 + t.cols - 1), timeout_s, t.chunk, t.src_rank,
                                 t.chunk % d->splits, plan->epoch, seen);
            a_tile = a + t.row0 * d->k;
        }
        agmm_cpu_chunk_times *tm = &impl->times[t.chunk];
        int64_t t0 = agmm_cpu_now_ns();
        if (tm->tiles == 0)
            tm->first_tile_ns = t0;
        agmm_cpu_gemm_bf16(&impl->ws, a_tile, d->k, t.rows, io->b, d->b_layout, d->n, t.col0, t.cols,
                           c + t.row0 * d->n + t.col0, d->n);
        tm->last_tile_ns = agmm_cpu_now_ns();
        tm->tiles++;
    }
    return AGMM_SUCCESS;
}

static agmm_status fused_run(agmm_plan *plan, const agmm_io *io, void *stream)
{
    fused_impl *impl = plan->impl;
    agmm_ctx *ctx = plan->ctx;

    int64_t delays_us = 0;
    for (int ch = 0; ch < impl->chunks; ch++) {
        impl->copy_done_ns[ch] = 0;
        impl->times[ch] = (agmm_cpu_chunk_times){0};
        delays_us += impl->delay_us[ch];
    }
    agmm_cpu_gemm_ws_forget_b(&impl->ws); /* B may hold new values since the last run */

    agmm_status st = agmm_cpu_barrier(ctx, "ag_matmul/fused opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    /* Copy role: on the copy thread from here on. */
    st = agmm_cpu_queue_gather(plan, impl->ce, io->a_gathered, impl->flags, impl->delay_us, impl->copy_done_ns);
    if (st == AGMM_SUCCESS)
        st = gemm_role(plan, io);

    /* Even after a failure: no copy may still write the caller's A once we return. The copies
     * never wait for a peer, so the bound is the timeout plus the test hook's delays. */
    agmm_status drained = agmm_cpu_ce_drain(impl->ce, ctx->world->timeout_s + (double)delays_us * 1e-6);
    for (int ch = 0; drained == AGMM_SUCCESS && ch < impl->chunks; ch++)
        impl->times[ch].copy_done_ns = impl->copy_done_ns[ch];
    if (st != AGMM_SUCCESS)
        return st;
    if (drained != AGMM_SUCCESS)
        return drained;
    return agmm_cpu_barrier(ctx, "ag_matmul/fused closing barrier");
}

static void fused_destroy(agmm_plan *plan)
{
    fused_impl *impl = plan->impl;
    agmm_cpu_ce_destroy(impl->ce);
    agmm_cpu_gemm_ws_free(&impl->ws);
    free(impl->flags);
    free(impl->delay_us);
    free(impl->copy_done_ns);
    free(impl->times);
    free(impl);
    plan->impl = NULL;
}

static fused_impl *fused_of(agmm_plan *plan, int chunk)
{
    if (plan == NULL || plan->ops != &agmm_cpu_ag_matmul_fused_ops || plan->impl == NULL)
        return NULL;
    fused_impl *impl = plan->impl;
    return chunk >= 0 && chunk < impl->chunks ? impl : NULL;
}

agmm_status agmm_cpu_fused_set_copy_delay(agmm_plan *plan, int chunk, int64_t delay_us)
{
    fused_impl *impl = fused_of(plan, chunk);
    if (impl == NULL || delay_us < 0)
        return AGMM_ERR_INVALID_ARG;
    impl->delay_us[chunk] = delay_us;
    return AGMM_SUCCESS;
}

agmm_status agmm_cpu_fused_chunk_times(agmm_plan *plan, int chunk, agmm_cpu_chunk_times *out)
{
    fused_impl *impl = fused_of(plan, chunk);
    if (impl == NULL || out == NULL)
        return AGMM_ERR_INVALID_ARG;
    *out = impl->times[chunk];
    return AGMM_SUCCESS;
}

const agmm_backend_ops agmm_cpu_ag_matmul_fused_ops = {
    .id = AGMM_BACKEND_FUSED,
    .op = AGMM_OP_AG_MATMUL,
    .cpu = 1,
    .nccl = 0,
    .create = fused_create,
    .run = fused_run,
    .destroy = fused_destroy,
};
