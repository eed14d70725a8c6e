/* The GEMM engine's stream-K tail (configs with sk = 2, named /stk): the plan and the decode of its
 * units, pure header functions compiled into the C library (the policy, the CPU tests) and into
 * the kernels (tile_sched.cuh), so the CPU tests prove the arithmetic the GPU runs.
 *
 * The last `tiles` tiles of the schedule (the stream-K tiles, after `first` whole tiles, a multiple
 * of the grid) hold iters = tiles * kb K-block iterations, taken as one sequence (tile 0's K blocks,
 * then tile 1's, ...) and dealt to the grid's `ctas` CTAs in contiguous ranges of q or q + 1:
 * CTA b gets [lo(b), lo(b + 1)), lo(b) = b*q + min(b, rem). Every CTA then ends within one
 * iteration of the others, whatever the tile count (the split tail, sk = 1, cuts whole tiles into
 * equal pieces and so keeps part of the ragged last wave).
 *
 * A CTA's range covers a part of one tile, or the end of one, whole tiles, and the start of
 * another: its segments, one per tile touched, at most `segs`. CTA b's segment s is unit
 * first + s*ctas + b of the persistent walk (tile_sched.cuh: CTA b takes units b, b + ctas, ...),
 * empty where the range touches fewer tiles. A tile's pieces are the segments of the CTAs whose
 * ranges meet it, in CTA (= K) order; the epilogue sums them in that order (epilogue.cuh,
 * sk_fixup), so the result does not depend on which piece finishes last. Piece p of tile t keeps
 * its partials at workspace index t + b_first(t) + p: distinct for every (tile, piece), below
 * tiles + ctas. */
#ifndef AGMM_KERNELS_GEMM_STREAM_K_H
#define AGMM_KERNELS_GEMM_STREAM_K_H

#include <stdint.h>

#include "core/hd.h"
#include "core/schedule.h"

typedef struct {
    int64_t first;   /* whole tiles before the stream-K tiles: a multiple of ctas */
    int32_t tiles;   /* stream-K tiles; 0: none (the plan runs whole tiles) */
    int32_t kb;      /* K blocks per tile */
    int32_t ctas;    /* the grid */
    int32_t q, rem;  /* iterations per CTA: q + 1 for CTAs below rem, q for the rest; q >= 1 */
    int32_t segs;    /* the most segments a CTA's range has: the walk's stream-K units per CTA */
    /* The decode's divisors by multiplication (core/schedule.h's agmm_fastdiv: the device has no
     * integer divider, and each division would be some twenty instructions per unit). */
    agmm_fastdiv div_ctas, div_kb, div_q, div_q1;
} agmm_stream_k;

/* One unit of the stream-K part: K blocks [kb0, kb1) of stream-K tile `tile`, piece `piece` of
 * the tile's `pieces`, whose first piece's partials are at workspace index ws0. kb0 == kb1: an
 * empty unit (tile is then a valid one, so decoding it is harmless). */
typedef struct {
    int32_t tile, kb0, kb1, piece, pieces, ws0;
} agmm_stream_k_seg;

/* Where CTA b's range starts (b <= ctas: lo(ctas) = iters). */
AGMM_HD uint32_t agmm_stream_k_lo(const agmm_stream_k *s, uint32_t b)
{
    return b * (uint32_t)s->q + (b < (uint32_t)s->rem ? b : (uint32_t)s->rem);
}

/* The CTA whose range holds iteration x < iters. */
AGMM_HD uint32_t agmm_stream_k_cta(const agmm_stream_k *s, uint32_t x)
{
    const uint32_t big = (uint32_t)s->rem * ((uint32_t)s->q + 1);
    return x < big ? (uint32_t)agmm_fastdiv_div(x, s->div_q1) : (uint32_t)s->rem + (uint32_t)agmm_fastdiv_div(x - big, s->div_q);
}

/* Unit first + v of the walk, v < segs * ctas: CTA v % ctas's segment v / ctas. */
AGMM_HD agmm_stream_k_seg agmm_stream_k_unit(const agmm_stream_k *s, uint32_t v)
{
    const uint32_t seg = (uint32_t)agmm_fastdiv_div(v, s->div_ctas), b = v - seg * (uint32_t)s->ctas;
    const uint32_t kb = (uint32_t)s->kb, lo = agmm_stream_k_lo(s, b), hi = agmm_stream_k_lo(s, b + 1);
    uint32_t t = (uint32_t)agmm_fastdiv_div(lo, s->div_kb) + seg;
    const uint32_t t_lo = t * kb;
    agmm_stream_k_seg g;
    if (t >= (uint32_t)s->tiles || t_lo >= hi) { /* past the range's last tile */
        g.tile = s->tiles - 1;
        g.kb0 = g.kb1 = g.piece = g.ws0 = 0;
        g.pieces = 1;
        return g;
    }
    const uint32_t first_cta = agmm_stream_k_cta(s, t_lo), last_cta = agmm_stream_k_cta(s, t_lo + kb - 1);
    g.tile = (int32_t)t;
    g.kb0 = (int32_t)((lo > t_lo ? lo : t_lo) - t_lo);
    g.kb1 = (int32_t)((hi < t_lo + kb ? hi : t_lo + kb) - t_lo);
    g.piece = (int32_t)(b - first_cta);
    g.pieces = (int32_t)(last_cta - first_cta + 1);
    g.ws0 = (int32_t)(t + first_cta);
    return g;
}

#endif /* AGMM_KERNELS_GEMM_STREAM_K_H */
