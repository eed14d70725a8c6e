/* Where a tile's A comes from: the one place the engine's modes differ (device code only). A
 * source is a compile-time policy, a type the kernel is instantiated with; each has its own
 * member of the parameter block's union (params.h). Two here, the third (pull's peer shards) in
 * a_peers.cuh.
 *
 * A source provides, for the kernel skeleton (kernel.cuh), with `word` a value thread 32 reads
 * before the roles start and every role of the CTA is handed (pull's run epoch; 0 elsewhere):
 *   cta_word(p)            thread 32, before the CTA's first barrier
 *   prefetch(p)            thread 0: its tensor maps into the cache
 *   side_thread(p, word)   thread 32 after the barrier (idle in the producer warpgroup)
 *   copy_local(p, t)       threads 64-127 (t = 0..63): chunks copies the shard into the gathered
 *                          A here when the plan asks (copy_local); pull stores its gathered A
 *                          from the ring instead. Not plain: any code there moves the plain
 *                          producer's loop state out of the uniform datapath (10 more
 *                          instructions per K block), and a plain GEMM copies nothing
 *   cta_end(p, word)       every thread, last
 * and for the producer thread a state type `producer`, made with (p, word, notes), whose calls
 * frame the producer's loop (producer.cuh); `notes` is an array of the source's `slot_note`, one
 * per ring slot, that the producer keeps for it (pull: the A tile a slot still has to store). It is
 * a separate local, not a member, so that the compiler keeps the state's scalars in registers
 * while the dynamically indexed notes live in local memory:
 *   start()                before the first unit
 *   tile(job)              before a unit's first load: its waits, then the map and row of A
 *   before_refill(r, s)    slot s is free again and about to be refilled
 *   after_load(pos, kb, j) A of K block kb went into slot pos.stage
 *   finish(r)              after the last unit
 *
 * plain   A from the gathered A (a plain GEMM's A); a tile of this rank's own rows reads the shard
 *         instead when the plan has one (same box and swizzle). No waits.
 * chunks  (the `fused` backend) as plain, and a tile that reads the gathered A first waits for
 *         its chunk's flag. Chunk flags: one uint32 per chunk. Writer: whoever fills the chunk in
 *         the gathered A (a copy engine's stream write, a peer), after the data. Waiter: the
 *         producer thread, once per tile that reads the gathered A, before that tile's first A
 *         load: the bounded wait (bounded_wait.cuh) for flag - ready >= 0, then
 *         fence.proxy.async.global because the data was written through the generic proxy and
 *         TMA reads through the async one. Reset: by the kernel, at the end of the run
 *         (reset_chunk_flags): every producer counts itself out after its last wait, and the last
 *         one stores 0 to every flag and to the count, so a writer can raise a constant (the same
 *         value at every CUDA-graph replay). Bounded: an expired wait is recorded in dev_error
 *         (first writer wins) and this CTA, and every CTA that later sees the record, stops
 *         waiting; the kernel then finishes, so a dead peer is an error, never a hang. The map and
 *         the row come from the one tile record, so the wait and the load cannot disagree. */
#ifndef AGMM_KERNELS_GEMM_A_SOURCE_CUH
#define AGMM_KERNELS_GEMM_A_SOURCE_CUH

#include <stdint.h>

#include "kernels/bounded_wait.cuh"
#include "kernels/copy_vecs.cuh"
#include "kernels/gemm/params.h"
#include "kernels/gemm/ring.cuh"
#include "kernels/gemm/tile_sched.cuh"

/* A unit's A: the map to load through and the row coordinate of its first row. */
struct a_tile {
    const CUtensorMap *map;
    int row;
};

__device__ __forceinline__ void prefetch_map(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

/* The engine's bounded wait for a flag to reach `target` (a chunk flag, a peer's ready word or
 * done slot); `wait`, `chunk` and `peer` name it in the error record. Returns 1 when waits are off
 * from now on: this wait expired, or another CTA's already did (its record is set). Out of line:
 * the producer runs in 56 registers. The error record is host-mapped memory, so it is looked at
 * every 64 polls, not on each: with every producer of 8 emulated ranks reading it on every poll,
 * fused took 3.9 ms at 256^3 (emulated W = 8, H200, 2026-12-03) and 0.64 ms with every 64th. */
static __device__ __noinline__ int gemm_wait_flag(const gemm_wait &w, int rank, const uint32_t *flag, uint32_t target,
                                           int wait, int chunk, int peer)
{
    uint32_t seen;
    const int r = agmm_spin_until<64, 64, 0>(flag, target, w.timeout_ns, w.err, &seen);
    if (r == AGMM_SPIN_EXPIRED)
        agmm_dev_error_record(w.err, rank, peer, wait, chunk, target, seen);
    if (r != AGMM_SPIN_MET)
        return 1;
    /* The chunk was written through the generic proxy (copy engine, peer stores); TMA reads it
     * through the async proxy: order the acquired data before this thread's next TMA loads. */
    asm volatile("fence.proxy.async.global;" ::: "memory");
    return 0;
}

/* The gathered A, or the shard for local tiles. */
__device__ __forceinline__ a_tile plain_tile(const gemm_a_plain &a, const tile_job &j)
{
    const int from_shard = j.local && a.has_shard;
    return a_tile{from_shard ? &a.map_shard : &a.map_a, (int)(from_shard ? j.shard_row0 : j.row0)};
}

/* copy_local (gemm_engine.h, chunk-flag mode): this CTA's share of the shard, copied into its
 * rows of the gathered A by GEMM_COPY_THREADS threads (t = 0..63: warps 2 and 3 of the producer
 * warpgroup, idle otherwise). The shard is cut into one even run of 16-byte units per CTA (the
 * plan's copy_per_cta: no division here; every CTA of the SM budget is launched, those without a
 * tile too), so the copy takes about the same time everywhere. Each thread keeps GEMM_COPY_ILP
 * loads in flight: a gentle copy leaves the GEMM its bandwidth (fused at W = 1, 512-2560^3: 2 loads
 * 1.3% faster than 4, 8 loads 1.2% slower; 2688-4096^3, where the copy is largest, 2 as fast as 4:
 * docs/results, H100). Generic-proxy stores to rows no tile of this kernel reads (local tiles
 * read the shard): nothing to order inside the kernel; its completion orders them for the caller. */
#define GEMM_COPY_THREADS 64
#define GEMM_COPY_ILP 2
static __device__ __noinline__ void copy_shard_share(const gemm_a_plain &a, int t)
{
    const int64_t lo = (int64_t)blockIdx.x * a.copy_per_cta;
    const int64_t hi = lo + a.copy_per_cta < a.copy_vecs ? lo + a.copy_per_cta : a.copy_vecs;
    agmm_copy_vecs<GEMM_COPY_ILP>((const uint4 *)a.copy_src, (uint4 *)a.copy_dst, lo + t, hi, GEMM_COPY_THREADS);
}

__device__ __forceinline__ void plain_prefetch(const gemm_a_plain &a)
{
    prefetch_map(&a.map_a);
    if (a.has_shard)
        prefetch_map(&a.map_shard);
}

template <class Cfg>
struct a_plain {
    __device__ static __forceinline__ uint32_t cta_word(const gemm_params &) { return 0; }
    __device__ static __forceinline__ void prefetch(const gemm_params &p) { plain_prefetch(p.a.plain); }
    __device__ static __forceinline__ void side_thread(const gemm_params &, uint32_t) {}
    __device__ static __forceinline__ void copy_local(const gemm_params &, int) {}
    __device__ static __forceinline__ void cta_end(const gemm_params &, uint32_t) {}

    struct slot_note {};
    struct producer {
        const gemm_a_plain &a;
        __device__ __forceinline__ producer(const gemm_params &p, uint32_t, slot_note *) : a(p.a.plain) {}
        __device__ __forceinline__ void start() {}
        __device__ __forceinline__ a_tile tile(const tile_job &j) { return plain_tile(a, j); }
        __device__ __forceinline__ void before_refill(const ring<Cfg> &, int) {}
        __device__ __forceinline__ void after_load(const ring_pos<Cfg> &, int, const tile_job &) {}
        __device__ __forceinline__ void finish(const ring<Cfg> &) {}
    };
};

/* The flags' reset (header comment), by the producer thread after its last wait. The first fence
 * orders this producer's flag loads before its count; the last producer's fence orders every count
 * it read (and so every producer's loads) before its stores. The next run's writers come after
 * this kernel has completed (stream order), so they find the flags at 0. */
static __device__ __noinline__ void reset_chunk_flags(const gemm_params &p)
{
    const int nflags = p.core.sched.nranks * p.core.sched.splits;
    uint32_t *flags = p.a.chunks.flags, *count = flags + nflags;
    __threadfence();
    if (atomicAdd(count, 1u) != gridDim.x - 1)
        return;
    __threadfence();
    for (int i = 0; i < nflags; i++)
        flags[i] = 0;
    *count = 0;
}

template <class Cfg>
struct a_chunks {
    __device__ static __forceinline__ uint32_t cta_word(const gemm_params &) { return 0; }
    __device__ static __forceinline__ void prefetch(const gemm_params &p) { plain_prefetch(p.a.chunks.a); }
    __device__ static __forceinline__ void side_thread(const gemm_params &, uint32_t) {}
    __device__ static __forceinline__ void copy_local(const gemm_params &p, int t)
    {
        if (p.a.chunks.a.copy_vecs)
            copy_shard_share(p.a.chunks.a, t);
    }
    __device__ static __forceinline__ void cta_end(const gemm_params &, uint32_t) {}

    struct slot_note {};
    struct producer {
        const gemm_params &p;
        int waits_off = 0; /* a wait expired (here or in another CTA): load without waiting */
        __device__ __forceinline__ producer(const gemm_params &params, uint32_t, slot_note *) : p(params) {}
        __device__ __forceinline__ void start() {}
        __device__ __forceinline__ a_tile tile(const tile_job &j)
        {
            const gemm_a_chunks &c = p.a.chunks;
            const int from_shard = j.local && c.a.has_shard;
            if (!from_shard && !waits_off)
                waits_off = gemm_wait_flag(c.wait, p.core.sched.rank, c.flags + j.chunk, c.ready, AGMM_WAIT_CHUNK,
                                           j.chunk, j.src_rank);
            return plain_tile(c.a, j);
        }
        __device__ __forceinline__ void before_refill(const ring<Cfg> &, int) {}
        __device__ __forceinline__ void after_load(const ring_pos<Cfg> &, int, const tile_job &) {}
        /* With one rank and its shard every tile is local: no flag was read, none is reset. */
        __device__ __forceinline__ void finish(const ring<Cfg> &)
        {
            if (p.core.sched.nranks > 1 || !p.a.chunks.a.has_shard)
                reset_chunk_flags(p);
        }
    };
};

#endif /* AGMM_KERNELS_GEMM_A_SOURCE_CUH */
