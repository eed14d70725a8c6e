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

#if defined(__CUDACC__)
#define AGMM_HD __host__ __device__ __forceinline__
#else
#define AGMM_HD static inline
#endif

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
} agmm_sched;

typedef struct {
    int64_t row0;       /* first row in the gathered A and C */
    int64_t shard_row0; /* the same row inside the source rank's shard */
    int64_t col0;       /* first column of C */
    int rows, cols;     /* clipped to the chunk and to n */
    int chunk;          /* src_rank * splits + split: the flag this tile waits for */
    int src_rank;       /* whose shard the rows come from */
    int local;          /* src_rank == rank: read the shard directly, no wait */
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
    return (row + s->bm - 1) / s->bm;
}

/* Fills the derived fields. The caller has checked m, n >= 1, bm, bn, group_m >= 1,
 * 1 <= splits <= m and 0 <= rank < nranks (reduce-scatter visit: splits = 1, block_rows =
 * ceil(m / nranks)). */
AGMM_HD void agmm_sched_init(agmm_sched *s)
{
    s->col_tiles = (s->n + s->bn - 1) / s->bn;
    if (s->block_rows) {
        s->row_tiles = (s->m + s->bm - 1) / s->bm;
        s->row_tile0 = agmm_sched_rs_block_tile(s, (s->rank + 1) % s->nranks) % s->row_tiles;
        s->tiles_per_rank = 0;
        return;
    }
    int64_t row_tiles = 0;
    for (int sp = 0; sp < s->splits; sp++) {
        int64_t r0, rows;
        agmm_sched_chunk_rows(s, sp, &r0, &rows);
        row_tiles += (rows + s->bm - 1) / s->bm;
    }
    s->tiles_per_rank = row_tiles * s->col_tiles;
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

/* Tile (row_tile, col_tile) of a grouped raster over rows of tiles [0, row_tiles) by col_tiles:
 * position rem's, group_m row tiles by all column tiles at a time, column-major in the group. */
AGMM_HD void agmm_sched_grouped(const agmm_sched *s, int64_t rem, int64_t row_tiles, int64_t *row_tile,
                                int64_t *col_tile)
{
    int64_t per_group = (int64_t)s->group_m * s->col_tiles;
    int64_t group = rem / per_group;
    int64_t first_row_tile = group * s->group_m;
    int64_t group_rows = row_tiles - first_row_tile;
    if (group_rows > s->group_m)
        group_rows = s->group_m;
    int64_t in_group = rem - group * per_group;
    *row_tile = first_row_tile + in_group % group_rows;
    *col_tile = in_group / group_rows;
}

/* The reduce-scatter visit's idx-th tile (header comment). Position idx lies in row tile
 * (row_tile0 + idx / col_tiles) mod row_tiles of the rotated order, whose first row's block is the
 * home; the block's tiles start at its first row tile's position. */
AGMM_HD void agmm_sched_rs_tile(const agmm_sched *s, int64_t idx, agmm_tile *t)
{
    int64_t rt = s->row_tile0 + idx / s->col_tiles;
    if (rt >= s->row_tiles)
        rt -= s->row_tiles;
    const int home = (int)(rt * s->bm / s->block_rows);
    const int64_t first = agmm_sched_rs_block_tile(s, home), count = agmm_sched_rs_block_tile(s, home + 1) - first;
    int64_t first_pos = first - s->row_tile0; /* the block's first row tile, in the rotated order */
    if (first_pos < 0)
        first_pos += s->row_tiles;
    int64_t row_tile, col_tile;
    agmm_sched_grouped(s, idx - first_pos * s->col_tiles, count, &row_tile, &col_tile);
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
    int pos = (int)(idx / s->tiles_per_rank);
    int64_t rem = idx - (int64_t)pos * s->tiles_per_rank;
    int src = (s->rank + pos) % s->nranks;

    int split = 0;
    int64_t c_row0 = 0, c_rows = 0, c_row_tiles = 0;
    for (; split < s->splits; split++) {
        agmm_sched_chunk_rows(s, split, &c_row0, &c_rows);
        c_row_tiles = (c_rows + s->bm - 1) / s->bm;
        if (rem < c_row_tiles * s->col_tiles)
            break;
        rem -= c_row_tiles * s->col_tiles;
    }

    /* Grouped raster inside the chunk: group_m row tiles by all column tiles. */
    int64_t row_tile, col_tile;
    agmm_sched_grouped(s, rem, c_row_tiles, &row_tile, &col_tile);

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
