/* The gather skeleton on GPUs (gather.h). Per run, on the caller's stream S and the context's
 * high-priority copy stream C:
 *
 *   S: record ev_in (the caller's writes of the shard and B are before it)
 *   C: wait ev_in; entry barrier (every rank's shard is written)                     [W > 1]
 *   hooks->start on S (the entry barrier is enqueued first so it finds an SM before a
 *      persistent GEMM can hold them all)
 *   C: for src = rank+1, rank+2, ...: for each chunk of src: copy the peer's rows into the
 *      gathered A; hooks->landed
 *   C: the local shard into its rows of the gathered A (overlaps the last GEMMs; nobody waits),
 *      unless start's work copies it (hooks->copies_local)
 *   C: closing barrier (no rank overwrites its shard while a peer may still read it)  [W > 1]
 *   C: record ev_done; S: wait ev_done (the caller's stream is after all of it)
 *
 * At W = 1 with copies_local, C has nothing to do: the run is start's work on S alone.
 *
 * Cross-rank waits are only the two barriers, bounded kernels on C. */
#ifdef AGMM_HAVE_CUDA
#include "gather.h"
#include "../core/schedule.h"
#include "../kernels/delay.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

agmm_status agmm_gather_gpu_create(agmm_plan *plan, agmm_gather_gpu *g)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_error *err = agmm_ctx_err(plan->ctx);
    g->delay_chunk = -1;
    AGMM_CUDA_TRY(st, err, cudaEventCreateWithFlags(&g->ev_in, cudaEventDisableTiming));
    AGMM_CUDA_TRY(st, err, cudaEventCreateWithFlags(&g->ev_done, cudaEventDisableTiming));
fail:
    return st;
}

void agmm_gather_gpu_destroy(agmm_gather_gpu *g)
{
    if (g->ev_in)
        cudaEventDestroy(g->ev_in);
    if (g->ev_done)
        cudaEventDestroy(g->ev_done);
    g->ev_in = g->ev_done = NULL;
}

agmm_status agmm_gather_gpu_run(agmm_plan *plan, agmm_gather_gpu *g, const agmm_ag_matmul_io *io, cudaStream_t s,
                                 const agmm_gather_gpu_hooks *hooks, void *arg)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    cudaStream_t c = agmm_ctx_gpu(ctx)->copy_stream;
    const size_t a_row = (size_t)d->k * 2;
    char *ag = io->a_gathered;

    if (ri->nranks == 1 && hooks->copies_local) {
        AGMM_TRY(st, hooks->start(plan, io, s, arg));
        return agmm_gpu_note_run(ctx, s);
    }
    AGMM_CUDA_TRY(st, err, cudaEventRecord(g->ev_in, s));
    AGMM_CUDA_TRY(st, err, cudaStreamWaitEvent(c, g->ev_in, 0));
    AGMM_TRY(st, agmm_symm_barrier_stream(ctx, c));
    AGMM_TRY(st, hooks->start(plan, io, s, arg));
    agmm_sched sch = {.m = d->m, .splits = d->splits};
    for (int step = 1; step < ri->nranks; step++) {
        int src = (ri->rank + step) % ri->nranks;
        for (int sp = 0; sp < d->splits; sp++) {
            int chunk = src * d->splits + sp;
            int64_t r0, rows;
            agmm_sched_chunk_rows(&sch, sp, &r0, &rows);
            int64_t row0 = (int64_t)src * d->m + r0;
            if (chunk == g->delay_chunk)
                AGMM_CUDA_TRY(st, err, agmm_launch_delay(g->delay_ns, c));
            AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(ag + (size_t)row0 * a_row,
                                                   (const char *)agmm_plan_in_peer(plan, src) + (size_t)r0 * a_row,
                                                   (size_t)rows * a_row, cudaMemcpyDeviceToDevice, c));
            AGMM_TRY(st, hooks->landed(plan, io, chunk, row0, rows, s, c, arg));
        }
    }
    if (!hooks->copies_local)
        AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(ag + (size_t)(ri->rank * d->m) * a_row, agmm_plan_in(plan),
                                               (size_t)d->m * a_row, cudaMemcpyDeviceToDevice, c));
    AGMM_TRY(st, agmm_symm_barrier_stream(ctx, c));
    AGMM_CUDA_TRY(st, err, cudaEventRecord(g->ev_done, c));
    AGMM_CUDA_TRY(st, err, cudaStreamWaitEvent(s, g->ev_done, 0));
    AGMM_TRY(st, agmm_gpu_note_run(ctx, s));
fail:
    return st;
}
#endif /* AGMM_HAVE_CUDA */
