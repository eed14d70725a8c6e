/* The CPU world's barrier on the signal pads (symm.h). The pads are host memory; every slot is
 * written and read through the CPU device's atomic flags (src/cpu/flags.c), which is what the GPU
 * barrier does with st.release.sys / ld.acquire.sys on the same layout. */
#include <stdio.h>

#include "symm_impl.h"
#include "../core/clock.h"
#include "../cpu/cpu.h"

#ifndef AGMM_HAVE_CUDA
agmm_status agmm_symm_barrier_stream(agmm_ctx *ctx, void *stream)
{
    return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_UNSUPPORTED, "this agmm was built without CUDA");
}
#endif

/* How often a barrier's wait asks whether the peer it waits for died. */
#define GONE_CHECK_S 0.05

/* Records the timeout of a barrier: the first peer that never arrived (at slot `first`, last
 * seen at `seen`) and any later one still missing. */
static agmm_status barrier_timeout(agmm_ctx *ctx, const char *what, uint32_t epoch, int first, uint32_t seen)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    char others[AGMM_MAX_RANKS * 10] = "";
    size_t used = 0;
    const uint32_t *mine = agmm_symm_state_of(ctx)->pad->local;
    for (int p = first + 1; p < ri->nranks; p++)
        if (!agmm_cpu_reached(agmm_cpu_flag_load(mine + p), epoch))
            used += (size_t)snprintf(others + used, sizeof others - used, ", rank %d", p);
    return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_TIMEOUT,
                     "rank %d: %s (barrier epoch %u) timed out after %.2f s: rank %d never arrived (its slot reads "
                     "%u)%s%s",
                     ri->rank, what, epoch, ri->timeout_s, first, seen, used ? "; missing too: " : "",
                     used ? others + 2 : "");
}

agmm_status agmm_symm_barrier_host(agmm_ctx *ctx, const char *what)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    agmm_symm_state *state = agmm_symm_state_of(ctx);
    int nranks = ri->nranks;
    agmm_symm_buf *pad = state->pad;
    uint32_t epoch = ++state->barrier_epoch;

    /* Arrive: slot[rank] of every pad, mine included. The release orders every write this rank
     * made before (its shard, its scratch) before the arrival that peers acquire. */
    for (int p = 0; p < nranks; p++)
        agmm_cpu_flag_raise((uint32_t *)pad->peer[p] + ri->rank, epoch);

    /* Wait: every slot of my pad. A peer already in a later barrier has written a later epoch,
     * which also counts ("reached" is >=). Peers are waited for in turn, each with what is left
     * of the timeout, so the whole barrier is bounded by it; in slices, between which a peer the
     * world knows to have died (a process world's liveness lock) ends the wait at once. */
    const uint32_t *mine = pad->local;
    int64_t deadline = agmm_mono_ns() + (int64_t)(ri->timeout_s * 1e9);
    for (int p = 0; p < nranks; p++) {
        uint32_t seen = 0;
        for (;;) {
            double left = (double)(deadline - agmm_mono_ns()) * 1e-9;
            const double slice = left < GONE_CHECK_S ? left : GONE_CHECK_S;
            if (agmm_cpu_flag_wait(mine + p, epoch, slice > 0 ? slice : 0, &seen))
                break;
            char why[160];
            if (left <= GONE_CHECK_S)
                return barrier_timeout(ctx, what, epoch, p, seen);
            /* The caller's agmm_world_note_gone appends why, as after a timeout. */
            if (agmm_world_peer_gone(ctx, p, why, sizeof why))
                return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_TIMEOUT,
                                 "rank %d: %s (barrier epoch %u) ended early: rank %d never arrived (its slot reads "
                                 "%u)",
                                 ri->rank, what, epoch, p, seen);
        }
    }
    return AGMM_SUCCESS;
}
