/* Pull mode's tensor maps of the peers' shards (plan_impl.h, agmm_gemm_plan_set_peers): kept in
 * device memory, one set of nranks maps per distinct set of shard pointers, in
 * AGMM_GEMM_MAP_SLOTS slots that a stream capture can hold (gemm_engine.h says when a slot is
 * refilled); and the closing barrier's counter and the epoch word beside them. */
#ifdef AGMM_HAVE_CUDA
#include <string.h>

#include "core/cuda_check.h"
#include "kernels/gemm/plan_impl.h"

agmm_status agmm_gemm_pull_create(agmm_gemm_plan *pl, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_gemm_desc *d = &pl->desc;
    const size_t maps = (size_t)AGMM_GEMM_MAP_SLOTS * d->nranks * sizeof(CUtensorMap);
    AGMM_CUDA_TRY(st, err, cudaMalloc(&pl->pull_dev, maps + 2 * sizeof(uint32_t)));
    AGMM_CUDA_TRY(st, err, cudaMemset((char *)pl->pull_dev + maps, 0, 2 * sizeof(uint32_t)));
    gemm_a_peers *a = &pl->params.a.peers;
    a->close_ctr = (uint32_t *)((char *)pl->pull_dev + maps);
    a->epoch = a->close_ctr + 1;
    a->signals = d->signals;
    a->wait.err = d->dev_error;
    a->wait.timeout_ns = d->timeout_ns;
fail:
    return st;
}

static int misaligned(const void *p)
{
    return ((uintptr_t)p & 15u) != 0;
}

/* The map slot holding `peers`' maps, or -1. */
static int slot_find(const agmm_gemm_plan *pl, const void *const *peers)
{
    for (int s = 0; s < AGMM_GEMM_MAP_SLOTS; s++)
        if (pl->slot_ptr[s][0] && !memcmp(pl->slot_ptr[s], peers, (size_t)pl->desc.nranks * sizeof *peers))
            return s;
    return -1;
}

/* The slot to fill: an empty one, else the least recently used of those no capture holds; -1
 * when every slot is held. */
static int slot_victim(const agmm_gemm_plan *pl)
{
    int best = -1;
    for (int s = 0; s < AGMM_GEMM_MAP_SLOTS; s++) {
        if (!pl->slot_ptr[s][0])
            return s;
        if (!pl->slot_pinned[s] && (best < 0 || pl->slot_used[s] < pl->slot_used[best]))
            best = s;
    }
    return best;
}

agmm_status agmm_gemm_plan_set_peers(agmm_gemm_plan *pl, const void *const *peers, cudaStream_t stream,
                                     agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_gemm_desc *d = &pl->desc;
    if (!d->pull)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "gemm engine: peers' shards are for a plan in pull mode");
    for (int r = 0; r < d->nranks; r++)
        if (!peers[r] || misaligned(peers[r]))
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                             "gemm engine: peers[%d]=%p (rank %d's shard) must be a 16-byte aligned pointer", r,
                             peers[r], r);
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    unsigned long long capture = 0;
    AGMM_CUDA_TRY(st, err, cudaStreamGetCaptureInfo(stream, &cap, &capture, NULL, NULL, NULL, NULL));
    const int capturing = cap != cudaStreamCaptureStatusNone;
    int s = slot_find(pl, peers);
    const int fresh = s < 0;
    if (fresh && (s = slot_victim(pl)) < 0)
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED,
                         "gemm engine: pull mode keeps the maps of %d distinct shard sets, and CUDA graphs "
                         "captured from this plan hold all of them: capture more inputs with another plan",
                         AGMM_GEMM_MAP_SLOTS);
    /* A slot filled only inside a capture holds its maps only once that graph has run: work
     * outside the graph fills it again (the same bytes). */
    if (fresh || !(pl->slot_filled[s] || (capturing && pl->slot_capture[s] == capture))) {
        for (int r = 0; r < d->nranks; r++)
            AGMM_TRY(st, agmm_gemm_tma_matrix(pl, &pl->fill.map[r], peers[r], (uint64_t)d->k, (uint64_t)d->m, GEMM_BK,
                                              (uint32_t)pl->config->bm, "a peer's shard", err));
        /* Stream order puts the fill after the runs before (the caller orders its runs), so no
         * run still reads the slot's old maps; the runs after find the new ones. */
        CUtensorMap *slot = (CUtensorMap *)pl->pull_dev + (size_t)s * d->nranks;
        AGMM_CUDA_TRY(st, err, agmm_gemm_launch_fill_maps(slot, d->nranks, &pl->fill, stream));
        memcpy(pl->slot_ptr[s], peers, (size_t)d->nranks * sizeof *peers);
        pl->slot_filled[s] = !capturing;
        pl->slot_capture[s] = capturing ? capture : 0;
    }
    pl->slot_pinned[s] |= capturing;
    pl->slot_used[s] = ++pl->uses;
    pl->params.a.peers.peer_maps = (const CUtensorMap *)pl->pull_dev + (size_t)s * d->nranks;
fail:
    return st;
}
#endif /* AGMM_HAVE_CUDA */
