/* The GEMM engine's tile scheduler (device code only): the per-CTA walk over units of work that
 * the producer and the consumers both take, so that they meet the same tiles, K ranges and
 * B-sharing decisions in the same order (the ring's phases depend on it: ring.cuh).
 *
 * CTA b takes units u = b, b + grid, ... A unit is tile u of core/schedule.h (local rank block
 * first, chunks in order, groups of row tiles column-major for L2 reuse), except in split-tail
 * configs (SK): the host (plan_split_tail, policy.c) picks the last tiles whose whole-tile
 * rounds leave SMs idle and cuts each into sk_split K ranges, each a unit of its own on another
 * SM. Units [0, sk_first) are the tiles of the same index; unit sk_first + v is piece
 * v % sk_split of tile sk_first + v / sk_split, K blocks [piece*KB/split, (piece+1)*KB/split).
 * In stream-K configs (SK = 2) the units past stk.first are the segments of stream_k.h, some
 * empty (kb0 == kb1: both roles skip them).
 *
 * Clusters of 2 (CL = 2): CTA rank r = idx & 1; the pair's tiles idx, idx ^ 1 are consecutive in
 * the grouped order. Where the tile count is even (the host's pairs_coupled) both CTAs walk as many
 * units, and their consumers release every slot in both CTAs, shared or not (ring.cuh): then each
 * unit shares B (b_loader.cuh: each CTA loads half and multicasts it to both) exactly when its two
 * tiles are one above the other in the same columns, which both CTAs read off their own tile (the
 * even one is not the last of its run down a column, the odd one not the first: core/schedule.h),
 * so they agree without looking at each other's. The coupling is what makes a per-unit choice
 * safe: a producer multicasts into its partner's slot only after the partner's consumers released
 * that slot's previous use, which they report through remote arrivals; before every pair released
 * both CTAs' slots, sharing had to be all or none (a use that shared after one that did not refilled
 * the partner's slot while its consumers could still read it: seen under compute-sanitizer's
 * racecheck on the H200, 2026-12-03, a wrong C at 300x264x136, where pairs straddle a column), and
 * every shape whose last row group had an odd number of row tiles shared nothing (2026-12-06, 20th
 * session: half the W = 1 seed shapes). With an odd tile count, the last unit has no partner: no
 * sharing, no coupling. */
#ifndef AGMM_KERNELS_GEMM_TILE_SCHED_CUH
#define AGMM_KERNELS_GEMM_TILE_SCHED_CUH

#include <stdint.h>

#include "core/schedule.h"
#include "kernels/gemm/params.h"

/* One unit, as both roles need it. */
struct tile_job {
    int64_t row0;       /* first row of C (and of the gathered A) */
    int col0, rows, cols; /* first column; rows and columns clipped to the chunk and to n */
    int share;          /* B shared with the cluster partner */
    int kb0, kb1;       /* the unit's K blocks */
    int piece, sk;      /* split tail, stream-K: the piece, and the tile's index among split tiles (-1: whole) */
    int pieces, ws0;    /* the tile's pieces; the workspace index of its first (epilogue.cuh, sk_fixup) */
    /* For the A source: whose rows, at which row of that rank's shard, the chunk that holds them,
     * and whether they are this rank's own. */
    int64_t shard_row0;
    int src_rank, chunk, local;
};

template <class Cfg>
struct tile_walk {
    const gemm_core &p;
    int64_t ntiles, nunits;

    __device__ __forceinline__ explicit tile_walk(const gemm_core &core)
        : p(core), ntiles(agmm_sched_num_tiles(&core.sched)),
          nunits(Cfg::SK == 1   ? core.sk_first + (ntiles - core.sk_first) * core.sk_split
                 : Cfg::SK == 2 && core.stk.tiles ? core.stk.first + (int64_t)core.stk.segs * core.stk.ctas
                                                  : ntiles)
    {
    }

    /* Whether tile idx shares its B tile with the partner CTA's tile idx ^ 1 (header comment). */
    __device__ __forceinline__ int shares_b(int64_t idx, const agmm_tile &t) const
    {
        return Cfg::CL == 2 && p.pairs_coupled && (p.sched.col_tiles == 1 || !((idx & 1) ? t.run_first : t.run_last));
    }

    /* Unit u < nunits. */
    __device__ __forceinline__ tile_job job(int64_t u) const
    {
        int64_t idx = u;
        int kb0 = 0, kb1 = p.k_blocks, piece = 0, sk = -1, pieces = 1, ws0 = 0;
        if (Cfg::SK == 1 && u >= p.sk_first) {
            const int64_t v = u - p.sk_first;
            sk = (int)(v / p.sk_split);
            piece = (int)(v - (int64_t)sk * p.sk_split);
            idx = p.sk_first + sk;
            kb0 = piece * p.k_blocks / p.sk_split;
            kb1 = (piece + 1) * p.k_blocks / p.sk_split;
            pieces = p.sk_split;
            ws0 = sk * p.sk_split;
        }
        if (Cfg::SK == 2 && p.stk.tiles && u >= p.stk.first) {
            const agmm_stream_k_seg g = agmm_stream_k_unit(&p.stk, (uint32_t)(u - p.stk.first));
            idx = p.stk.first + g.tile;
            sk = g.tile;
            kb0 = g.kb0;
            kb1 = g.kb1;
            piece = g.piece;
            pieces = g.pieces;
            ws0 = g.ws0;
        }
        agmm_tile t;
        agmm_sched_tile(&p.sched, idx, &t);
        tile_job j;
        j.row0 = t.row0;
        j.col0 = (int)t.col0;
        j.rows = t.rows;
        j.cols = t.cols;
        j.share = shares_b(idx, t);
        j.kb0 = kb0;
        j.kb1 = kb1;
        j.piece = piece;
        j.sk = sk;
        j.pieces = pieces;
        j.ws0 = ws0;
        j.shard_row0 = t.shard_row0;
        j.src_rank = t.src_rank;
        j.chunk = t.chunk;
        j.local = t.local;
        return j;
    }

    /* How many K blocks unit u has (what a ping-pong consumer skips of the other's units). */
    __device__ __forceinline__ int k_blocks(int64_t u) const
    {
        if (Cfg::SK == 2) {
            const tile_job j = job(u);
            return j.kb1 - j.kb0;
        }
        if (!Cfg::SK || u < p.sk_first)
            return p.k_blocks;
        const int piece = (int)((u - p.sk_first) % p.sk_split);
        return (piece + 1) * p.k_blocks / p.sk_split - piece * p.k_blocks / p.sk_split;
    }

    /* Unit u, or an empty job past the last one (the consumers look one unit ahead). */
    __device__ __forceinline__ tile_job job_or_none(int64_t u) const
    {
        if (u < nunits)
            return job(u);
        tile_job j = {};
        j.sk = -1;
        j.pieces = 1;
        return j;
    }
};

#endif /* AGMM_KERNELS_GEMM_TILE_SCHED_CUH */
