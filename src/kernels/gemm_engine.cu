/* The GEMM engine (gemm_engine.h): a persistent, warp-specialised bf16 GEMM for sm_90a.
 *
 * Launch: grid = min(units, SM budget) persistent CTAs (even, in clusters of 2 for the /c2
 * configs); block = 384 threads = 3 warpgroups; dynamic smem = smem_layout below: STAGES *
 * (A tile BMx64 + B tile BNx64) bf16 + 2*STAGES mbarriers + 8 consumer warps' epilogue
 * staging (16 rows x 144 B each) + 1 KB for alignment (192-224 KB in the configs of
 * gemm_configs.h). One CTA per SM. CTA b takes units u = b, b + grid, ...: a unit is tile u of
 * core/schedule.h, except in split-tail configs (below).
 *
 * Roles (one if/else on the warpgroup index, so setmaxnreg applies):
 *   warpgroup 0, "producer" (56 registers): thread 0 walks the CTA's units and, per 64-wide K
 *     block, waits for a free slot and issues the TMA loads of A (BM x 64) and B (BN x 64)
 *     into it. Before a unit's first load it does the fused-path wait (below). The other
 *     threads idle to the end (a cluster barrier counts them), except thread 32 in pull mode,
 *     which raises the rank's ready word (below).
 *   warpgroups 1 and 2, "consumers" (224 registers): consumer w computes its part of the
 *     BM x BN tile, rows [w*BM/2, (w+1)*BM/2) (wgn 1) or columns [w*BN/2, (w+1)*BN/2) (wgn 2),
 *     as 64-row blocks of wgmma m64nNk16 (fp32 accumulators in registers), then stores it to C
 *     through its warps' staging rows (line-wide stores), clipped to the tile's rows/cols (a
 *     short tile's next rows belong to another chunk, whose tile may run at the same time).
 *   Clusters of 2 (/c2): CTA rank r = idx & 1; the pair's tiles idx, idx ^ 1 are vertically
 *     adjacent in the grouped order, and when their columns match they share B: each CTA loads
 *     half of the B tile and multicasts it to both, so B's L2 traffic halves.
 *   Split tail (/sk): the host (plan_split_tail) picks the last tiles whose whole-tile rounds
 *     leave SMs idle and cuts each into sk_split K ranges; each range is a unit of its own, on
 *     another SM. Every piece's consumer warps write fp32 partials to a workspace and count
 *     themselves in on a per-(tile, warp) counter; the warp whose count is last sums the pieces
 *     in piece order (deterministic) and stores the rows (sk_fixup: the fences and who resets
 *     the counter). No piece ever waits for another, so no CTA depends on another being
 *     resident. A plan's runs share the workspace: they must not overlap (one stream).
 *
 * Shared memory ring: STAGES slots, each with two mbarriers.
 *   full[s]  count 1. Writer: the producer's arrive.expect_tx (A + whole B bytes) plus TMA's
 *            complete_tx (ours, and the partner's multicast half). Waiter: both consumers
 *            (parity = pass over the ring & 1).
 *   empty[s] count 16. Writer: lane 0 of each of the 8 consumer warps, twice per use, after
 *            wgmma.wait_group shows that warp's reads of slot s are done: once here and once
 *            at the partner CTA when B was shared (its producer wrote into our slot), else
 *            twice here. Waiter: the producer (acquire.cluster), with the parity of the
 *            previous pass, so the first pass falls through.
 *   Never reset: phases alternate for the kernel's lifetime; both roles of both CTAs of a
 *   pair walk the same tiles, K blocks and share decisions, so (slot, parity) sequences match.
 *
 * Chunk flags (fused path; desc.chunk_flags): one uint32 per chunk. Writer: whoever fills the
 *   chunk in the gathered A (a copy engine's stream write, a peer), after the data. Waiter:
 *   the producer thread, once per tile that reads the gathered A, before that tile's first A
 *   load: acquire load until flag - ready >= 0 (wrap-safe), then fence.proxy.async.global
 *   because the data was written through the generic proxy and TMA reads through the async
 *   one. Reset: by the kernel, at the end of the run (reset_chunk_flags): every producer
 *   counts itself out after its last wait, and the last one stores 0 to every flag and to the
 *   count, so a writer can raise a constant (the same value at every CUDA-graph replay).
 *   Bounded: after timeout_ns the wait is recorded in dev_error (first writer wins) and this
 *   CTA, and every CTA that later sees the record, stops waiting; the kernel then finishes, so
 *   a dead peer is an error, never a hang. Tiles that read the rank's own shard (a_local) never
 *   wait.
 *
 * Pull mode (desc.pull; the `pull` backend): one kernel is the whole all-gather matmul, and
 *   nothing in it comes from the host per run, so a CUDA graph replays it as a new run.
 *   Epoch: the plan's epoch word (device memory, zero at plan time) counts the runs completed.
 *   Every CTA's thread 32 reads it at the start (the run's epoch e = word + 1, kept in shared
 *   memory for the CTA's roles, before the barrier that starts them); the last CTA of the
 *   closing barrier (below) stores e into it, once every CTA of the grid has counted itself in,
 *   so no CTA of this run reads it after. The next run starts after this kernel has completed
 *   (one stream; runs of a rank are ordered), so every CTA of it reads e. Every rank runs the
 *   plan's runs alike, so every rank's e agrees.
 *   Loads: a tile of rank src's rows is loaded through peer_maps[src], a tensor map over src's
 *   shard (NVLink peer memory, or the same GPU's where ranks share one). The maps live in device
 *   memory, one set per distinct set of shard pointers (map slots, filled by a small kernel that
 *   carries them as its parameter, so a captured fill replays the same bytes); the producer
 *   orders its first use after the fill with fence.proxy.tensormap. Tiles of this rank's rows
 *   read a_local.
 *   Ready words (signals[src][AGMM_PULL_READY]): writer: rank src's own kernel, thread 32 of
 *   every CTA (an idle producer-warpgroup thread, so the producer does not wait on the fence) at
 *   the CTA's start: a system-scope fence, then a release store of e. The shard was written by
 *   work before the kernel on its stream, complete when the kernel starts: the fence and the
 *   release make it visible to any peer that acquires the word. Every CTA raises it (the same
 *   value), so peers depend only on some CTA of this kernel running, not on a given one being
 *   scheduled first. Waiter: the producer thread, before its first tile of src's rows (then
 *   remembered for the run in a bit mask, so each CTA reads each peer's word once): the same
 *   bounded acquire and proxy fence as a chunk flag, for >= e.
 *   Reset: never (epochs).
 *   The gathered A, a by-product: every A tile loaded for the first column of C (col0 == 0) is
 *   stored from its ring slot to `a` by a TMA store through a 3-D map {k, m, nranks}, so a
 *   short tile's rows past the shard's end are clipped. The producer issues the store when it
 *   next refills that slot (the consumers have released it, so the tile is complete and nobody
 *   writes the slot meanwhile) and waits for the store to have read the slot before the new
 *   load; slots never refilled are stored at the end, after their full barrier's phase. Rows
 *   past a short tile's end belong to the next chunk of the same shard: two CTAs may store
 *   them, with the same bytes.
 *   Closing barrier (nranks > 1): done slots signals[r][AGMM_PULL_DONE + q]. When every thread
 *   of a CTA is done (all its loads consumed, its stores written), thread 0 counts the CTA in
 *   on close_ctr (device memory of the plan); the last CTA of the grid resets the counter,
 *   advances the epoch word to e, writes e into slot `rank` of every peer (release, system
 *   scope) and waits (the bounded acquire) until every peer has written its slot of ours: the
 *   kernel ends only when no peer will read this rank's shard again in this run, so the caller
 *   may overwrite it. Writer of a slot: only rank q; waiter: only the owner's last CTA; reset:
 *   never (epochs).
 */
#include "kernels/gemm_engine.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/schedule.h"
#include "kernels/bounded_wait.cuh"
#include "kernels/gemm_configs.h"

#define GEMM_BK 64
#define GEMM_THREADS 384
#define EP_ROW_BYTES 144                 /* 64 bf16 + 16 B of padding */
#define EP_WARP_BYTES (16 * EP_ROW_BYTES) /* one consumer warp's 16 rows */

/* One config's shared memory: byte offsets from the 1024-aligned base, and the dynamic size to
 * ask for. The kernel carves with it and the host sizes with it. */
template <int BM, int BN, int STAGES>
struct smem_layout {
    static constexpr uint32_t a_bytes = BM * GEMM_BK * 2; /* one slot of A */
    static constexpr uint32_t b_bytes = BN * GEMM_BK * 2; /* one slot of B */
    static constexpr uint32_t a_ring = 0;                 /* 128B-swizzled tiles: 1024-aligned */
    static constexpr uint32_t b_ring = a_ring + STAGES * a_bytes;
    static constexpr uint32_t bars = b_ring + STAGES * b_bytes; /* full[STAGES], then empty[STAGES] */
    static constexpr uint32_t epilogue = (bars + 16 * STAGES + 127u) & ~127u; /* 8 warps' staging */
    static constexpr uint32_t end = epilogue + 8 * EP_WARP_BYTES;
    static constexpr size_t total = end + 1024; /* + what aligning the base may skip */
};

/* Everything a run needs, passed by value as one __grid_constant__ parameter: the tensor maps
 * must live in parameter (or constant/global) memory for TMA to read them. */
struct gemm_params {
    CUtensorMap map_a;       /* gathered A: dims {k, rows}, box {64, BM}, 128B swizzle; pull mode: the
                              * store map, dims {k, m, nranks}, box {64, BM, 1} */
    CUtensorMap map_a_local; /* the shard: dims {k, m}, same box and swizzle */
    CUtensorMap map_b;       /* col-major: dims {k, n}, box {64, BN}; row-major: {n, k}, box {64, 64} */
    CUtensorMap map_b_half;  /* col-major B with clusters: box {64, BN/2}, each CTA's multicast half */
    agmm_sched sched;
    uint16_t *c;             /* bf16 out, row stride n */
    int64_t n;
    int k_blocks;            /* ceil(k / 64); the K tail is zero-filled by TMA */
    int has_local;
    uint32_t *flags;         /* nranks*splits chunk flags, then the producers' count */
    agmm_dev_error *err;
    uint64_t timeout_ns;
    uint32_t ready;          /* the value a chunk flag must reach */
    uint64_t delay_ns;       /* test hook: each producer starts its loads this late (0: none) */
    /* Split-tail (SK) configs only: tiles from sk_first on are cut into sk_split K pieces, reduced
     * through sk_ws (fp32 partials) and sk_ctr (arrival counters, zero between runs). */
    int64_t sk_first;
    int sk_split;
    float *sk_ws;
    uint32_t *sk_ctr;
    /* Pull mode (header comment): peer_maps[r] over rank r's shard (dims {k, m}, box {64, BM}, the
     * map slot of this run's shards, in device memory), the ranks' signal words, the closing
     * barrier's CTA counter and the epoch word (runs completed). */
    int pull;
    const CUtensorMap *peer_maps;
    uint32_t *const *signals;
    uint32_t *close_ctr;
    uint32_t *epoch;
};

#include "kernels/hopper_ptx.cuh"

/* A consumer warp gives slot s back: empty[s] takes 2 arrivals per consumer warp per use. With
 * a shared B, one goes to each CTA's barrier (both producers wrote into our slot s); otherwise
 * both go to our own. */
template <int STAGES, int CL>
__device__ __forceinline__ void release_slot(uint32_t bars, int s, int share, uint32_t partner)
{
    const uint32_t empty = bars + 8 * (STAGES + s);
    mbar_arrive(empty);
    if (CL == 2 && share)
        mbar_arrive_remote(empty, partner);
    else
        mbar_arrive(empty);
}

/* ---- roles ------------------------------------------------------------------------------- */

/* The bounded wait until a flag reaches `target` (see the header comment): a tile's chunk flag
 * (target: the run's `ready`), or in pull mode a peer's ready word or done slot (target: the
 * run's epoch); `wait`, `chunk` and `peer` name it in the error record. Returns 1 when waits are
 * off from now on: this wait expired, or another CTA's already did (its record is set). */
__device__ __noinline__ int wait_flag(const gemm_params &p, const uint32_t *flag, uint32_t target, int wait, int chunk,
                                      int peer)
{
    uint32_t seen;
    const int r = agmm_spin_until<64, 1, 0>(flag, target, p.timeout_ns, p.err, &seen);
    if (r == AGMM_SPIN_EXPIRED)
        agmm_dev_error_record(p.err, p.sched.rank, peer, wait, chunk, target, seen);
    if (r != AGMM_SPIN_MET)
        return 1;
    /* The chunk was written through the generic proxy (copy engine, peer stores); TMA reads it
     * through the async proxy: order the acquired data before this thread's next TMA loads. */
    asm volatile("fence.proxy.async.global;" ::: "memory");
    return 0;
}

/* The flags' reset (see the header comment), by the producer thread after its last wait. The
 * first fence orders this producer's flag loads before its count; the last producer's fence
 * orders every count it read (and so every producer's loads) before its stores. The next run's
 * writers come after this kernel has completed (stream order), so they find the flags at 0. */
__device__ __noinline__ void reset_chunk_flags(const gemm_params &p)
{
    const int nflags = p.sched.nranks * p.sched.splits;
    uint32_t *count = p.flags + nflags;
    __threadfence();
    if (atomicAdd(count, 1u) != gridDim.x - 1)
        return;
    __threadfence();
    for (int i = 0; i < nflags; i++)
        p.flags[i] = 0;
    *count = 0;
}

/* A unit of work: a whole tile, or with split-tail (SK) configs one of the K pieces of a tile of
 * the last waves. Units [0, sk_first) are the tiles of the same index; unit sk_first + v is piece
 * v % sk_split of tile sk_first + v / sk_split, K blocks [piece*KB/split, (piece+1)*KB/split). */
struct unit_job {
    int64_t idx; /* the tile */
    int kb0, kb1;
    int piece, sk; /* sk: index among the split tiles, -1 for a whole tile */
};

template <int SK>
__device__ __forceinline__ int64_t num_units(const gemm_params &p, int64_t ntiles)
{
    return SK ? p.sk_first + (ntiles - p.sk_first) * p.sk_split : ntiles;
}

template <int SK>
__device__ __forceinline__ unit_job unit_of(const gemm_params &p, int64_t u)
{
    unit_job j = {u, 0, p.k_blocks, 0, -1};
    if (SK && u >= p.sk_first) {
        const int64_t v = u - p.sk_first;
        j.sk = (int)(v / p.sk_split);
        j.piece = (int)(v - (int64_t)j.sk * p.sk_split);
        j.idx = p.sk_first + j.sk;
        j.kb0 = j.piece * p.k_blocks / p.sk_split;
        j.kb1 = (j.piece + 1) * p.k_blocks / p.sk_split;
    }
    return j;
}

/* What the consumers need of a unit, and whether its tile shares its B tile with the partner CTA
 * of its cluster (cluster of 2: CTA rank r = idx & 1 takes tile idx, its partner idx ^ 1; they
 * share B when both exist and have the same columns, i.e. vertically adjacent tiles). */
struct tile_job {
    int64_t row0;
    int col0, rows, cols;
    int share;
    int kb0, kb1, piece, sk;
};

template <int CL>
__device__ __forceinline__ int tiles_share_b(const gemm_params &p, int64_t idx, int64_t ntiles, const agmm_tile &t)
{
    if (CL == 1 || (idx | 1) >= ntiles)
        return 0;
    agmm_tile o;
    agmm_sched_tile(&p.sched, idx ^ 1, &o);
    return o.col0 == t.col0;
}

template <int CL, int SK>
__device__ __forceinline__ tile_job job_of(const gemm_params &p, int64_t u, int64_t nunits, int64_t ntiles)
{
    tile_job j = {0, 0, 0, 0, 0, 0, 0, 0, -1};
    if (u < nunits) {
        const unit_job uj = unit_of<SK>(p, u);
        agmm_tile t;
        agmm_sched_tile(&p.sched, uj.idx, &t);
        j.row0 = t.row0;
        j.col0 = (int)t.col0;
        j.rows = t.rows;
        j.cols = t.cols;
        j.share = tiles_share_b<CL>(p, uj.idx, ntiles, t);
        j.kb0 = uj.kb0;
        j.kb1 = uj.kb1;
        j.piece = uj.piece;
        j.sk = uj.sk;
    }
    return j;
}

/* ---- pull mode (header comment) ---- */

/* A ring slot's A tile still to be stored to the gathered A: its coordinates in the 3-D store
 * map, and the parity of the full-barrier phase that its load completes. */
struct pull_store {
    int c0, row, src;
    uint32_t parity;
};

/* Stores one A tile from shared memory through the 3-D map; the bulk group is committed. */
__device__ __forceinline__ void tma_store_3d(uint32_t src, const CUtensorMap *map, int c0, int c1, int c2)
{
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Waits until this thread's bulk stores have read their shared memory (READ = 1: the slot may be
 * refilled) or are complete (READ = 0). */
template <int READ>
__device__ __forceinline__ void bulk_wait(void)
{
    if (READ)
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    else
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* The peers' maps were written to global memory by the slot's fill kernel (generic proxy):
 * order that before this thread's TMA loads through them. */
__device__ __forceinline__ void pull_acquire_maps(const gemm_params &p)
{
    for (int r = 0; r < p.sched.nranks; r++)
        asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" ::"l"(p.peer_maps + r) : "memory");
}

/* This run's epoch (header comment): the runs completed, written by the last run's last CTA
 * before that kernel completed, plus one. */
__device__ __forceinline__ uint32_t pull_run_epoch(const gemm_params &p)
{
    return *(volatile const uint32_t *)p.epoch + 1u;
}

/* Entry (header comment): this rank's shard, written by the work before this kernel on its
 * stream, is made visible at system scope, then the ready word says so to every peer. */
__device__ __noinline__ void pull_raise_ready(const gemm_params &p, uint32_t epoch)
{
    __threadfence_system();
    agmm_st_release_sys(p.signals[p.sched.rank] + AGMM_PULL_READY, epoch);
}

/* The wait before a tile of rank src's rows (pull mode): src's ready word, once per CTA and run. */
__device__ __forceinline__ int pull_wait_ready(const gemm_params &p, int src, uint32_t epoch, uint64_t *seen)
{
    if (*seen >> src & 1)
        return 0;
    *seen |= 1ull << src;
    return wait_flag(p, p.signals[src] + AGMM_PULL_READY, epoch, AGMM_WAIT_READY, -1, src);
}

/* The closing barrier (header comment); every thread of the CTA calls it. */
__device__ __noinline__ void pull_close(const gemm_params &p, uint32_t epoch)
{
    __syncthreads(); /* every load of this CTA was consumed and every store written */
    if (threadIdx.x != 0)
        return;
    __threadfence();
    if (atomicAdd(p.close_ctr, 1u) != gridDim.x - 1)
        return;
    /* The last CTA: every other one counted in after its fence, so the whole grid is done, and
     * every CTA has read the epoch word: both are for the next run, which starts after this
     * kernel. */
    __threadfence();
    *p.close_ctr = 0;
    *p.epoch = epoch;
    /* The reads of peers' shards went through the async proxy: ordered before the release. */
    asm volatile("fence.proxy.async.global;" ::: "memory");
    const int rank = p.sched.rank;
    for (int q = 0; q < p.sched.nranks; q++)
        if (q != rank)
            agmm_st_release_sys(p.signals[q] + AGMM_PULL_DONE + rank, epoch);
    for (int q = 0; q < p.sched.nranks; q++)
        if (q != rank && wait_flag(p, p.signals[rank] + AGMM_PULL_DONE + q, epoch, AGMM_WAIT_BARRIER, -1, q))
            break;
}

/* The test hook (agmm_gemm_plan_set_delay): the producer starts `delay_ns` late. */
__device__ __noinline__ void producer_delay(uint64_t delay_ns)
{
    const uint64_t t0 = agmm_globaltimer_ns();
    while (agmm_globaltimer_ns() - t0 < delay_ns)
        __nanosleep(1000);
}

template <int BM, int BN, int STAGES, int B_MN, int CL, int SK>
__device__ __forceinline__ void gemm_producer(const gemm_params &p, uint32_t sa, uint32_t sb, uint32_t bars,
                                              uint32_t epoch)
{
    constexpr uint32_t A_BYTES = smem_layout<BM, BN, STAGES>::a_bytes, B_BYTES = smem_layout<BM, BN, STAGES>::b_bytes;
    const int64_t ntiles = agmm_sched_num_tiles(&p.sched), nunits = num_units<SK>(p, ntiles);
    const int crank = (int)(blockIdx.x & (CL - 1));
    int stage = 0, waits_off = 0;
    uint32_t phase = 0;
    /* Pull mode: peers whose ready word this CTA has seen; slots whose A tile awaits its store. */
    uint64_t ready_seen = 0;
    uint32_t pending = 0;
    pull_store store[STAGES];
    if (p.pull)
        pull_acquire_maps(p);
    if (p.delay_ns)
        producer_delay(p.delay_ns);
    for (int64_t u = blockIdx.x; u < nunits; u += gridDim.x) {
        const unit_job uj = unit_of<SK>(p, u);
        agmm_tile t;
        agmm_sched_tile(&p.sched, uj.idx, &t);
        const int share = tiles_share_b<CL>(p, uj.idx, ntiles, t);
        /* Row coordinate and map come from the one tile record: the wait and the load can never
         * disagree about which rows they mean. */
        const int from_local = t.local && p.has_local;
        const CUtensorMap *map_a = from_local ? &p.map_a_local : p.pull ? p.peer_maps + t.src_rank : &p.map_a;
        const int a_row = (int)(from_local || p.pull ? t.shard_row0 : t.row0);
        if (p.pull && !from_local && !waits_off)
            waits_off = pull_wait_ready(p, t.src_rank, epoch, &ready_seen);
        else if (p.flags && !from_local && !waits_off)
            waits_off = wait_flag(p, p.flags + t.chunk, p.ready, AGMM_WAIT_CHUNK, t.chunk, t.src_rank);
        for (int kb = uj.kb0; kb < uj.kb1; kb++) {
            const uint32_t full = bars + 8 * stage, empty = bars + 8 * (STAGES + stage);
            /* Slot free: our consumers, and with a shared B the partner's too, are done with its
             * previous contents (our multicast is about to write the partner's copy). */
            mbar_wait_cluster(empty, phase ^ 1);
            if (pending >> stage & 1) { /* pull: the slot's A tile is stored before it is refilled */
                const pull_store &ps = store[stage];
                tma_store_3d(sa + stage * A_BYTES, &p.map_a, ps.c0, ps.row, ps.src);
                bulk_wait<1>();
                pending &= ~(1u << stage);
            }
            /* Every byte landing in this CTA's slot, ours and the partner's multicast alike. */
            mbar_arrive_expect_tx(full, A_BYTES + B_BYTES);
            tma_load_2d(sa + stage * A_BYTES, map_a, kb * GEMM_BK, a_row, full);
            if (p.pull && t.col0 == 0) {
                store[stage] = pull_store{kb * GEMM_BK, (int)t.shard_row0, t.src_rank, phase};
                pending |= 1u << stage;
            }
            const uint32_t b_dst = sb + stage * B_BYTES;
            if (CL == 2 && share) {
                /* Each CTA loads half of the shared B tile into both CTAs' slots. */
                if (B_MN) {
#pragma unroll
                    for (int j = 0; j < BN / 128; j++) {
                        const int box = crank * (BN / 128) + j;
                        tma_load_2d_mc(b_dst + box * 8192, &p.map_b, (int)t.col0 + 64 * box, kb * GEMM_BK, full, 3);
                    }
                } else {
                    tma_load_2d_mc(b_dst + crank * (BN / 2) * 128, &p.map_b_half, kb * GEMM_BK,
                                   (int)t.col0 + crank * (BN / 2), full, 3);
                }
            } else if (B_MN) {
#pragma unroll
                for (int j = 0; j < BN / 64; j++)
                    tma_load_2d(b_dst + j * 8192, &p.map_b, (int)t.col0 + 64 * j, kb * GEMM_BK, full);
            } else {
                tma_load_2d(b_dst, &p.map_b, kb * GEMM_BK, (int)t.col0, full);
            }
            if (++stage == STAGES) {
                stage = 0;
                phase ^= 1;
            }
        }
    }
    /* Pull: the tiles still in their slots, each once its load has landed; then every store is
     * complete before the CTA (and its shared memory) goes. */
    for (int s = 0; pending && s < STAGES; s++)
        if (pending >> s & 1) {
            mbar_wait(bars + 8 * s, store[s].parity);
            tma_store_3d(sa + s * A_BYTES, &p.map_a, store[s].c0, store[s].row, store[s].src);
        }
    if (p.pull)
        bulk_wait<0>();
    if (p.flags)
        reset_chunk_flags(p);
}

/* Split-tail fix-up of one consumer warp's part (slot = consumer * 4 + warp) of a split tile:
 * every piece stores its fp32 accumulators to the workspace, then counts itself in; the piece
 * that counts last sums all pieces in piece order (so the result does not depend on which
 * piece finished last) into acc and returns 1: it stores the rows. The others return 0.
 * Workspace: [sk][piece][slot][NACC/4][32 lanes] float4s; counter: one per (sk, slot), zero
 * between runs (the last piece resets it; nobody touches it again in this run). */
template <int NACC>
__device__ __forceinline__ int sk_fixup(const gemm_params &p, const tile_job &j, int slot, int lane, float (&acc)[NACC])
{
    constexpr size_t PART = (size_t)NACC * 32; /* floats of one warp's part */
    float *tile_ws = p.sk_ws + (size_t)j.sk * p.sk_split * 8 * PART + (size_t)slot * PART;
    float4 *mine = (float4 *)(tile_ws + (size_t)j.piece * 8 * PART);
#pragma unroll
    for (int i = 0; i < NACC / 4; i++)
        mine[i * 32 + lane] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
    /* Release: every lane's partials are visible GPU-wide before lane 0's count says so. */
    __threadfence();
    __syncwarp();
    uint32_t last = 0;
    if (lane == 0) {
        uint32_t *ctr = p.sk_ctr + (size_t)j.sk * 8 + slot;
        last = atomicAdd(ctr, 1u) == (uint32_t)p.sk_split - 1;
        if (last)
            *ctr = 0;
        /* Acquire: the other pieces' partials (fenced before their counts) before our reads. */
        __threadfence();
    }
    last = __shfl_sync(0xffffffffu, last, 0);
    __syncwarp();
    if (!last)
        return 0;
    for (int q = 0; q < p.sk_split; q++) {
        const float4 *src = (const float4 *)(tile_ws + (size_t)q * 8 * PART);
#pragma unroll
        for (int i = 0; i < NACC / 4; i++) {
            const float4 v = __ldcg(src + i * 32 + lane); /* L2: written by other SMs */
            acc[4 * i] = (q ? acc[4 * i] : 0.0f) + v.x;
            acc[4 * i + 1] = (q ? acc[4 * i + 1] : 0.0f) + v.y;
            acc[4 * i + 2] = (q ? acc[4 * i + 2] : 0.0f) + v.z;
            acc[4 * i + 3] = (q ? acc[4 * i + 3] : 0.0f) + v.w;
        }
    }
    return 1;
}

/* Consumer cw (0 or 1). WGN = 1: the two consumers split the tile's rows, each WM = BM/2 rows of
 * all BN columns; WGN = 2: they split its columns, each all BM rows of WN = BN/2 columns. A
 * consumer's rows are MB = WM/64 blocks of 64, one wgmma m64nWNk16 each per K step of 16. */
template <int BM, int BN, int STAGES, int WGN, int B_MN, int CL, int SK>
__device__ __forceinline__ void gemm_consumer(const gemm_params &p, int cw, uint32_t sa, uint32_t sb, uint32_t bars,
                                              uint8_t *ep)
{
    constexpr uint32_t A_BYTES = smem_layout<BM, BN, STAGES>::a_bytes, B_BYTES = smem_layout<BM, BN, STAGES>::b_bytes;
    constexpr int WM = WGN == 1 ? BM / 2 : BM, WN = BN / WGN, MB = WM / 64;
    const int64_t ntiles = agmm_sched_num_tiles(&p.sched), nunits = num_units<SK>(p, ntiles);
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int row_off = WGN == 1 ? cw * WM : 0, col_off = WGN == 2 ? cw * WN : 0;
    const uint32_t partner = (blockIdx.x & (CL - 1)) ^ 1;
    float acc[MB][WN / 2];
    int stage = 0;
    uint32_t phase = 0;
    int64_t u = blockIdx.x;
    tile_job cur = job_of<CL, SK>(p, u, nunits, ntiles), next;
    while (u < nunits) {
        const int64_t next_u = u + gridDim.x;
        int prev = -1;
        for (int kb = cur.kb0; kb < cur.kb1; kb++) {
            mbar_wait(bars + 8 * stage, phase); /* TMA has landed A and B of this K block */
            wgmma_fence();
            const uint32_t a0 = sa + stage * A_BYTES + row_off * 128;
            const uint32_t b0 = sb + stage * B_BYTES + (B_MN ? col_off / 64 * 8192 : col_off * 128);
#pragma unroll
            for (int kk = 0; kk < GEMM_BK / 16; kk++) {
                const uint64_t db = B_MN ? sw128_desc(b0 + kk * 16 * 128, 8192, 1024) : sw128_desc(b0 + kk * 32, 16, 1024);
#pragma unroll
                for (int mb = 0; mb < MB; mb++)
                    wgmma_tile<WN, B_MN>(acc[mb], sw128_desc(a0 + mb * 64 * 128 + kk * 32, 16, 1024), db,
                                         (uint32_t)((kb - cur.kb0) | kk) != 0);
            }
            wgmma_commit();
            /* The next unit's schedule arithmetic (64-bit divisions) runs while the tensor
             * cores work, instead of in the gap between units. */
            if (kb == cur.kb0)
                next = job_of<CL, SK>(p, next_u, nunits, ntiles);
            /* Keep this K block's MMAs in flight; the previous block's are done after
             * wait_group 1, so its slot can go back to the producer(s). */
            if (prev >= 0) {
                wgmma_wait<1>();
                if (lane == 0)
                    release_slot<STAGES, CL>(bars, prev, cur.share, partner);
            }
            prev = stage;
            if (++stage == STAGES) {
                stage = 0;
                phase ^= 1;
            }
        }
        wgmma_wait<0>();
#pragma unroll
        for (int mb = 0; mb < MB; mb++)
            acc_fence(acc[mb]);
        if (lane == 0)
            release_slot<STAGES, CL>(bars, prev, cur.share, partner);
        if (SK && cur.sk >= 0 &&
            !sk_fixup<MB * WN / 2>(p, cur, cw * 4 + warp, lane, reinterpret_cast<float(&)[MB * WN / 2]>(acc))) {
            cur = next; /* another piece of this tile stores it */
            u = next_u;
            continue;
        }

        /* Epilogue, 64 columns at a time through this warp's staging rows: wgmma's fragment
         * gives this thread rows r, r+8 (r = lane/4 of the warp's 16) and columns 8j + 2(lane%4),
         * +1; written to smem (row stride 144 B: the 8 rows x 4 lanes of a store hit 32 banks),
         * read back as 16-byte row pieces and stored so that each warp store covers 4 whole
         * 128-byte lines of C (direct fragment stores covered 8 half sectors). Clipped to the
         * tile: a short tile's next rows belong to another chunk, maybe computed right now. */
        const int64_t n = p.n;
        const int vec_ok = (n & 7) == 0; /* 16-byte aligned row pieces */
#pragma unroll
        for (int mb = 0; mb < MB; mb++) {
            const int row_w = row_off + mb * 64 + warp * 16;
            uint16_t *cbase = p.c + (cur.row0 + row_w) * n + cur.col0;
#pragma unroll
            for (int ch = 0; ch < WN / 64; ch++) {
#pragma unroll
                for (int jj = 0; jj < 8; jj++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int j = ch * 8 + jj;
                        __nv_bfloat162 v = __floats2bfloat162_rn(acc[mb][4 * j + 2 * h], acc[mb][4 * j + 2 * h + 1]);
                        *(__nv_bfloat162 *)(ep + (lane / 4 + 8 * h) * EP_ROW_BYTES + (jj * 8 + (lane % 4) * 2) * 2) = v;
                    }
                }
                __syncwarp();
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int r = lane / 8 + 4 * i, c = (lane % 8) * 8;
                    const uint4 v = *(const uint4 *)(ep + r * EP_ROW_BYTES + c * 2);
                    const int tcol = col_off + ch * 64 + c;
                    if (row_w + r < cur.rows && tcol < cur.cols) {
                        uint16_t *dst = cbase + (int64_t)r * n + tcol;
                        if (vec_ok && tcol + 8 <= cur.cols) {
                            *(uint4 *)dst = v;
                        } else {
                            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                            for (int q = 0; q < 8; q++)
                                if (tcol + q < cur.cols)
                                    dst[q] = (uint16_t)(w[q / 2] >> (16 * (q & 1)));
                        }
                    }
                }
                __syncwarp(); /* the staging rows are rewritten by the next 64 columns */
            }
        }
        cur = next;
        u = next_u;
    }
}

template <int BM, int BN, int STAGES, int WGN, int B_MN, int CL, int SK>
__global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_ws_kernel(const __grid_constant__ gemm_params p)
{
    static_assert(CL == 1 || (BM == 128 && WGN == 1 && BN % 128 == 0 && !SK), "B multicast pairs: 128-row tiles");
    static_assert(BM / (3 - WGN) % 64 == 0 && BN / WGN % 64 == 0, "consumers own whole 64 x 64 blocks");
    using L = smem_layout<BM, BN, STAGES>;
    extern __shared__ uint8_t smem_raw[];
    /* 128B-swizzled tiles must start on 1024-byte boundaries (swizzle phase 0). The offset is
     * the same in both CTAs of a cluster, which multicast relies on. */
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sa = base + L::a_ring, sb = base + L::b_ring, bars = base + L::bars;
    const int wg = threadIdx.x / 128;
    const int pull_ranks = p.pull && p.sched.nranks > 1; /* the epoch, ready word and closing barrier */
    __shared__ uint32_t run_epoch;                         /* pull: this run's epoch, for every role */

    if (threadIdx.x == 32) /* another warp than the barriers' set-up, so the load overlaps it */
        run_epoch = pull_ranks ? pull_run_epoch(p) : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(bars + 8 * s, 1);
            mbar_init(bars + 8 * (STAGES + s), 8 * 2); /* 8 consumer warps, 2 arrivals each per use */
        }
        /* mbarrier.init is a generic-proxy write that TMA's complete_tx (async proxy) and the
         * partner CTA's remote arrivals update: make it visible cluster-wide. */
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(&p.map_a) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(&p.map_b) : "memory");
        if (CL == 2 && !B_MN)
            asm volatile("prefetch.tensormap [%0];" ::"l"(&p.map_b_half) : "memory");
        if (p.has_local)
            asm volatile("prefetch.tensormap [%0];" ::"l"(&p.map_a_local) : "memory");
    }
    /* Barriers initialised in both CTAs before either multicasts or arrives remotely. */
    if (CL == 2)
        cluster_sync();
    else
        __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        if (threadIdx.x == 0)
            gemm_producer<BM, BN, STAGES, B_MN, CL, SK>(p, sa, sb, bars, run_epoch);
        else if (threadIdx.x == 32 && pull_ranks)
            pull_raise_ready(p, run_epoch);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
        /* This warp's epilogue staging rows. */
        const int cwarp = (threadIdx.x - 128) / 32;
        uint8_t *ep = smem_raw + (base + L::epilogue - smem_u32(smem_raw)) + cwarp * EP_WARP_BYTES;
        gemm_consumer<BM, BN, STAGES, WGN, B_MN, CL, SK>(p, wg - 1, sa, sb, bars, ep);
    }
    /* No CTA leaves while its partner may still arrive on its barriers. */
    if (CL == 2) {
        __syncwarp();
        cluster_sync();
    }
    if (pull_ranks)
        pull_close(p, run_epoch);
}

/* One map slot's contents (pull mode), carried as a kernel parameter: 8 KB at AGMM_MAX_RANKS,
 * within the 32 KB that sm_70 and later accept. */
struct map_set {
    CUtensorMap map[AGMM_MAX_RANKS];
};

/* Grid 1 x 256: stores the first n maps of `maps` into a map slot. From a parameter, not a copy
 * from host memory: a fill captured in a CUDA graph replays these bytes, whatever the host has
 * encoded since. */
__global__ void fill_map_slot_kernel(CUtensorMap *slot, int n, const __grid_constant__ map_set maps)
{
    const uint4 *src = (const uint4 *)maps.map;
    uint4 *dst = (uint4 *)slot;
    for (int i = (int)threadIdx.x; i < n * (int)(sizeof(CUtensorMap) / sizeof(uint4)); i += (int)blockDim.x)
        dst[i] = src[i];
}

/* ---- host side: policy, descriptors, launch ------------------------------------------------ */

/* The policy table, one row per entry of AGMM_GEMM_CONFIGS (gemm_configs.h, which documents the
 * fields), with the config's shared-memory size and its kernel for each B layout. */
typedef struct {
    int bm, bn, stages, wgn, cluster, sk;
    int pick;
    double eff;
    const char *name;
    size_t smem_bytes;
    const void *kernel[2]; /* [0]: B column-major, [1]: B row-major */
} tile_config;

#define CONFIG_ROW(bm, bn, st, wgn, cl, sk, pick, eff, name)                                               \
    {bm, bn, st, wgn, cl, sk, pick, eff, name, smem_layout<bm, bn, st>::total,                               \
     {(const void *)gemm_ws_kernel<bm, bn, st, wgn, 0, cl, sk>, (const void *)gemm_ws_kernel<bm, bn, st, wgn, 1, cl, sk>}},
static const tile_config k_configs[] = {AGMM_GEMM_CONFIGS(CONFIG_ROW)};
#undef CONFIG_ROW
#define NUM_CONFIGS ((int)(sizeof k_configs / sizeof k_configs[0]))
#define GROUP_M 8          /* row tiles per L2 group (even: cluster pairs share columns) */
#define K_OVERHEAD 192     /* per-tile fixed cost (pipeline fill, epilogue) in units of K */

extern "C" int agmm_gemm_num_configs(void)
{
    return NUM_CONFIGS;
}

extern "C" const char *agmm_gemm_config_name(int config)
{
    return config >= 0 && config < NUM_CONFIGS ? k_configs[config].name : "?";
}

static void sched_fill(agmm_sched *s, const agmm_gemm_desc *d, const tile_config *tc)
{
    memset(s, 0, sizeof *s);
    s->m = d->m;
    s->n = d->n;
    s->nranks = d->nranks;
    s->rank = d->rank;
    s->splits = d->splits;
    s->bm = tc->bm;
    s->bn = tc->bn;
    s->group_m = GROUP_M;
    agmm_sched_init(s);
}

/* Waves times the cost of one tile: the config that finishes the last wave first. Ties go to
 * the earlier (larger) tile: fewer operand bytes through L2. */
static int model_config(const agmm_gemm_desc *d, int ctas)
{
    int best = -1;
    double best_cost = 0;
    for (int c = 0; c < NUM_CONFIGS; c++) {
        const tile_config *tc = &k_configs[c];
        if (!tc->pick || (tc->cluster == 2 && ctas < 2))
            continue;
        agmm_sched s;
        sched_fill(&s, d, tc);
        const int64_t tiles = agmm_sched_num_tiles(&s);
        const int64_t waves = (tiles + ctas - 1) / ctas;
        const double cost = (double)waves * (tc->bm / 128.0) * tc->bn * (double)(d->k + K_OVERHEAD) / tc->eff;
        if (best < 0 || cost < best_cost * 0.98) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

/* The measured table (gemm_configs.h): the config of the nearest measured shape, where one lies
 * within MEASURED_RADIUS (summed |log2| distance of rows, n and k) and the plan has the whole
 * GPU, as when it was measured, or all but the one SM that fused leaves free for its signalling
 * kernels. -1: none applies. */
#define MEASURED_RADIUS 0.3
typedef struct {
    double rows, n, k;
    const char *name;
} measured_row;
#define MEASURED_ROW(rows, n, k, name) {rows, n, k, name},
static const measured_row k_measured[] = {AGMM_GEMM_MEASURED(MEASURED_ROW){0, 0, 0, NULL}};
#undef MEASURED_ROW

static int measured_config(const agmm_gemm_desc *d, int ctas, int sms)
{
    if (ctas < sms - 1)
        return -1;
    const double rows = (double)(d->nranks * d->m), n = (double)d->n, k = (double)d->k;
    const measured_row *best = NULL;
    double best_dist = MEASURED_RADIUS;
    for (const measured_row *r = k_measured; r->name; r++) {
        const double dist = fabs(log2(rows / r->rows)) + fabs(log2(n / r->n)) + fabs(log2(k / r->k));
        if (dist <= best_dist) {
            best = r;
            best_dist = dist;
        }
    }
    for (int c = 0; best && c < NUM_CONFIGS; c++)
        if (!strcmp(k_configs[c].name, best->name))
            return c;
    return -1;
}

/* Split-tail configs: which tiles of the last waves to cut into how many K pieces. Cutting the
 * last r + j*ctas tiles (r = tiles % ctas, j = 0 or 1) into s pieces turns j + 1 rounds of whole
 * tiles into ceil((r + j*ctas) * s / ctas) rounds of ceil(KB/s) K blocks, plus the fix-up (the
 * last piece writes its partials and reads all s back: modelled as 1 + s K blocks, unmeasured).
 * The best gain wins; none: *first = tiles (no split). */
static void plan_split_tail(int64_t tiles, int ctas, int k_blocks, int64_t *first, int *split)
{
    *first = tiles;
    *split = 1;
    const int64_t r = tiles % ctas;
    double best_gain = 0;
    for (int j = 0; j <= 1 && r; j++) {
        const int64_t sk_tiles = r + (int64_t)j * ctas;
        if (sk_tiles > tiles)
            break;
        for (int s = 2; s <= 16 && s <= k_blocks; s++) {
            const int64_t rounds = (sk_tiles * s + ctas - 1) / ctas;
            const double gain = (double)(j + 1) * k_blocks - (double)rounds * ((k_blocks + s - 1) / s + 1 + s);
            if (gain > best_gain) {
                best_gain = gain;
                *first = tiles - sk_tiles;
                *split = s;
            }
        }
    }
}

struct agmm_gemm_plan {
    agmm_gemm_desc desc; /* pointers as last set */
    gemm_params params;  /* maps of the current pointers; ready filled per run */
    PFN_cuTensorMapEncodeTiled_v12000 encode;
    const void *kernel;
    int config, ctas;
    int64_t tiles;
    size_t smem_bytes;
    void *sk_ws; /* split-tail workspace: partials, then counters (one allocation) */
    /* Pull mode (agmm_gemm_plan_set_peers): one device allocation of AGMM_GEMM_MAP_SLOTS sets of
     * nranks maps, then the closing barrier's CTA counter and the epoch word. Per slot: the shard
     * pointers its maps are made from (slot_ptr[s][0] == NULL: empty), the use that last chose
     * it (the least recently used is refilled first), whether a stream capture chose it (then a
     * graph refers to it: never refilled with other maps), whether work outside a capture has
     * filled it, and else which capture did (only that graph's replays write it). `fill`: the
     * encoding of a slot's maps. */
    void *pull_dev;
    const void *slot_ptr[AGMM_GEMM_MAP_SLOTS][AGMM_MAX_RANKS];
    uint64_t slot_used[AGMM_GEMM_MAP_SLOTS], uses;
    int slot_pinned[AGMM_GEMM_MAP_SLOTS], slot_filled[AGMM_GEMM_MAP_SLOTS];
    unsigned long long slot_capture[AGMM_GEMM_MAP_SLOTS];
    map_set fill;
    char name[128];
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* A row-major bf16 matrix [outer][inner] as a 2-D map (rank 2) with a {box_inner, box_outer}
 * box, 128B swizzle (box_inner = 64 elements = 128 bytes), zero fill out of bounds. Rank 3:
 * `blocks` such matrices one after another, with a box of one block: the pull mode's store map,
 * whose rows past a block's end are clipped instead of spilling into the next. */
static agmm_status encode_tiled(agmm_gemm_plan *pl, CUtensorMap *map, const void *ptr, cuuint32_t rank, uint64_t inner,
                                uint64_t outer, uint64_t blocks, uint32_t box_inner, uint32_t box_outer,
                                const char *what, char *err, size_t errlen)
{
    cuuint64_t dims[3] = {inner, outer, blocks};
    cuuint64_t strides[2] = {inner * 2, inner * outer * 2};
    cuuint32_t box[3] = {box_inner, box_outer, 1};
    cuuint32_t estr[3] = {1, 1, 1};
    CUresult r = pl->encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, (void *)ptr, dims, strides, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        set_err(err, errlen, "cuTensorMapEncodeTiled(%s: %llu x %llu x %llu, box %u x %u) failed: CUresult %d", what,
                (unsigned long long)blocks, (unsigned long long)outer, (unsigned long long)inner, box_outer, box_inner,
                (int)r);
        return AGMM_ERR_CUDA;
    }
    return AGMM_SUCCESS;
}

static agmm_status encode_2d(agmm_gemm_plan *pl, CUtensorMap *map, const void *ptr, uint64_t inner, uint64_t outer,
                             uint32_t box_inner, uint32_t box_outer, const char *what, char *err, size_t errlen)
{
    return encode_tiled(pl, map, ptr, 2, inner, outer, 1, box_inner, box_outer, what, err, errlen);
}

static int misaligned(const void *p)
{
    return ((uintptr_t)p & 15u) != 0;
}

static void launch_config(const agmm_gemm_plan *pl, cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int ctas,
                          cudaStream_t stream)
{
    *cfg = cudaLaunchConfig_t{};
    *attr = cudaLaunchAttribute{};
    cfg->gridDim = dim3((unsigned)ctas);
    cfg->blockDim = dim3(GEMM_THREADS);
    cfg->dynamicSmemBytes = pl->smem_bytes;
    cfg->stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = (unsigned)k_configs[pl->config].cluster;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg->attrs = attr;
    cfg->numAttrs = 1;
}

extern "C" agmm_status agmm_gemm_plan_set_ptrs(agmm_gemm_plan *pl, const void *a, const void *a_local, const void *b,
                                               void *c, char *err, size_t errlen)
{
    agmm_gemm_desc *d = &pl->desc;
    gemm_params *p = &pl->params;
    const int bm = k_configs[pl->config].bm, bn = k_configs[pl->config].bn;
    agmm_status st = AGMM_SUCCESS;
    if (misaligned(a) || misaligned(a_local) || misaligned(b) || misaligned(c)) {
        set_err(err, errlen, "gemm operands must be 16-byte aligned for TMA");
        return AGMM_ERR_INVALID_ARG;
    }
    if (a && a != d->a) {
        /* Pull mode stores to the gathered A, one shard's block at a time. */
        st = d->pull ? encode_tiled(pl, &p->map_a, a, 3, (uint64_t)d->k, (uint64_t)d->m, (uint64_t)d->nranks, GEMM_BK,
                                    (uint32_t)bm, "gathered A (store)", err, errlen)
                     : encode_2d(pl, &p->map_a, a, (uint64_t)d->k, (uint64_t)(d->nranks * d->m), GEMM_BK, (uint32_t)bm,
                                 "A", err, errlen);
        if (st)
            return st;
        d->a = a;
    }
    if (a_local && a_local != d->a_local) {
        st = encode_2d(pl, &p->map_a_local, a_local, (uint64_t)d->k, (uint64_t)d->m, GEMM_BK, (uint32_t)bm, "A shard", err,
                       errlen);
        if (st)
            return st;
        d->a_local = a_local;
        p->has_local = 1;
    }
    if (b && b != d->b) {
        if (d->b_layout == AGMM_LAYOUT_COL_MAJOR) { /* B^T: n rows of k */
            st = encode_2d(pl, &p->map_b, b, (uint64_t)d->k, (uint64_t)d->n, GEMM_BK, (uint32_t)bn, "B^T", err, errlen);
            if (!st && k_configs[pl->config].cluster == 2)
                st = encode_2d(pl, &p->map_b_half, b, (uint64_t)d->k, (uint64_t)d->n, GEMM_BK, (uint32_t)bn / 2,
                               "B^T half", err, errlen);
        }
        else /* B: k rows of n, loaded in 64 x 64 boxes (128 B of n per box row) */
            st = encode_2d(pl, &p->map_b, b, (uint64_t)d->n, (uint64_t)d->k, 64, GEMM_BK, "B", err, errlen);
        if (st)
            return st;
        d->b = b;
    }
    if (c) {
        d->c = c;
        p->c = (uint16_t *)c;
    }
    return AGMM_SUCCESS;
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

extern "C" agmm_status agmm_gemm_plan_set_peers(agmm_gemm_plan *pl, const void *const *peers, cudaStream_t stream,
                                                char *err, size_t errlen)
{
    const agmm_gemm_desc *d = &pl->desc;
    if (!d->pull) {
        set_err(err, errlen, "gemm: peers' shards are for a plan in pull mode");
        return AGMM_ERR_INVALID_ARG;
    }
    for (int r = 0; r < d->nranks; r++)
        if (!peers[r] || misaligned(peers[r])) {
            set_err(err, errlen, "gemm: rank %d's shard %p must be a 16-byte aligned pointer", r, peers[r]);
            return AGMM_ERR_INVALID_ARG;
        }
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    unsigned long long capture = 0;
    cudaError_t ce = cudaStreamGetCaptureInfo(stream, &cap, &capture);
    if (ce != cudaSuccess) {
        set_err(err, errlen, "gemm: cudaStreamGetCaptureInfo: %s", cudaGetErrorString(ce));
        return AGMM_ERR_CUDA;
    }
    const int capturing = cap != cudaStreamCaptureStatusNone;
    int s = slot_find(pl, peers);
    const int fresh = s < 0;
    if (fresh && (s = slot_victim(pl)) < 0) {
        set_err(err, errlen, "gemm: pull mode keeps the maps of %d distinct shard sets, and CUDA graphs captured "
                "from this plan hold all of them: capture more inputs with another plan", AGMM_GEMM_MAP_SLOTS);
        return AGMM_ERR_UNSUPPORTED;
    }
    /* A slot filled only inside a capture holds its maps only once that graph has run: work
     * outside the graph fills it again (the same bytes). */
    if (fresh || !(pl->slot_filled[s] || (capturing && pl->slot_capture[s] == capture))) {
        for (int r = 0; r < d->nranks; r++) {
            agmm_status st = encode_2d(pl, &pl->fill.map[r], peers[r], (uint64_t)d->k, (uint64_t)d->m, GEMM_BK,
                                       (uint32_t)k_configs[pl->config].bm, "a peer's shard", err, errlen);
            if (st)
                return st;
        }
        /* Stream order puts the fill after the runs before (the caller orders its runs), so no
         * run still reads the slot's old maps; the runs after find the new ones. */
        CUtensorMap *slot = (CUtensorMap *)pl->pull_dev + (size_t)s * d->nranks;
        fill_map_slot_kernel<<<1, 256, 0, stream>>>(slot, d->nranks, pl->fill);
        ce = cudaGetLastError();
        if (ce != cudaSuccess) {
            set_err(err, errlen, "gemm: the fill of the peers' maps: %s", cudaGetErrorString(ce));
            return AGMM_ERR_CUDA;
        }
        memcpy(pl->slot_ptr[s], peers, (size_t)d->nranks * sizeof *peers);
        pl->slot_filled[s] = !capturing;
        pl->slot_capture[s] = capturing ? capture : 0;
    }
    pl->slot_pinned[s] |= capturing;
    pl->slot_used[s] = ++pl->uses;
    pl->params.peer_maps = (const CUtensorMap *)pl->pull_dev + (size_t)s * d->nranks;
    return AGMM_SUCCESS;
}

extern "C" void agmm_gemm_plan_set_delay(agmm_gemm_plan *pl, uint64_t delay_ns)
{
    pl->params.delay_ns = delay_ns;
}

/* Pull mode's device memory (pull_dev: the map slots, the counter, the epoch word), at plan
 * creation. */
static agmm_status pull_create(agmm_gemm_plan *pl, const agmm_gemm_desc *d, char *err, size_t errlen)
{
    const size_t maps = (size_t)AGMM_GEMM_MAP_SLOTS * d->nranks * sizeof(CUtensorMap);
    cudaError_t ce = cudaMalloc(&pl->pull_dev, maps + 2 * sizeof(uint32_t));
    if (ce == cudaSuccess)
        ce = cudaMemset((char *)pl->pull_dev + maps, 0, 2 * sizeof(uint32_t));
    if (ce != cudaSuccess) {
        set_err(err, errlen, "gemm: pull mode's maps and counters: %s", cudaGetErrorString(ce));
        return AGMM_ERR_CUDA;
    }
    gemm_params *p = &pl->params;
    p->pull = 1;
    p->close_ctr = (uint32_t *)((char *)pl->pull_dev + maps);
    p->epoch = p->close_ctr + 1;
    p->signals = d->signals;
    return AGMM_SUCCESS;
}

extern "C" agmm_status agmm_gemm_plan_create(agmm_gemm_plan **out, const agmm_gemm_desc *desc, char *err, size_t errlen)
{
    *out = NULL;
    const agmm_gemm_desc *d = desc;
    if (d->m < 1 || d->n < 1 || d->nranks < 1 || d->rank < 0 || d->rank >= d->nranks || d->splits < 1 ||
        d->splits > d->m) {
        set_err(err, errlen, "gemm: bad shape m=%lld n=%lld nranks=%d rank=%d splits=%d", (long long)d->m,
                (long long)d->n, d->nranks, d->rank, d->splits);
        return AGMM_ERR_INVALID_ARG;
    }
    if (d->k < 8 || d->k % 8 != 0) {
        set_err(err, errlen, "K=%lld is not a positive multiple of 8: rows of A must be 16-byte aligned for TMA",
                (long long)d->k);
        return AGMM_ERR_INVALID_ARG;
    }
    if (d->b_layout == AGMM_LAYOUT_ROW_MAJOR && d->n % 8 != 0) {
        set_err(err, errlen, "N=%lld: a row-major B needs N %% 8 == 0 (16-byte rows for TMA)", (long long)d->n);
        return AGMM_ERR_UNSUPPORTED;
    }
    if (d->nranks * d->m > INT32_MAX || d->n > INT32_MAX || d->k > INT32_MAX) {
        set_err(err, errlen, "gemm: dimensions past 2^31 are not supported");
        return AGMM_ERR_UNSUPPORTED;
    }
    if (d->chunk_flags && !d->dev_error) {
        set_err(err, errlen, "gemm: chunk_flags need a dev_error record for the bounded wait");
        return AGMM_ERR_INVALID_ARG;
    }
    if (d->pull && (d->chunk_flags || d->nranks > AGMM_MAX_RANKS ||
                    (d->nranks > 1 && (!d->signals || !d->dev_error)))) {
        set_err(err, errlen, "gemm: pull mode takes no chunk flags, at most %d ranks, and with several ranks the "
                "signal table and a dev_error record", AGMM_MAX_RANKS);
        return AGMM_ERR_INVALID_ARG;
    }
    if (d->config >= NUM_CONFIGS) {
        set_err(err, errlen, "gemm: config %d out of range (%d configs)", d->config, NUM_CONFIGS);
        return AGMM_ERR_INVALID_ARG;
    }

    int dev = 0, sms = 0, major = 0;
    cudaError_t ce = cudaGetDevice(&dev);
    if (ce == cudaSuccess)
        ce = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (ce == cudaSuccess)
        ce = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (ce != cudaSuccess) {
        set_err(err, errlen, "gemm: device query: %s", cudaGetErrorString(ce));
        return AGMM_ERR_CUDA;
    }
    if (major != 9) {
        set_err(err, errlen, "gemm: the engine needs an sm_90 GPU (this one is sm_%d)", major * 10);
        return AGMM_ERR_UNSUPPORTED;
    }

    agmm_gemm_plan *pl = (agmm_gemm_plan *)calloc(1, sizeof *pl);
    if (!pl) {
        set_err(err, errlen, "gemm: out of host memory");
        return AGMM_ERR_NO_MEMORY;
    }
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    ce = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (ce != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
        set_err(err, errlen, "gemm: cuTensorMapEncodeTiled not found in the driver");
        free(pl);
        return AGMM_ERR_CUDA;
    }
    pl->encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;

    int budget = d->max_ctas > 0 && d->max_ctas < sms ? d->max_ctas : sms;
    pl->config = d->config;
    if (pl->config < 0)
        pl->config = measured_config(d, budget, sms);
    if (pl->config < 0)
        pl->config = model_config(d, budget);
    const tile_config *tc = &k_configs[pl->config];
    agmm_status st = AGMM_ERR_CUDA;
    if (tc->cluster == 2 && budget < 2) {
        set_err(err, errlen, "gemm: config %s needs at least 2 CTAs (max_ctas=%d)", tc->name, d->max_ctas);
        st = AGMM_ERR_INVALID_ARG;
        goto fail;
    }
    {
        const int b_mn = d->b_layout == AGMM_LAYOUT_ROW_MAJOR;
        pl->kernel = tc->kernel[b_mn];
        pl->smem_bytes = tc->smem_bytes;
        ce = cudaFuncSetAttribute(pl->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl->smem_bytes);
        if (ce != cudaSuccess) {
            set_err(err, errlen, "gemm: cudaFuncSetAttribute(smem %zu): %s", pl->smem_bytes, cudaGetErrorString(ce));
            goto fail;
        }

        pl->desc = *d;
        pl->desc.a = pl->desc.a_local = pl->desc.b = NULL;
        pl->desc.c = NULL;
        if (d->pull) {
            st = pull_create(pl, d, err, errlen);
            if (st)
                goto fail;
            st = AGMM_ERR_CUDA;
        }
        gemm_params *p = &pl->params;
        sched_fill(&p->sched, d, tc);
        pl->tiles = agmm_sched_num_tiles(&p->sched);
        p->n = d->n;
        p->k_blocks = (int)((d->k + GEMM_BK - 1) / GEMM_BK);
        p->flags = d->chunk_flags;
        p->err = d->dev_error;
        p->timeout_ns = d->timeout_ns ? d->timeout_ns : 5000000000ull;
        p->sk_first = pl->tiles;
        p->sk_split = 1;
        int64_t units = pl->tiles;
        char split[48] = "";
        if (tc->sk) {
            plan_split_tail(pl->tiles, budget, p->k_blocks, &p->sk_first, &p->sk_split);
            const int64_t sk_tiles = pl->tiles - p->sk_first;
            units = p->sk_first + sk_tiles * p->sk_split;
            if (sk_tiles) {
                /* One allocation: fp32 partials of every piece, then 8 counters per split tile. */
                const size_t ws_bytes = (size_t)sk_tiles * p->sk_split * tc->bm * tc->bn * 4;
                ce = cudaMalloc(&pl->sk_ws, ws_bytes + (size_t)sk_tiles * 8 * 4);
                if (ce == cudaSuccess)
                    ce = cudaMemset((char *)pl->sk_ws + ws_bytes, 0, (size_t)sk_tiles * 8 * 4);
                if (ce != cudaSuccess) {
                    set_err(err, errlen, "gemm: split-tail workspace (%zu bytes): %s", ws_bytes, cudaGetErrorString(ce));
                    goto fail;
                }
                p->sk_ws = (float *)pl->sk_ws;
                p->sk_ctr = (uint32_t *)((char *)pl->sk_ws + ws_bytes);
            }
            snprintf(split, sizeof split, " split=%lldx%d", (long long)sk_tiles, p->sk_split);
        }
        pl->ctas = (int)(units < budget ? units : budget);
        if (tc->cluster == 2) {
            /* Pairs: an even grid, no more pairs than can be resident at once (a persistent CTA
             * that waits for a free SM would only add a tail). */
            int max_clusters = 0;
            cudaLaunchConfig_t cfg;
            cudaLaunchAttribute attr;
            launch_config(pl, &cfg, &attr, budget & ~1, 0);
            ce = cudaOccupancyMaxActiveClusters(&max_clusters, pl->kernel, &cfg);
            if (ce != cudaSuccess || max_clusters < 1) {
                set_err(err, errlen, "gemm: cudaOccupancyMaxActiveClusters: %s (%d)", cudaGetErrorString(ce),
                        max_clusters);
                goto fail;
            }
            pl->ctas = (int)((pl->tiles + 1) & ~1LL);
            if (pl->ctas > (budget & ~1))
                pl->ctas = budget & ~1;
            if (pl->ctas > 2 * max_clusters)
                pl->ctas = 2 * max_clusters;
        }
        st = agmm_gemm_plan_set_ptrs(pl, d->a, d->a_local, d->b, d->c, err, errlen);
        if (st)
            goto fail;
        snprintf(pl->name, sizeof pl->name, "%s%s ctas=%d tiles=%lld%s%s", tc->name, b_mn ? " B-row" : "", pl->ctas,
                 (long long)pl->tiles, split, d->pull ? " pull" : "");
    }
    *out = pl;
    return AGMM_SUCCESS;
fail:
    agmm_gemm_plan_destroy(pl);
    return st;
}

extern "C" agmm_status agmm_gemm_run(agmm_gemm_plan *pl, uint32_t ready, cudaStream_t stream)
{
    if (!pl->desc.a || !pl->desc.b || !pl->desc.c || (pl->desc.pull && !pl->params.peer_maps))
        return AGMM_ERR_INVALID_ARG;
    pl->params.ready = ready;
    void *args[] = {&pl->params};
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    launch_config(pl, &cfg, &attr, pl->ctas, stream);
    cudaError_t ce = cudaLaunchKernelExC(&cfg, pl->kernel, args);
    if (ce == cudaSuccess)
        ce = cudaGetLastError();
    return ce == cudaSuccess ? AGMM_SUCCESS : AGMM_ERR_CUDA;
}

extern "C" void agmm_gemm_plan_destroy(agmm_gemm_plan *pl)
{
    if (!pl)
        return;
    cudaFree(pl->sk_ws);
    cudaFree(pl->pull_dev);
    free(pl);
}

extern "C" const char *agmm_gemm_plan_describe(const agmm_gemm_plan *pl)
{
    return pl ? pl->name : "(null)";
}
