/* The gather skeleton in the CPU world (gather.h): the plan's copy thread copies the peers'
 * chunks and raises each chunk's flag to 1 (release) after its rows; the rank's thread computes
 * and acquires a chunk's flag before reading its rows. The protocol of the GPU's fused flags: the
 * raised value is a constant, and the flags go back to 0 once every wait and every copy of the
 * run is over, before the next run queues its copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gather.h"
#include "../core/schedule.h"

agmm_status agmm_gather_cpu_create(agmm_plan *plan, agmm_gather_cpu *g)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    agmm_error *err = agmm_ctx_err(plan->ctx);
    g->chunks = ri->nranks * plan->desc.mm.splits;
    size_t flag_bytes = (size_t)g->chunks * AGMM_CPU_FLAG_STRIDE * sizeof(uint32_t);
    g->flags = aligned_alloc(64, (flag_bytes + 63) / 64 * 64);
    g->delay_us = calloc((size_t)g->chunks, sizeof *g->delay_us);
    g->copy_done_ns = calloc((size_t)g->chunks, sizeof *g->copy_done_ns);
    if (g->flags == NULL || g->delay_us == NULL || g->copy_done_ns == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: gather state for %d chunks allocation failed", ri->rank,
                         g->chunks);
    memset(g->flags, 0, flag_bytes);
    /* One job per chunk plus the local shard's. */
    return agmm_cpu_ce_create(ri->rank, err, g->chunks + 1, &g->ce);
}

uint64_t agmm_gather_cpu_bytes(const agmm_plan *plan)
{
    uint64_t chunks = (uint64_t)agmm_ctx_info(plan->ctx)->nranks * (uint64_t)plan->desc.mm.splits;
    return chunks * (AGMM_CPU_FLAG_STRIDE * sizeof(uint32_t) + sizeof(int64_t) * 2) +
           (chunks + 1) * sizeof(agmm_cpu_copy_job) + 64;
}

void agmm_gather_cpu_destroy(agmm_gather_cpu *g)
{
    agmm_cpu_ce_destroy(g->ce);
    free(g->flags);
    free(g->delay_us);
    free(g->copy_done_ns);
    memset(g, 0, sizeof *g);
}

/* Queues the copies of one run, in the order the schedule visits the chunks: peers in rotated
 * order, each chunk raising its flag to 1; then the local shard, raising nothing. */
static agmm_status queue_copies(agmm_plan *plan, agmm_gather_cpu *g, uint16_t *a_gathered)
{
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    agmm_sched s = {.m = d->m, .splits = d->splits};
    for (int pos = 1; pos < ri->nranks; pos++) {
        int src = (ri->rank + pos) % ri->nranks;
        for (int sp = 0; sp < d->splits; sp++) {
            int64_t row0, rows;
            agmm_sched_chunk_rows(&s, sp, &row0, &rows);
            int chunk = src * d->splits + sp;
            g->copy_done_ns[chunk] = 0;
            agmm_cpu_copy_job job = {
                .dst = a_gathered + ((int64_t)src * d->m + row0) * d->k,
                .src = (const uint16_t *)agmm_plan_in_peer(plan, src) + row0 * d->k,
                .bytes = (size_t)(rows * d->k) * sizeof(uint16_t),
                .flag = g->flags + (size_t)chunk * AGMM_CPU_FLAG_STRIDE,
                .epoch = 1,
                .delay_us = g->delay_us[chunk],
                .done_ns = g->copy_done_ns + chunk,
            };
            agmm_status st = agmm_cpu_ce_submit(g->ce, &job);
            if (st != AGMM_SUCCESS)
                return st;
        }
    }
    agmm_cpu_copy_job local = {
        .dst = a_gathered + (int64_t)ri->rank * d->m * d->k,
        .src = agmm_plan_in(plan),
        .bytes = (size_t)(d->m * d->k) * sizeof(uint16_t),
    };
    return agmm_cpu_ce_submit(g->ce, &local);
}

agmm_status agmm_gather_cpu_wait(agmm_plan *plan, const agmm_gather_cpu *g, int chunk, const char *what)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    uint32_t seen = 0;
    /* Acquire: pairs with the copy thread's release after it wrote the chunk's rows. */
    if (agmm_cpu_flag_wait(g->flags + (size_t)chunk * AGMM_CPU_FLAG_STRIDE, 1, ri->timeout_s, &seen))
        return AGMM_SUCCESS;
    agmm_sched s = {.m = d->m, .splits = d->splits};
    int64_t row0, rows;
    agmm_sched_chunk_rows(&s, chunk % d->splits, &row0, &rows);
    return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_TIMEOUT,
                     "rank %d: %s waited %.2f s for chunk %d (rank %d's rows %lld..%lld) at epoch %u: its copy never "
                     "landed (flag reads %u)",
                     ri->rank, what, ri->timeout_s, chunk, chunk / d->splits, (long long)row0,
                     (long long)(row0 + rows - 1), plan->epoch, seen);
}

agmm_status agmm_gather_cpu_run(agmm_plan *plan, agmm_gather_cpu *g, const agmm_ag_matmul_io *io, const char *what,
                                 agmm_status (*compute)(agmm_plan *plan, const agmm_ag_matmul_io *io, void *arg),
                                 void *arg)
{
    char name[96];
    snprintf(name, sizeof name, "%s opening barrier", what);
    agmm_status st = agmm_symm_barrier_host(plan->ctx, name);
    if (st != AGMM_SUCCESS)
        return st;
    st = queue_copies(plan, g, io->a_gathered);
    if (st == AGMM_SUCCESS)
        st = compute(plan, io, arg);
    /* Even after a failure: no copy may still write the caller's A once we return. The copies
     * never wait for a peer, so the bound is the timeout plus the test hook's delays. */
    int64_t delays_us = 0;
    for (int c = 0; c < g->chunks; c++)
        delays_us += g->delay_us[c];
    agmm_status drained = agmm_cpu_ce_drain(g->ce, agmm_ctx_info(plan->ctx)->timeout_s + (double)delays_us * 1e-6);
    if (st != AGMM_SUCCESS)
        return st;
    if (drained != AGMM_SUCCESS)
        return drained;
    /* Every wait and every copy of this run is over: the flags go back to 0 for the next run. */
    for (int c = 0; c < g->chunks; c++)
        agmm_cpu_flag_raise(g->flags + (size_t)c * AGMM_CPU_FLAG_STRIDE, 0);
    snprintf(name, sizeof name, "%s closing barrier", what);
    return agmm_symm_barrier_host(plan->ctx, name);
}
