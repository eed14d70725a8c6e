/* The scatter epilogue (device code only): the GEMM half and the owner's sum of the fused
 * matmul_reduce_scatter and matmul_all_reduce (src/backends/matmul_reduce_fused.c has the protocol
 * across ranks and its CPU twin). The kernel computes this rank's partial P = A_r * B_r, for the
 * reduce-scatter in the reduce-scatter visit of core/schedule.h (row tiles over all M rows, homed
 * in the block of their first row, other blocks' tiles first), for the all-reduce (`all`) in a
 * plain GEMM's visit, the same on every rank, where every rank owns every row and every tile is
 * homed everywhere; instead of writing C, each consumer warp sends the rows of its piece of a tile
 * to their owners and sums this rank's own rows. An epilogue type as epilogue.cuh describes: made
 * per consumer thread, store(job, acc) per tile, finish() at the end.
 *
 * Memory (gemm_scatter, params.h): slots[q] is rank q's W slots (slot p: rank p's partial of q's
 * rows, rows(q) x N bf16 each (all: M x N), slot_bytes apart); signals[q] is rank q's words: the
 * tile flags, word tile * W + p (tile = its place in the grid: row tile * col_tiles + column
 * tile), then the done words, word tiles * W + owner. c is this rank's rows of S (rows(rank) x N;
 * all: M x N).
 *
 * Per tile, per consumer warp (the warps that store a tile work alike, each on its 16-row pieces:
 * ARRIVALS of them, the 8 consumer warps of the cooperative schedule, the 4 of one consumer in the
 * ping-pong one, which owns whole tiles):
 *   slot free   before its first store into owner q != rank in this run, lane 0 waits (bounded,
 *               acquire) until done word q of this rank's own signals has reached e - 1: q has
 *               read its slots of run e - 1. Remembered per warp for the run (a bit per owner).
 *   pass        the fragments go through the warp's staging rows as in epi_store; each 16-byte
 *               row piece goes to its row's owner q, into slot `rank` of q's buffer (peer memory,
 *               or the same GPU's; this rank's own rows into its own slot).
 *   signal      (another owner touched) each lane fences (fence.acq_rel.sys: its stores before
 *               what follows), __syncwarp, then lane 0 adds 1 to flag (tile, rank) of every other
 *               owner q the tile touches, with red.release.sys. Writer of a flag: the ARRIVALS
 *               warps of one tile of one rank; waiter: the owner's warps of the same tile; never
 *               reset: after run e it reads e * ARRIVALS (wrapping compare; every rank runs the
 *               same config, so the same ARRIVALS).
 *   tile wait   (a tile homed in this rank's block) every lane p < W, p != rank, waits (bounded,
 *               acquire) until flag (tile, p) of this rank's signals has reached e * ARRIVALS, then a
 *               __syncwarp: what peer p stored before its release is visible to the whole warp.
 *   sum         then the warp's piece of this rank's rows of the tile: over slots 0..W-1 in rank
 *               order in fp32, rounded once into c. Each lane reads back its own pass's stores
 *               for slot `rank` (the same positions); peers' slots through .cg loads. The
 *               fragments are dead by then, so it runs out of line with no accumulators to keep.
 * finish(), every consumer warp:
 *   deferred    (reduce-scatter) the tiles of this CTA homed in an earlier block that reach into
 *               this rank's rows: the tile wait, then the warp's piece of this rank's rows summed
 *               from all W slots (its own stored by this same warp in its pass).
 *   closing     fence, count the warp in on close_ctr (device memory of the plan); the last of the
 *               grid's 8 * gridDim.x consumer warps (so every warp of the run has read the epoch word and
 *               finished reading the slots) resets the counter, stores e into the epoch word and e
 *               into done word `rank` of every peer (st.release.sys). No wait: the next writer
 *               waits (slot free above). The next run starts after this kernel (one stream; a
 *               rank's runs are ordered), so it reads e from the epoch word.
 * Bounded: an expired wait is recorded in the dev_error record (AGMM_WAIT_SLOT, AGMM_WAIT_TILE)
 * and this warp, and every warp that later sees the record, waits no more; the kernel finishes. */
#ifndef AGMM_KERNELS_GEMM_EPI_SCATTER_CUH
#define AGMM_KERNELS_GEMM_EPI_SCATTER_CUH

#include <stdint.h>

#include <cuda_bf16.h>

#include "kernels/bounded_wait.cuh"
#include "kernels/gemm/epilogue.cuh"
#include "kernels/gemm/tile_sched.cuh"

#define SCATTER_CONSUMER_WARPS ((GEMM_THREADS - 128) / 32) /* 2 consumer warpgroups of 4 warps */
#define SCATTER_BATCH 4 /* slots loaded before their adds: loads in flight per sum */

__device__ __forceinline__ void scatter_fence_sys()
{
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

__device__ __forceinline__ void scatter_red_release_sys(uint32_t *word, uint32_t v)
{
    asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(word), "r"(v) : "memory");
}

/* f = x (first) or f + x, for the 8 bf16 lanes of x. */
__device__ __forceinline__ void scatter_acc(float (&f)[8], const uint4 &x, bool first)
{
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float lo = __uint_as_float(w[i] << 16), hi = __uint_as_float(w[i] & 0xffff0000u);
        f[2 * i] = first ? lo : f[2 * i] + lo;
        f[2 * i + 1] = first ? hi : f[2 * i + 1] + hi;
    }
}

__device__ __forceinline__ uint4 scatter_pack(const float (&f)[8])
{
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i])) |
               ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i + 1])) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Up to 8 bf16 at p: one 16-byte access when vec, else cnt elements (the rest of the vector 0). */
__device__ __forceinline__ uint4 scatter_load(const uint16_t *p, int cnt, int vec)
{
    if (vec)
        return __ldcg(reinterpret_cast<const uint4 *>(p));
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int e = 0; e < 8; e++)
        if (e < cnt)
            w[e / 2] |= (uint32_t)__ldcg(reinterpret_cast<const unsigned short *>(p) + e) << (16 * (e & 1));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void scatter_put(uint16_t *p, const uint4 &v, int cnt, int vec)
{
    if (vec) {
        *reinterpret_cast<uint4 *>(p) = v;
        return;
    }
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 8; e++)
        if (e < cnt)
            p[e] = (uint16_t)(w[e / 2] >> (16 * (e & 1)));
}

template <class Cfg>
struct epi_scatter {
    static_assert(!Cfg::SK, "the scatter epilogue has no split tail");
    static constexpr uint32_t smem_bytes = 8 * EP_WARP_BYTES; /* epi_store's staging rows */
    /* A flag's count per tile and run: the consumer warps that store a tile, both warpgroups
     * (cooperative) or one (ping-pong: a warpgroup owns whole tiles). */
    static constexpr uint32_t ARRIVALS = Cfg::PP ? SCATTER_CONSUMER_WARPS / 2 : SCATTER_CONSUMER_WARPS;
    const gemm_params &p;
    uint8_t *ep; /* this warp's staging rows */
    int cw, row_off, col_off, warp, lane;
    uint32_t epoch;     /* this run's: runs completed + 1 */
    uint64_t free_seen; /* owners whose slot-free wait this warp has passed in this run */
    int waits_off;      /* a wait of this rank expired: wait no more */

    __device__ __forceinline__ epi_scatter(const gemm_params &params, uint8_t *area, int consumer, int w, int l)
        : p(params), ep(area + (consumer * 4 + w) * EP_WARP_BYTES), cw(consumer), row_off(consumer * Cfg::CW_ROWS),
          col_off(consumer * Cfg::CW_COLS), warp(w), lane(l),
          epoch(*(volatile const uint32_t *)params.scatter.epoch + 1u), free_seen(0), waits_off(0)
    {
    }

    __device__ __forceinline__ int rank() const { return p.scatter.rank; }
    __device__ __forceinline__ int nranks() const { return p.scatter.nranks; }
    /* Reduce-scatter: the block (owner) of row g; rows < 2^31 (the engine's bound), so 32-bit
     * division. */
    __device__ __forceinline__ int owner(int64_t g) const
    {
        return (int)((uint32_t)g / (uint32_t)p.core.sched.block_rows);
    }
    /* The owners of tile j's rows: [*q0, *q1] (the all-reduce: every rank). */
    __device__ __forceinline__ void tile_owners(const tile_job &j, int &q0, int &q1) const
    {
        q0 = p.scatter.all ? 0 : owner(j.row0);
        q1 = p.scatter.all ? nranks() - 1 : owner(j.row0 + j.rows - 1);
    }
    /* This rank's first row of the output: its block's, or row 0 of all of S. */
    __device__ __forceinline__ int64_t mine0() const
    {
        return p.scatter.all ? 0 : (int64_t)rank() * p.core.sched.block_rows;
    }
    __device__ __forceinline__ int64_t grid_tile(const tile_job &j) const
    {
        return j.row0 / Cfg::BM * p.core.sched.col_tiles + j.col0 / Cfg::BN;
    }
    __device__ __forceinline__ uint32_t *signals_of(int q) const { return p.scatter.signals[q]; }
    __device__ __forceinline__ size_t done_word(int q) const
    {
        return (size_t)agmm_sched_num_tiles(&p.core.sched) * nranks() + q;
    }
    /* Slot `rank` of owner q's buffer (q == rank: this rank's own slot in its own buffer). */
    __device__ __forceinline__ uint16_t *slot_to(int q) const
    {
        return (uint16_t *)((char *)p.scatter.slots[q] + (size_t)rank() * p.scatter.slot_bytes);
    }

    /* One bounded wait of this lane (bounded_wait.cuh); 1 when waits are off from now on. */
    __device__ __forceinline__ int wait_word(const uint32_t *word, uint32_t target, int kind, int peer, int chunk) const
    {
        uint32_t seen;
        const int r = agmm_spin_until<64, 64, 0>(word, target, p.scatter.wait.timeout_ns, p.scatter.wait.err, &seen);
        if (r == AGMM_SPIN_EXPIRED)
            agmm_dev_error_record(p.scatter.wait.err, rank(), peer, kind, chunk, target, seen);
        return r != AGMM_SPIN_MET;
    }

    /* Slot free (header comment) for owners [q0, q1]; the __syncwarp orders lane 0's acquires
     * before every lane's stores. */
    __device__ __forceinline__ void wait_slots_free(int q0, int q1)
    {
        int off = waits_off;
        if (lane == 0)
            for (int q = q0; q <= q1 && !off; q++)
                if (q != rank() && !(free_seen >> q & 1))
                    off = wait_word(signals_of(rank()) + done_word(q), epoch - 1u, AGMM_WAIT_SLOT, q, -1);
        waits_off = __shfl_sync(0xffffffffu, off, 0);
        for (int q = q0; q <= q1; q++)
            free_seen |= 1ull << q;
        __syncwarp();
    }

    /* Tile wait (header comment): every peer's partial of the tile is in this rank's slots. */
    __device__ __forceinline__ void wait_tile(int64_t tile)
    {
        int off = waits_off;
        const uint32_t want = epoch * ARRIVALS;
        for (int q = lane; q < nranks() && !off; q += 32)
            if (q != rank())
                off = wait_word(signals_of(rank()) + (size_t)tile * nranks() + q, want, AGMM_WAIT_TILE, q, (int)tile);
        waits_off = __any_sync(0xffffffffu, off);
        __syncwarp();
    }

    /* c at out_off = the sum over slots 0..W-1 of this rank's 8 (or cnt) elements at `off` of
     * each, fp32 in rank order, rounded once (.cg loads: peers wrote them; never an L1 line of an
     * earlier run). */
    __device__ __forceinline__ void sum_to_out(int64_t off, int64_t out_off, int cnt, int vec) const
    {
        const int W = nranks();
        const uint16_t *base = (const uint16_t *)p.scatter.slots[rank()];
        const size_t slot_elems = p.scatter.slot_bytes / 2;
        float f[8];
        for (int q0 = 0; q0 < W; q0 += SCATTER_BATCH) {
            uint4 x[SCATTER_BATCH];
#pragma unroll
            for (int b = 0; b < SCATTER_BATCH; b++)
                x[b] = q0 + b < W ? scatter_load(base + (q0 + b) * slot_elems + off, cnt, vec) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int b = 0; b < SCATTER_BATCH; b++)
                if (q0 + b < W)
                    scatter_acc(f, x[b], q0 + b == 0);
        }
        scatter_put(p.core.c + out_off, scatter_pack(f), cnt, vec);
    }

    /* The tile wait, then this warp's piece of this rank's rows of tile j summed into c. */
    __device__ __forceinline__ void sum_piece(const tile_job &j)
    {
        const int64_t n = p.core.n, mine0 = this->mine0();
        const int vec_ok = (n & 7) == 0;
        if (nranks() > 1)
            wait_tile(grid_tile(j));
        for (int mb = 0; mb < Cfg::MB; mb++)
            for (int ch = 0; ch < EP_PIECES(Cfg::WN); ch++)
                for (int i = 0; i < 4; i++) {
                    const int tr = row_off + mb * 64 + warp * 16 + lane / 8 + 4 * i;
                    const int c = (lane % 8) * 8, tcol = col_off + ch * 64 + c;
                    const int64_t g = j.row0 + tr, col = j.col0 + tcol;
                    if (c >= EP_PIECE_COLS(Cfg::WN, ch) || tr >= j.rows || tcol >= j.cols ||
                        (!p.scatter.all && owner(g) != rank()))
                        continue;
                    const int cnt = j.cols - tcol < 8 ? j.cols - tcol : 8;
                    sum_to_out((g - mine0) * n + col, (g - mine0) * n + col, cnt, vec_ok && cnt == 8);
                }
    }

    __device__ __forceinline__ void store(const tile_job &cur, float (&acc)[Cfg::MB][Cfg::WN / 2])
    {
        const int64_t n = p.core.n, rb = p.core.sched.block_rows;
        const int me = rank(), all = p.scatter.all;
        int q0, q1;
        tile_owners(cur, q0, q1);
        const int vec_ok = (n & 7) == 0; /* 16-byte aligned row pieces in slots and c */
        if (q0 != me || q1 != me)
            wait_slots_free(q0, q1);
#pragma unroll
        for (int mb = 0; mb < Cfg::MB; mb++) {
            const int row_w = row_off + mb * 64 + warp * 16;
#pragma unroll
            for (int ch = 0; ch < EP_PIECES(Cfg::WN); ch++) {
                const int width = EP_PIECE_COLS(Cfg::WN, ch);
                /* The fragments to bf16 in the staging rows, as epi_store. */
#pragma unroll
                for (int jj = 0; jj < 8; jj++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int j = ch * 8 + jj;
                        if (jj * 8 >= width)
                            continue;
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
                    if (c < width && row_w + r < cur.rows && tcol < cur.cols) {
                        const int64_t g = cur.row0 + row_w + r, col = cur.col0 + tcol;
                        const int cnt = cur.cols - tcol < 8 ? cur.cols - tcol : 8, vec = vec_ok && cnt == 8;
                        if (all) /* every rank's slot `rank`, at the row itself */
                            for (int q = 0; q < nranks(); q++)
                                scatter_put(slot_to(q) + g * n + col, v, cnt, vec);
                        else /* its owner's, at the row's place in the owner's block */
                            scatter_put(slot_to(owner(g)) + (g - (int64_t)owner(g) * rb) * n + col, v, cnt, vec);
                    }
                }
                __syncwarp(); /* the staging rows are rewritten by the next 64 columns */
            }
        }
        if (q0 != me || q1 != me) {
            /* Signal: this warp's stores, every lane's, before the owners' flags say so. */
            scatter_fence_sys();
            __syncwarp();
            if (lane == 0)
                for (int q = q0; q <= q1; q++)
                    if (q != me)
                        scatter_red_release_sys(signals_of(q) + (size_t)grid_tile(cur) * nranks() + me, 1u);
        }
        if (cur.local)
            sum_piece(cur);
    }

    __device__ __forceinline__ void finish()
    {
        /* This warp's units: the CTA's (cooperative), or its consumer's every other one (ping-pong,
         * consumer.cuh): the tiles whose own rows this warp stored. */
        const tile_walk<Cfg> walk(p.core);
        const int64_t first = blockIdx.x + (Cfg::PP ? cw * (int64_t)gridDim.x : 0);
        for (int64_t u = first; u < walk.nunits; u += (Cfg::PP ? 2 : 1) * (int64_t)gridDim.x) {
            const tile_job j = walk.job(u);
            if (!p.scatter.all && !j.local && owner(j.row0) < rank() && rank() <= owner(j.row0 + j.rows - 1))
                sum_piece(j); /* deferred (header comment) */
        }
        close();
    }

    /* Closing (header comment). */
    __device__ __forceinline__ void close() const
    {
        scatter_fence_sys(); /* this warp's reads of its slots before its count */
        __syncwarp();
        if (lane != 0 || atomicAdd(p.scatter.close_ctr, 1u) != gridDim.x * (uint32_t)SCATTER_CONSUMER_WARPS - 1u)
            return;
        /* The last warp of the grid: every other one counted in after its fence. */
        scatter_fence_sys();
        *p.scatter.close_ctr = 0;
        *p.scatter.epoch = epoch;
        for (int q = 0; q < nranks(); q++)
            if (q != rank())
                agmm_st_release_sys(signals_of(q) + done_word(rank()), epoch);
    }
};

#endif /* AGMM_KERNELS_GEMM_EPI_SCATTER_CUH */
