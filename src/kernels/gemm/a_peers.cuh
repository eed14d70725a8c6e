/* The peer-shard A source (the `pull` backend; device code only): one kernel is the whole
 * all-gather matmul, and nothing in it comes from the host per run, so a CUDA graph replays it as
 * a new run. The hooks are a_source.cuh's.
 *
 * Epoch: the plan's epoch word (device memory, zero at plan time) counts the runs completed.
 *   Every CTA's thread 32 reads it at the start (cta_word: the run's epoch e = word + 1, kept in
 *   shared memory for the CTA's roles, before the barrier that starts them); the last CTA of the
 *   closing barrier (below) stores e into it, once every CTA of the grid has counted itself in, so
 *   no CTA of this run reads it after. The next run starts after this kernel has completed (one
 *   stream; runs of a rank are ordered), so every CTA of it reads e. Every rank runs the plan's
 *   runs alike, so every rank's e agrees.
 * Loads: a tile of rank src's rows is loaded through peer_maps[src], a tensor map over src's shard
 *   (NVLink peer memory, or the same GPU's where ranks share one). The maps live in device memory,
 *   one set per distinct set of shard pointers (map slots, pull_maps.c, filled by a small kernel
 *   that carries them as its parameter, so a captured fill replays the same bytes); the producer
 *   orders its first use after the fill with fence.proxy.tensormap. Tiles of this rank's rows
 *   read the shard map.
 * Ready words (signals[src][AGMM_PULL_READY]): writer: rank src's own kernel, thread 32 of every
 *   CTA (side_thread: idle in the producer warpgroup, so the producer does not wait on the fence)
 *   at the CTA's start: a system-scope fence, then a release store of e. The shard was written by
 *   work before the kernel on its stream, complete when the kernel starts: the fence and the
 *   release make it visible to any peer that acquires the word. Every CTA raises it (the same
 *   value), so peers depend only on some CTA of this kernel running, not on a given one being
 *   scheduled first. Waiter: the producer thread, before its first tile of src's rows (then
 *   remembered for the run in a bit mask, so each CTA reads each peer's word once): the bounded
 *   wait and proxy fence of a chunk flag, for >= e. Reset: never (epochs).
 * The gathered A, a by-product: K block kb of a row of tiles is stored by the tile of that row
 *   in column kb % col_tiles (agmm_sched_store_kb, core/schedule.h), from its ring slot to the
 *   gathered A by a TMA store through a 3-D map {k, m, nranks}, so a short tile's rows past the
 *   shard's end are clipped. Every (row, K block) is loaded once per column, so it is stored
 *   exactly once, and the stores spread over the row's tiles (until the twenty-first session the
 *   first column stored all of them: its CTAs waited on every K block, and pull took 1.33x the
 *   engine alone at 2560^3, W = 1, H100). The producer issues the store when it next refills that
 *   slot (the consumers have released it, so the tile is complete and nobody writes the slot
 *   meanwhile) and waits for the store to have read the slot before the new load; slots never
 *   refilled are stored at the end, after their full barrier's phase. Rows past a short tile's end
 *   belong to the next chunk of the same shard: two CTAs may store them, with the same bytes.
 * Closing barrier (nranks > 1): done slots signals[r][AGMM_PULL_DONE + q]. When every thread of a
 *   CTA is done (all its loads consumed, its stores written), thread 0 counts the CTA in on
 *   close_ctr (device memory of the plan); the last CTA of the grid resets the counter, advances
 *   the epoch word to e, writes e into slot `rank` of every peer (release, system scope) and waits
 *   (the bounded acquire) until every peer has written its slot of ours: the kernel ends only when
 *   no peer will read this rank's shard again in this run, so the caller may overwrite it. Writer
 *   of a slot: only rank q; waiter: only the owner's last CTA; reset: never (epochs). */
#ifndef AGMM_KERNELS_GEMM_A_PEERS_CUH
#define AGMM_KERNELS_GEMM_A_PEERS_CUH

#include <stdint.h>

#include "kernels/gemm/a_source.cuh"
#include "kernels/gemm/gemm_engine.h"

/* A ring slot's A tile still to be stored to the gathered A: its coordinates in the 3-D store
 * map, and the parity of the full-barrier phase that its load completes. */
struct pull_store {
    int c0, row, src;
    uint32_t parity;
};

/* Entry (header comment): this rank's shard, written by the work before this kernel on its
 * stream, is made visible at system scope, then the ready word says so to every peer. */
static __device__ __noinline__ void pull_raise_ready(const gemm_params &p, uint32_t epoch)
{
    __threadfence_system();
    agmm_st_release_sys(p.a.peers.signals[p.core.sched.rank] + AGMM_PULL_READY, epoch);
}

/* The closing barrier (header comment); every thread of the CTA calls it. */
static __device__ __noinline__ void pull_close(const gemm_params &p, uint32_t epoch)
{
    const gemm_a_peers &a = p.a.peers;
    __syncthreads(); /* every load of this CTA was consumed and every store written */
    if (threadIdx.x != 0)
        return;
    __threadfence();
    if (atomicAdd(a.close_ctr, 1u) != gridDim.x - 1)
        return;
    /* The last CTA: every other one counted in after its fence, so the whole grid is done, and
     * every CTA has read the epoch word: both are for the next run, which starts after this
     * kernel. */
    __threadfence();
    *a.close_ctr = 0;
    *a.epoch = epoch;
    /* The reads of peers' shards went through the async proxy: ordered before the release. */
    asm volatile("fence.proxy.async.global;" ::: "memory");
    const int rank = p.core.sched.rank;
    for (int q = 0; q < p.core.sched.nranks; q++)
        if (q != rank)
            agmm_st_release_sys(a.signals[q] + AGMM_PULL_DONE + rank, epoch);
    for (int q = 0; q < p.core.sched.nranks; q++)
        if (q != rank &&
            gemm_wait_flag(a.wait, rank, a.signals[rank] + AGMM_PULL_DONE + q, epoch, AGMM_WAIT_BARRIER, -1, q))
            break;
}

template <class Cfg>
struct a_peers {
    /* This run's epoch (header comment): the runs completed, written by the last run's last CTA
     * before that kernel completed, plus one. With one rank: no epoch, ready word or barrier. */
    __device__ static __forceinline__ uint32_t cta_word(const gemm_params &p)
    {
        return p.core.sched.nranks > 1 ? *(volatile const uint32_t *)p.a.peers.epoch + 1u : 0;
    }
    __device__ static __forceinline__ void prefetch(const gemm_params &p)
    {
        prefetch_map(&p.a.peers.map_store);
        if (p.a.peers.has_shard)
            prefetch_map(&p.a.peers.map_shard);
    }
    __device__ static __forceinline__ void side_thread(const gemm_params &p, uint32_t epoch)
    {
        if (p.core.sched.nranks > 1)
            pull_raise_ready(p, epoch);
    }
    __device__ static __forceinline__ void copy_local(const gemm_params &, int) {}
    __device__ static __forceinline__ void cta_end(const gemm_params &p, uint32_t epoch)
    {
        if (p.core.sched.nranks > 1)
            pull_close(p, epoch);
    }

    using slot_note = pull_store; /* the A tile a slot still has to store */
    struct producer {
        const gemm_params &p;
        const uint32_t epoch;
        pull_store *store; /* [slot] */
        int waits_off = 0;
        uint64_t ready_seen = 0; /* peers whose ready word this CTA has seen */
        uint32_t pending = 0;    /* slots whose A tile awaits its store */
        int store_kb = 0;        /* the unit's next K block to store (header comment) */

        __device__ __forceinline__ producer(const gemm_params &params, uint32_t e, pull_store *notes)
            : p(params), epoch(e), store(notes)
        {
        }

        /* The peers' maps were written to global memory by the slot's fill kernel (generic
         * proxy): order that before this thread's TMA loads through them. */
        __device__ __forceinline__ void start()
        {
            for (int r = 0; r < p.core.sched.nranks; r++)
                asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" ::"l"(p.a.peers.peer_maps + r)
                             : "memory");
        }

        /* Before a tile of rank src's rows: src's ready word, once per CTA and run. */
        __device__ __forceinline__ a_tile tile(const tile_job &j)
        {
            const gemm_a_peers &a = p.a.peers;
            const int from_shard = j.local && a.has_shard;
            store_kb = agmm_sched_store_kb(p.core.sched.col_tiles, j.col0 / Cfg::BN, j.kb0);
            if (!from_shard && !waits_off && !(ready_seen >> j.src_rank & 1)) {
                ready_seen |= 1ull << j.src_rank;
                waits_off = gemm_wait_flag(a.wait, p.core.sched.rank, a.signals[j.src_rank] + AGMM_PULL_READY, epoch,
                                           AGMM_WAIT_READY, -1, j.src_rank);
            }
            return a_tile{from_shard ? &a.map_shard : a.peer_maps + j.src_rank, (int)j.shard_row0};
        }

        /* The slot's A tile is stored before the slot is refilled. */
        __device__ __forceinline__ void before_refill(const ring<Cfg> &r, int s)
        {
            if (pending >> s & 1) {
                tma_store_3d(r.a_slot(s), &p.a.peers.map_store, store[s].c0, store[s].row, store[s].src);
                bulk_wait<1>();
                pending &= ~(1u << s);
            }
        }

        __device__ __forceinline__ void after_load(const ring_pos<Cfg> &pos, int kb, const tile_job &j)
        {
            if (kb == store_kb) {
                store[pos.stage] = pull_store{kb * GEMM_BK, (int)j.shard_row0, j.src_rank, pos.phase};
                pending |= 1u << pos.stage;
                store_kb += (int)p.core.sched.col_tiles;
            }
        }

        /* The tiles still in their slots, each once its load has landed; then every store is
         * complete before the CTA (and its shared memory) goes. */
        __device__ __forceinline__ void finish(const ring<Cfg> &r)
        {
            for (int s = 0; pending && s < Cfg::STAGES; s++)
                if (pending >> s & 1) {
                    mbar_wait(r.full(s), store[s].parity);
                    tma_store_3d(r.a_slot(s), &p.a.peers.map_store, store[s].c0, store[s].row, store[s].src);
                }
            bulk_wait<0>();
        }
    };
};

#endif /* AGMM_KERNELS_GEMM_A_PEERS_CUH */
