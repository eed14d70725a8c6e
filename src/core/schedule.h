/* The tile schedule of all-gather matmul: which output tile a rank computes i-th, which chunk
 * of the gathered A it depends on, and whether that chunk is the rank's own shard.
 *
 * One pure, header-only function set, compiled into the C library (CPU backends, tests) and
 * into CUDA kernels (AGMM_HD becomes __host__ __device__), so the CPU tests prove the order the
 * GPU runs.
 *
 * Rows of the gathered A (W*m of them) form W rank blocks of m rows; each block is cut into
 * `splits` chunks, chunk s of a block holding rows [s*m/S, (s+1)*m/S) of it (S <= m, so none
 * is empty). Chunk id = src_rank * S + s: the id of the flag its copy raises. Tiles never
 * straddle chunks: each chunk has its own row tiles, the last one short when the chunk's rows
 * are not a multiple of bm. That is what lets any m work.
 *
 * Visit order: rank blocks rotated so the rank's own block comes first (its tiles need no
 * wait), then rank+1, rank+2, ... (the order the copies land); inside a block, chunks in order;
 * inside a chunk, tiles grouped group_m row tiles at a time, column-major within the group, so
 * concurrently running tiles share rows of A and columns of B in L2.
 *
 * The reduce-scatter visit (block_rows = R > 0; the fused matmul_reduce_scatter): one rank's
 * whole partial, m = M rows in row tiles of bm over all M rows (a plain GEMM's tiles: they may
 * straddle the row split's blocks, core/row_split.h, block q = rows [qR, (q+1)R) clipped to M).
 * A tile's home is the block of its first row. Blocks are visited in the order rank+1, rank+2,
 * ..., rank (each visits the tiles homed there: rank's own block last, and at a given moment the
 * ranks write to different owners); inside a block, the same groups as above. So every tile
 * homed in another block comes before every tile homed in the rank's own: what the fused
 * backend's waits rely on (a rank waits only for its peers' tiles of its block, which they
 * visit before their own). The record says whose: src_rank = chunk = the home block, local =
 * homed in the rank's own block, shard_row0 = row0 (the rank's own A).
 */
#ifndef AGMM_CORE_SCHEDULE_H
#define AGMM_CORE_SCHEDULE_H

#include <stdint.h>

#include "hd.h"

/* Division by a plan's constant without a divide instruction. A GPU has none: a 32-bit `/` is ~20
 * instructions around a reciprocal, and decoding a tile index took a dozen, on the path of every
 * GEMM engine CTA to its first load: replacing them took that path from 1.65 to 1.15 us at 256^3
 * (docs/results, 2026-12-04, the engine's stamps).
 * For a divisor d >= 1 and dividends 0 <= n < 2^32, with shift = ceil(log2 d) and
 * mul = floor(2^32 (2^shift - d) / d) + 1 (< 2^32):  n / d = (umulhi(n, mul) + n) >> shift,
 * the round-up method of Granlund and Montgomery ("Division by invariant integers using
 * multiplication", 1994, Fig. 4.1; the sum is taken in 64 bits, so no split shift is needed).
 * mul = 0 marks a divisor whose dividends may reach 2^32 (or d > 2^31): plain division then, on
 * the host only. The device form has no such branch: the GEMM engine, the schedule's one device
 * user, refuses schedules of 2^31 tiles or more (kernels/gemm/plan.c), and below that every
 * divider has its multiplier; without the fallback's 64-bit division calls the engine's code
 * shrank by a third (docs/results, 2026-12-04, sixth session). For those, the host and device
 * forms compute the same bits, so the CPU tests prove the kernels' arithmetic. */
typedef struct {
    int64_t d;
    uint32_t mul, shift;
} agmm_fastdiv;

/* The divider for d, given the largest dividend it will see. */
AGMM_HD agmm_fastdiv agmm_fastdiv_make(int64_t d, int64_t max_n)
{
    agmm_fastdiv f = {d, 0, 0};
    if (d < 1 || d > ((int64_t)1 << 31) || max_n < 0 || max_n > (int64_t)UINT32_MAX)
        return f;
    while (((int64_t)1 << f.shift) < d)
        f.shift++;
    f.mul = (uint32_t)(((uint64_t)1 << 32) * (uint64_t)(((int64_t)1 << f.shift) - d) / (uint64_t)d + 1);
    return f;
}

/* n / f.d for 0 <= n <= the max_n f was made for. */
AGMM_HD int64_t agmm_fastdiv_div(int64_t n, agmm_fastdiv f)
{
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi((uint32_t)n, f.mul);
#else
    if (!f.mul)
        return n / f.d;
    const uint32_t hi = (uint32_t)(((uint64_t)(uint32_t)n * f.mul) >> 32);
#endif
    return (int64_t)(((uint64_t)hi + (uint64_t)n) >> f.shift);
}

typedef struct {
    int64_t m;          /* rows per rank */
    int64_t n;          /* columns of C */
    int nranks, rank;
    int splits;         /* chunks per rank, 1 <= splits <= m */
    int bm, bn;         /* tile rows, tile columns */
    int group_m;        /* row tiles per L2 group, >= 1 */
    int64_t block_rows; /* 0: the all-gather visit; R >= 1: the reduce-scatter visit, where m is
                         * all M rows, nranks and rank are the world's and splits is 1 */
    int64_t col_tiles;      /* derived: ceil(n / bn) */
    int64_t tiles_per_rank; /* derived: tiles of one rank block (all-gather visit) */
    int64_t row_tiles;      /* derived, reduce-scatter visit: ceil(m / bm) */
    int64_t row_tile0;      /* derived, reduce-scatter visit: the first row tile visited */
    int64_t block_row_tiles; /* derived, all-gather visit with one chunk per rank: ceil(m / bm) */
    /* derived: the dividers of the tile decode (agmm_sched_tile), by tiles_per_rank, by a group's
     * tiles (group_m * col_tiles), by group_m, by col_tiles, by bm, and by the rows of the short
     * last group of a rank block (all-gather visit with one chunk per rank; else d = 0, unused) */
    agmm_fastdiv div_rank, div_group, div_group_m, div_col, div_bm, div_short;
} agmm_sched;

typedef struct {
    int64_t row0;       /* first row in the gathered A and C */
    int64_t shard_row0; /* the same row inside the source rank's shard */
    int64_t col0;       /* first column of C */
    int rows, cols;     /* clipped to the chunk and to n */
    int chunk;          /* src_rank * splits + split: the flag this tile waits for */
    int src_rank;       /* whose shard the rows come from */
    int local;          /* src_rank == rank: read the shard directly, no wait */
    /* The grouped raster's run down one column (agmm_sched_grouped): whether the tile is its run's
     * first or last. Otherwise tile idx - 1 (run_first = 0) or idx + 1 (run_last = 0) is the one
     * above or below it in the same columns, which is what lets a GEMM engine pair share its B tile
     * (kernels/gemm/tile_sched.cuh). */
    int run_first, run_last;
} agmm_tile;

/* Rows [*row0, *row0 + *rows) of rank block `split`'s chunk, relative to the block. */
AGMM_HD void agmm_sched_chunk_rows(const agmm_sched *s, int split, int64_t *row0, int64_t *rows)
{
    int64_t a = (int64_t)split * s->m / s->splits;
    int64_t b = (int64_t)(split + 1) * s->m / s->splits;
    *row0 = a;
    *rows = b - a;
}

/* Reduce-scatter visit: the first row tile homed in block q (q = nranks: past the last), so block
 * q's tiles are the row tiles [agmm_sched_rs_block_tile(s, q), agmm_sched_rs_block_tile(s, q + 1)),
 * none where no row tile starts inside the block (R < bm). */
AGMM_HD int64_t agmm_sched_rs_block_tile(const agmm_sched *s, int q)
{
    int64_t row = (int64_t)q * s->block_rows;
    if (row > s->m)
        row = s->m;
    return agmm_fastdiv_div(row + s->bm - 1, s->div_bm);
}

/* Fills the derived fields. The caller has checked m, n >= 1, bm, bn, group_m >= 1,
 * 1 <= splits <= m and 0 <= rank < nranks (reduce-scatter visit: splits = 1, block_rows =
 * ceil(m / nranks)). */
AGMM_HD void agmm_sched_init(agmm_sched *s)
{
    s->col_tiles = (s->n + s->bn - 1) / s->bn;
    s->div_bm = agmm_fastdiv_make(s->bm, s->m + s->bm);
    s->div_col = s->div_short = agmm_fastdiv_make(0, 0);
    s->block_row_tiles = 0;
    if (s->block_rows) {
        s->row_tiles = (s->m + s->bm - 1) / s->bm;
        s->row_tile0 = agmm_sched_rs_block_tile(s, (s->rank + 1) % s->nranks) % s->row_tiles;
        s->tiles_per_rank = 0;
        s->div_col = agmm_fastdiv_make(s->col_tiles, s->row_tiles * s->col_tiles);
    } else {
        int64_t row_tiles = 0;
        for (int sp = 0; sp < s->splits; sp++) {
            int64_t r0, rows;
            agmm_sched_chunk_rows(s, sp, &r0, &rows);
            row_tiles += (rows + s->bm - 1) / s->bm;
        }
        s->tiles_per_rank = row_tiles * s->col_tiles;
        if (s->splits == 1) {
            s->block_row_tiles = row_tiles;
            s->div_short = agmm_fastdiv_make(row_tiles % s->group_m, (int64_t)s->group_m * s->col_tiles);
        }
    }
    const int64_t tiles = s->block_rows ? s->row_tiles * s->col_tiles : s->tiles_per_rank * s->nranks;
    const int64_t per_group = (int64_t)s->group_m * s->col_tiles;
    s->div_rank = agmm_fastdiv_make(s->tiles_per_rank, tiles);
    s->div_group = agmm_fastdiv_make(per_group, tiles);
    s->div_group_m = agmm_fastdiv_make(s->group_m, per_group);
}

AGMM_HD int64_t agmm_sched_num_tiles(const agmm_sched *s)
{
    return s->block_rows ? s->row_tiles * s->col_tiles : s->tiles_per_rank * s->nranks;
}

/* Tiles of rank `src`'s blocks come in positions [first, first + tiles_per_rank): the position
 * of the first one. Lets a kernel run only the local tiles, or only the remote ones. */
AGMM_HD int64_t agmm_sched_first_tile_of(const agmm_sched *s, int src)
{
    int pos = (src - s->rank + s->nranks) % s->nranks;
    return (int64_t)pos * s->tiles_per_rank;
}

/* Pull mode's gathered A (kernels/gemm/a_peers.cuh): K block kb of a row of tiles is stored by the
 * row's tile in column kb % col_tiles, so the stores spread over the row and each (row, K block) is
 * stored once, whichever unit loads it. For a unit of column `col` whose K blocks start at kb0 (a
 * whole tile, or a piece of a split one), the first K block it stores; it stores every col_tiles-th
 * after that. */
AGMM_HD int agmm_sched_store_kb(int64_t col_tiles, int col, int kb0)
{
    const int c = (int)col_tiles;
    return kb0 + ((col - kb0 % c) % c + c) % c;
}

/* Tile (row_tile, col_tile) of a grouped raster over rows of tiles [0, row_tiles) by col_tiles:
 * position rem's, group_m row tiles by all column tiles at a time, column-major in the group. A
 * short last group (fewer than group_m row tiles left) divides by its own rows: by the plan's
 * divider where it has one (div_short), else plainly. Sets t's run_first and run_last (the tile
 * is the first or last of its group's run down column col_tile). */
AGMM_HD void agmm_sched_grouped(const agmm_sched *s, int64_t rem, int64_t row_tiles, int64_t *row_tile,
                                int64_t *col_tile, agmm_tile *t)
{
    const int64_t group = agmm_fastdiv_div(rem, s->div_group);
    const int64_t first_row_tile = group * s->group_m;
    const int64_t in_group = rem - group * s->group_m * s->col_tiles;
    const int64_t group_rows = row_tiles - first_row_tile;
    if (group_rows >= s->group_m)
        *col_tile = agmm_fastdiv_div(in_group, s->div_group_m);
    else if (group_rows == s->div_short.d)
        *col_tile = agmm_fastdiv_div(in_group, s->div_short);
    else
        *col_tile = in_group / group_rows;
    const int64_t rows = group_rows < s->group_m ? group_rows : s->group_m;
    const int64_t in_run = in_group - *col_tile * rows;
    *row_tile = first_row_tile + in_run;
    t->run_first = in_run == 0;
    t->run_last = in_run == rows - 1;
}

/* The reduce-scatter visit's idx-th tile (header comment). Position idx lies in row tile
 * (row_tile0 + idx / col_tiles) mod row_tiles of the rotated order, whose first row's block is the
 * home; the block's tiles start at its first row tile's position. */
AGMM_HD void agmm_sched_rs_tile(const agmm_sched *s, int64_t idx, agmm_tile *t)
{
    int64_t rt = s->row_tile0 + agmm_fastdiv_div(idx, s->div_col);
    if (rt >= s->row_tiles)
        rt -= s->row_tiles;
    const int home = (int)(rt * s->bm / s->block_rows);
    const int64_t first = agmm_sched_rs_block_tile(s, home), count = agmm_sched_rs_block_tile(s, home + 1) - first;
    int64_t first_pos = first - s->row_tile0; /* the block's first row tile, in the rotated order */
    if (first_pos < 0)
        first_pos += s->row_tiles;
    int64_t row_tile, col_tile;
    agmm_sched_grouped(s, idx - first_pos * s->col_tiles, count, &row_tile, &col_tile, t);
    const int64_t rows = s->m - (first + row_tile) * s->bm, cols = s->n - col_tile * s->bn;
    t->row0 = (first + row_tile) * s->bm;
    t->shard_row0 = t->row0;
    t->col0 = col_tile * s->bn;
    t->rows = (int)(rows < s->bm ? rows : s->bm);
    t->cols = (int)(cols < s->bn ? cols : s->bn);
    t->chunk = home;
    t->src_rank = home;
    t->local = home == s->rank;
}

/* The idx-th tile this rank visits, 0 <= idx < agmm_sched_num_tiles(s). */
AGMM_HD void agmm_sched_tile(const agmm_sched *s, int64_t idx, agmm_tile *t)
{
    if (s->block_rows) {
        agmm_sched_rs_tile(s, idx, t);
        return;
    }
    const int pos = (int)agmm_fastdiv_div(idx, s->div_rank); /* < nranks */
    int64_t rem = idx - (int64_t)pos * s->tiles_per_rank;
    const int src = s->rank + pos < s->nranks ? s->rank + pos : s->rank + pos - s->nranks;

    /* The chunk: with one per rank, the block; else found by walking the block's chunks. */
    int split = 0;
    int64_t c_row0 = 0, c_rows = s->m, c_row_tiles = s->block_row_tiles;
    if (s->splits > 1)
        for (; split < s->splits; split++) {
            agmm_sched_chunk_rows(s, split, &c_row0, &c_rows);
            c_row_tiles = agmm_fastdiv_div(c_rows + s->bm - 1, s->div_bm);
            if (rem < c_row_tiles * s->col_tiles)
                break;
            rem -= c_row_tiles * s->col_tiles;
        }

    /* Grouped raster inside the chunk: group_m row tiles by all column tiles. */
    int64_t row_tile, col_tile;
    agmm_sched_grouped(s, rem, c_row_tiles, &row_tile, &col_tile, t);

    int64_t r_in_chunk = row_tile * s->bm;
    int64_t rows = c_rows - r_in_chunk;
    int64_t col0 = col_tile * s->bn;
    int64_t cols = s->n - col0;

    t->shard_row0 = c_row0 + r_in_chunk;
    t->row0 = (int64_t)src * s->m + t->shard_row0;
    t->col0 = col0;
    t->rows = (int)(rows < s->bm ? rows : s->bm);
    t->cols = (int)(cols < s->bn ? cols : s->bn);
    t->chunk = src * s->splits + split;
    t->src_rank = src;
    t->local = src == s->rank;
}

#endif /* AGMM_CORE_SCHEDULE_H */
