/* The tile schedule (src/core/schedule.h): the properties the fused kernels rely on, over every
 * small case and thousands of random ones.
 *   cover    every output element belongs to exactly one tile (checked per column tile as a
 *            partition of the rows [0, W*M), not with a dense array)
 *   chunk    a tile lies inside its chunk's rows; rows and cols are clipped to the chunk and to N
 *            and are full (bm, bn) everywhere else; chunk = src_rank * splits + split;
 *            shard_row0 = row0 - src_rank * M
 *   local    the local tiles are exactly positions [0, tiles_per_rank), with src_rank == rank
 *   order    chunks are visited in rotated order (rank, rank+1, ...; splits in order) and
 *            agmm_sched_first_tile_of(src) is where src's tiles start
 *   group    inside a chunk, tiles go group_m row tiles at a time, column-major in the group
 *   run      run_first / run_last mark where the raster's runs down one column start and end:
 *            inside a run, tile i + 1 is the one right below tile i (what lets a GEMM engine pair
 *            share B, kernels/gemm/tile_sched.cuh); with more than one column tile, a run ends
 *            exactly where the column changes */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/numeric.h"
#include "core/schedule.h"
#include "cpu_tests.h"
#include "harness.h"

enum { P_COVER, P_CHUNK, P_LOCAL, P_ORDER, P_GROUP, P_RUN, NPROPS };
static const char *const prop_what[NPROPS] = {
    "every output element in exactly one tile",
    "tiles inside their chunk, clipped rows/cols, chunk id and shard_row0 right",
    "local tiles are exactly the first tiles_per_rank, with src_rank == rank",
    "chunks in rotated order (rank, rank+1, ...), agmm_sched_first_tile_of right",
    "tiles grouped group_m row tiles at a time, column-major inside a group",
    "run_first/run_last: inside a run the next tile is right below, runs end where the column changes",
};

typedef struct {
    int64_t cases, tiles;
    int64_t failures[NPROPS];
    char first[NPROPS][320];
} tally;

static void fail(tally *t, int prop, const agmm_sched *s, const char *fmt, ...)
{
    if (t->failures[prop]++ > 0)
        return;
    char detail[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    snprintf(t->first[prop], sizeof t->first[prop], " (first: W=%d rank=%d M=%lld N=%lld bm=%d bn=%d splits=%d group_m=%d: %s)",
             s->nranks, s->rank, (long long)s->m, (long long)s->n, s->bm, s->bn, s->splits, s->group_m, detail);
}

typedef struct {
    int64_t col_tile, row0, rows;
} span;

static int span_cmp(const void *x, const void *y)
{
    const span *a = x, *b = y;
    if (a->col_tile != b->col_tile)
        return a->col_tile < b->col_tile ? -1 : 1;
    return a->row0 < b->row0 ? -1 : a->row0 > b->row0;
}

/* run: tile i (tl) after tile i - 1 (prev; NULL for the first) of ntiles. */
static void check_run(tally *t, int prop, const agmm_sched *s, int64_t i, int64_t ntiles, const agmm_tile *prev,
                      const agmm_tile *tl)
{
    if (i == 0 && !tl->run_first)
        fail(t, prop, s, "tile 0 is not the first of its run");
    if (i == ntiles - 1 && !tl->run_last)
        fail(t, prop, s, "tile %lld, the last, is not the last of its run", (long long)i);
    if (!prev)
        return;
    const int same_col = prev->col0 == tl->col0;
    if (prev->run_last != tl->run_first)
        fail(t, prop, s, "tiles %lld, %lld: run_last %d, then run_first %d", (long long)i - 1, (long long)i,
             prev->run_last, tl->run_first);
    else if (!tl->run_first && !(same_col && prev->row0 + prev->rows == tl->row0))
        fail(t, prop, s, "tile %lld (rows %lld.., cols %lld..) continues the run of tile %lld (rows %lld.., cols %lld..)",
             (long long)i, (long long)tl->row0, (long long)tl->col0, (long long)i - 1, (long long)prev->row0,
             (long long)prev->col0);
    else if (s->col_tiles > 1 && tl->run_first == same_col)
        fail(t, prop, s, "tile %lld: run_first %d where the column %s", (long long)i, tl->run_first,
             same_col ? "stays" : "changes");
}

/* Checks one schedule; spans has room for every tile. */
static void check_sched(tally *t, agmm_sched s, span *spans)
{
    agmm_sched_init(&s);
    int64_t ntiles = agmm_sched_num_tiles(&s);
    int64_t total_rows = (int64_t)s.nranks * s.m;
    t->cases++;
    t->tiles += ntiles;

    int64_t prev_pos = -1, prev_row_tile = -1, prev_col_tile = -1, prev_group = -1;
    int prev_chunk = -1;
    agmm_tile prev_tile;
    for (int64_t i = 0; i < ntiles; i++) {
        agmm_tile tl;
        agmm_sched_tile(&s, i, &tl);
        check_run(t, P_RUN, &s, i, ntiles, i ? &prev_tile : NULL, &tl);
        prev_tile = tl;
        int src = tl.chunk / s.splits, split = tl.chunk % s.splits;
        int64_t c_row0, c_rows;
        agmm_sched_chunk_rows(&s, split, &c_row0, &c_rows);
        int64_t in_chunk = tl.shard_row0 - c_row0;

        /* chunk */
        if (tl.chunk < 0 || tl.chunk >= s.nranks * s.splits || src != tl.src_rank)
            fail(t, P_CHUNK, &s, "tile %lld: chunk %d, src_rank %d", (long long)i, tl.chunk, tl.src_rank);
        else if (tl.row0 != (int64_t)src * s.m + tl.shard_row0)
            fail(t, P_CHUNK, &s, "tile %lld: row0 %lld != src*M + shard_row0 %lld", (long long)i, (long long)tl.row0,
                 (long long)tl.shard_row0);
        else if (in_chunk < 0 || in_chunk % s.bm != 0 || tl.rows < 1 || in_chunk + tl.rows > c_rows)
            fail(t, P_CHUNK, &s, "tile %lld: rows [%lld, +%d) outside chunk %d rows [%lld, +%lld)", (long long)i,
                 (long long)tl.shard_row0, tl.rows, tl.chunk, (long long)c_row0, (long long)c_rows);
        else if (tl.rows != (c_rows - in_chunk < s.bm ? c_rows - in_chunk : s.bm))
            fail(t, P_CHUNK, &s, "tile %lld: rows %d not clipped to min(bm, chunk end)", (long long)i, tl.rows);
        else if (tl.col0 < 0 || tl.col0 % s.bn != 0 || tl.col0 >= s.n ||
                 tl.cols != (s.n - tl.col0 < s.bn ? s.n - tl.col0 : s.bn))
            fail(t, P_CHUNK, &s, "tile %lld: col0 %lld cols %d", (long long)i, (long long)tl.col0, tl.cols);

        /* local */
        int want_local = i < s.tiles_per_rank;
        if (tl.local != want_local || (want_local && tl.src_rank != s.rank) || (tl.local != (tl.src_rank == s.rank)))
            fail(t, P_LOCAL, &s, "tile %lld: local=%d src_rank=%d (tiles_per_rank %lld)", (long long)i, tl.local,
                 tl.src_rank, (long long)s.tiles_per_rank);

        /* order: position of the chunk in the rotated sequence never decreases; the block of
         * tile i is rank + i / tiles_per_rank. */
        int64_t pos = (int64_t)((src - s.rank + s.nranks) % s.nranks) * s.splits + split;
        if (pos < prev_pos)
            fail(t, P_ORDER, &s, "tile %lld: chunk %d (position %lld) after position %lld", (long long)i, tl.chunk,
                 (long long)pos, (long long)prev_pos);
        if (src != (s.rank + (int)(i / s.tiles_per_rank)) % s.nranks)
            fail(t, P_ORDER, &s, "tile %lld: src_rank %d, block %lld", (long long)i, src, (long long)(i / s.tiles_per_rank));
        if (pos != prev_pos && split == 0 && agmm_sched_first_tile_of(&s, src) != i)
            fail(t, P_ORDER, &s, "first_tile_of(%d) = %lld, first tile of it at %lld", src,
                 (long long)agmm_sched_first_tile_of(&s, src), (long long)i);

        /* group: (group, col_tile, row_tile) increases lexicographically inside a chunk. */
        int64_t row_tile = in_chunk / s.bm, col_tile = tl.col0 / s.bn, group = row_tile / s.group_m;
        if (tl.chunk == prev_chunk) {
            int ok = group > prev_group ||
                     (group == prev_group && (col_tile > prev_col_tile ||
                                              (col_tile == prev_col_tile && row_tile > prev_row_tile)));
            if (!ok)
                fail(t, P_GROUP, &s, "tile %lld: (group %lld, col tile %lld, row tile %lld) after (%lld, %lld, %lld)",
                     (long long)i, (long long)group, (long long)col_tile, (long long)row_tile, (long long)prev_group,
                     (long long)prev_col_tile, (long long)prev_row_tile);
        }
        prev_chunk = tl.chunk;
        prev_pos = pos;
        prev_group = group;
        prev_row_tile = row_tile;
        prev_col_tile = col_tile;
        spans[i] = (span){col_tile, tl.row0, tl.rows};
    }

    /* cover: per column tile, the row spans partition [0, W*M). */
    qsort(spans, (size_t)ntiles, sizeof *spans, span_cmp);
    int64_t expect_col = 0, next_row = 0;
    for (int64_t i = 0; i < ntiles; i++) {
        if (spans[i].col_tile != expect_col) {
            if (next_row != total_rows || spans[i].col_tile != expect_col + 1) {
                fail(t, P_COVER, &s, "column tile %lld covers rows up to %lld of %lld", (long long)expect_col,
                     (long long)next_row, (long long)total_rows);
                return;
            }
            expect_col++;
            next_row = 0;
        }
        if (spans[i].row0 != next_row) {
            fail(t, P_COVER, &s, "column tile %lld: rows %lld.. %s", (long long)expect_col, (long long)next_row,
                 spans[i].row0 > next_row ? "never covered" : "covered twice");
            return;
        }
        next_row += spans[i].rows;
    }
    if (next_row != total_rows || expect_col != s.col_tiles - 1)
        fail(t, P_COVER, &s, "ended at column tile %lld row %lld (want %lld, %lld)", (long long)expect_col,
             (long long)next_row, (long long)(s.col_tiles - 1), (long long)total_rows);
}

static void report(const tally *t, const char *what)
{
    for (int p = 0; p < NPROPS; p++)
        agmm_check(t->failures[p] == 0, "schedule %s: %s: %lld cases, %lld tiles, %lld failures%s", what, prop_what[p],
                   (long long)t->cases, (long long)t->tiles, (long long)t->failures[p], t->first[p]);
}

void test_schedule_edges(void)
{
    /* Two cases worked by hand. */
    agmm_sched one = {.m = 1, .n = 1, .nranks = 1, .rank = 0, .splits = 1, .bm = 16, .bn = 16, .group_m = 1};
    agmm_sched_init(&one);
    agmm_tile t0;
    agmm_sched_tile(&one, 0, &t0);
    agmm_check(agmm_sched_num_tiles(&one) == 1 && t0.row0 == 0 && t0.rows == 1 && t0.cols == 1 && t0.local &&
                   t0.chunk == 0,
               "schedule W=1 M=1 N=1: one local tile of 1 x 1 in chunk 0");

    /* W=2, rank 1, M=10 in 3 chunks of rows [0,3) [3,6) [6,10), bm=2, N=5, bn=4: 2 + 2 + 2 row
     * tiles by 2 column tiles per rank block; rank 1's block first; its chunk 0 (id 3) has row
     * tiles at shard rows 0 and 2 (the second 1 row tall); rank 0's block starts at tile 12. */
    agmm_sched s = {.m = 10, .n = 5, .nranks = 2, .rank = 1, .splits = 3, .bm = 2, .bn = 4, .group_m = 1};
    agmm_sched_init(&s);
    agmm_tile a, b, c, d;
    agmm_sched_tile(&s, 0, &a);
    agmm_sched_tile(&s, 1, &b);
    agmm_sched_tile(&s, 2, &c);
    agmm_sched_tile(&s, s.tiles_per_rank, &d);
    agmm_check(s.col_tiles == 2 && s.tiles_per_rank == 6 * 2 && a.row0 == 10 && a.rows == 2 && a.cols == 4 &&
                   a.chunk == 3 && a.local && b.row0 == 10 && b.col0 == 4 && b.cols == 1 && c.row0 == 12 &&
                   c.rows == 1 && c.shard_row0 == 2 && d.row0 == 0 && d.chunk == 0 && !d.local &&
                   agmm_sched_first_tile_of(&s, 0) == 12 && agmm_sched_first_tile_of(&s, 1) == 0,
               "schedule W=2 rank=1 M=10 splits=3 bm=2 N=5 bn=4: hand-worked tiles 0, 1, 2, 12 and first_tile_of");

    /* Every small case. */
    static const int bms[] = {1, 2, 3, 16};
    static const int bns[] = {1, 4, 16};
    static const int ns[] = {1, 5, 17};
    tally t = {0};
    span *spans = malloc(sizeof *spans * 4 * 12 * 17);
    for (int w = 1; w <= 4; w++)
        for (int r = 0; r < w; r++)
            for (int m = 1; m <= 12; m++)
                for (int ni = 0; ni < 3; ni++)
                    for (int bi = 0; bi < 4; bi++)
                        for (int bj = 0; bj < 3; bj++)
                            for (int sp = 1; sp <= (m < 4 ? m : 4); sp++)
                                for (int g = 1; g <= 3; g++)
                                    check_sched(&t, (agmm_sched){.m = m, .n = ns[ni], .nranks = w, .rank = r,
                                                                .splits = sp, .bm = bms[bi], .bn = bns[bj],
                                                                .group_m = g},
                                                spans);
    free(spans);
    report(&t, "exhaustive W<=4 M<=12");
}

void test_schedule_random(void)
{
    enum { CASES = 2000, MAX_TILES = 16384 };
    static const int sizes[] = {16, 64, 128, 256};
    uint64_t rng = 0x5c4ed01e;
    tally t = {0};
    span *spans = malloc(sizeof *spans * MAX_TILES);
    for (int i = 0; i < CASES; i++) {
        agmm_sched s = {0};
        s.nranks = 1 + (int)(agmm_rng_next(&rng) % 8);
        s.rank = (int)(agmm_rng_next(&rng) % (uint64_t)s.nranks);
        s.m = 1 + (int64_t)(agmm_rng_next(&rng) % 5000);
        s.n = 1 + (int64_t)(agmm_rng_next(&rng) % 3000);
        s.bm = sizes[agmm_rng_next(&rng) % 4];
        s.bn = sizes[agmm_rng_next(&rng) % 4];
        int max_splits = s.m < 16 ? (int)s.m : 16;
        s.splits = 1 + (int)(agmm_rng_next(&rng) % (uint64_t)max_splits);
        s.group_m = 1 + (int)(agmm_rng_next(&rng) % 16);
        /* Moderate sizes: halve N until the tiles fit the span buffer. */
        for (;;) {
            agmm_sched probe = s;
            agmm_sched_init(&probe);
            if (agmm_sched_num_tiles(&probe) <= MAX_TILES || s.n == 1)
                break;
            s.n = (s.n + 1) / 2;
        }
        agmm_sched probe = s;
        agmm_sched_init(&probe);
        if (agmm_sched_num_tiles(&probe) > MAX_TILES)
            continue;
        check_sched(&t, s, spans);
    }
    free(spans);
    report(&t, "random W 1..8 M 1..5000 N 1..3000 bm,bn in {16,64,128,256} splits 1..16 group_m 1..16");
}

/* The dividers (agmm_fastdiv) against `/`: every divisor 1..4096 on the dividends around its
 * multiples and the ends of the range, powers of two and their neighbours up to 2^31, and 200,000
 * random (n, d) pairs; a divider made for dividends past 2^32 (or d > 2^31) divides plainly. */
typedef struct {
    int64_t cases, wrong;
    char first[160];
} fd_tally;

static void fd_check(fd_tally *t, int64_t d, int64_t n)
{
    const int64_t q = agmm_fastdiv_div(n, agmm_fastdiv_make(d, UINT32_MAX));
    t->cases++;
    if (q != n / d && t->wrong++ == 0)
        snprintf(t->first, sizeof t->first, " (first: %lld / %lld gave %lld)", (long long)n, (long long)d, (long long)q);
}

void test_schedule_fastdiv(void)
{
    uint64_t rng = 0xd1f1de5;
    fd_tally t = {0};
    for (int64_t d = 1; d <= 4096; d++) {
        const int64_t ns[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, UINT32_MAX, UINT32_MAX - 1, (int64_t)1 << 31,
                              UINT32_MAX / d * d, UINT32_MAX / d * d - 1};
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            fd_check(&t, d, ns[i]);
        for (int i = 0; i < 16; i++)
            fd_check(&t, d, (int64_t)(agmm_rng_next(&rng) & UINT32_MAX));
    }
    for (int e = 1; e <= 31; e++)
        for (int64_t d = ((int64_t)1 << e) - 1; d <= ((int64_t)1 << e) + 1; d++)
            for (int i = 0; i < 64; i++)
                fd_check(&t, d, i < 4 ? UINT32_MAX - i : (int64_t)(agmm_rng_next(&rng) & UINT32_MAX));
    for (int i = 0; i < 200000; i++) {
        const int64_t d = 1 + (int64_t)(agmm_rng_next(&rng) % ((uint64_t)1 << (1 + agmm_rng_next(&rng) % 31)));
        fd_check(&t, d, (int64_t)(agmm_rng_next(&rng) & UINT32_MAX));
    }
    agmm_check(t.wrong == 0, "fastdiv: n / d for %lld (n < 2^32, 1 <= d <= 2^31) pairs: %lld wrong%s",
               (long long)t.cases, (long long)t.wrong, t.first);
    const int64_t big = (int64_t)1 << 40, d31 = ((int64_t)1 << 31) + 1;
    const agmm_fastdiv big_n = agmm_fastdiv_make(7, big), big_d = agmm_fastdiv_make(d31, 9);
    agmm_check(big_n.mul == 0 && big_d.mul == 0 && agmm_fastdiv_div(big, big_n) == big / 7 &&
                   agmm_fastdiv_div(big + 5, big_d) == (big + 5) / d31,
               "fastdiv: dividends past 2^32 and divisors past 2^31 divide plainly");
}

/* A schedule with every divider plain (mul = 0): the decode the dividers replace. */
static agmm_sched plain_dividers(agmm_sched s)
{
    agmm_fastdiv *all[] = {&s.div_rank, &s.div_group, &s.div_group_m, &s.div_col, &s.div_bm, &s.div_short};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        all[i]->mul = 0;
    return s;
}

/* Every tile of 3,000 random schedules (both visits; the first 20,000 of the larger ones) decodes to
 * the same record with the plan's multipliers as with plain division by the same divisors: the
 * multipliers, not the divisors. That the divisors and the decode built on them are right is the
 * property tests' business above (a divisor off by one fails them, not this). */
void test_schedule_dividers(void)
{
    uint64_t rng = 0xfa57d1;
    int64_t cases = 0, tiles = 0, wrong = 0;
    char first[200] = "";
    for (int i = 0; i < 3000; i++) {
        agmm_sched s = {0};
        s.nranks = 1 + (int)(agmm_rng_next(&rng) % 8);
        s.rank = (int)(agmm_rng_next(&rng) % (uint64_t)s.nranks);
        s.m = 1 + (int64_t)(agmm_rng_next(&rng) % 4000);
        s.n = 1 + (int64_t)(agmm_rng_next(&rng) % 2000);
        s.bm = 1 + (int)(agmm_rng_next(&rng) % 256);
        s.bn = 8 + (int)(agmm_rng_next(&rng) % 256);
        s.group_m = 1 + (int)(agmm_rng_next(&rng) % 16);
        s.splits = i % 3 ? 1 : 1 + (int)(agmm_rng_next(&rng) % (uint64_t)(s.m < 8 ? s.m : 8));
        if (i % 4 == 3) {
            s.splits = 1;
            s.block_rows = (s.m + s.nranks - 1) / s.nranks;
        }
        agmm_sched_init(&s);
        const agmm_sched p = plain_dividers(s);
        const int64_t n = agmm_sched_num_tiles(&s);
        cases++;
        for (int64_t idx = 0; idx < n && idx < 20000; idx++) {
            agmm_tile a, b;
            agmm_sched_tile(&s, idx, &a);
            agmm_sched_tile(&p, idx, &b);
            tiles++;
            if ((a.row0 != b.row0 || a.shard_row0 != b.shard_row0 || a.col0 != b.col0 || a.rows != b.rows ||
                 a.cols != b.cols || a.chunk != b.chunk || a.src_rank != b.src_rank || a.local != b.local) &&
                wrong++ == 0)
                snprintf(first, sizeof first,
                         " (first: W=%d rank=%d M=%lld N=%lld bm=%d bn=%d splits=%d group_m=%d block_rows=%lld tile %lld)",
                         s.nranks, s.rank, (long long)s.m, (long long)s.n, s.bm, s.bn, s.splits, s.group_m,
                         (long long)s.block_rows, (long long)idx);
        }
    }
    agmm_check(wrong == 0, "schedule: the dividers' decode equals plain division's: %lld schedules, %lld tiles, %lld differ%s",
               (long long)cases, (long long)tiles, (long long)wrong, first);
}

/* Pull mode's stores of the gathered A (agmm_sched_store_kb): for every column count up to 40 and
 * K block count up to 70, with each tile whole or cut into 2-5 pieces as the split tail cuts them
 * (piece q: K blocks [q*KB/S, (q+1)*KB/S)), every K block of a row is stored by exactly one unit
 * of that row, inside that unit's K blocks. */
void test_schedule_pull_stores(void)
{
    int64_t cases = 0, wrong = 0;
    char first[160] = "";
    int count[70];
    for (int cols = 1; cols <= 40; cols++)
        for (int kb_n = 1; kb_n <= 70; kb_n++)
            for (int split = 1; split <= 5; split++) {
                for (int kb = 0; kb < kb_n; kb++)
                    count[kb] = 0;
                int outside = 0;
                for (int col = 0; col < cols; col++)
                    for (int q = 0; q < split; q++) {
                        const int kb0 = q * kb_n / split, kb1 = (q + 1) * kb_n / split;
                        for (int kb = agmm_sched_store_kb(cols, col, kb0); kb < kb1; kb += cols) {
                            outside |= kb < kb0 || kb % cols != col;
                            count[kb]++;
                        }
                    }
                int bad = outside;
                for (int kb = 0; kb < kb_n; kb++)
                    bad |= count[kb] != 1;
                cases++;
                if (bad && wrong++ == 0)
                    snprintf(first, sizeof first, " (first: col_tiles=%d K blocks=%d pieces=%d)", cols, kb_n, split);
            }
    agmm_check(wrong == 0, "schedule: pull's gathered-A stores, each (row, K block) once by its column's unit: %lld "
               "cases, %lld wrong%s", (long long)cases, (long long)wrong, first);
}

/* ---- the reduce-scatter visit (block_rows > 0) ----
 *   cover    every element of the M x N partial in exactly one tile
 *   tiles    row tiles of bm over all M rows (not clipped to blocks), columns clipped to N
 *   home     src_rank = chunk = the block of the tile's first row, local = homed in rank's block,
 *            shard_row0 = row0
 *   order    home blocks visited in the order rank+1, rank+2, ..., rank: every tile homed in
 *            another block before every tile homed in the rank's own
 *   group    inside a block, group_m row tiles at a time, column-major inside a group
 *   run      as the all-gather visit's */
enum { RS_COVER, RS_TILES, RS_HOME, RS_ORDER, RS_GROUP, RS_RUN, RS_PROPS };
static const char *const rs_what[RS_PROPS] = {
    "every element of the partial in exactly one tile",
    "row tiles of bm over all M rows, clipped to M and N only",
    "home block, local, chunk and shard_row0 right",
    "home blocks in the order rank+1, ..., rank: the rank's own tiles last",
    "inside a block, group_m row tiles at a time, column-major in a group",
    "run_first/run_last: inside a run the next tile is right below, runs end where the column changes",
};

static void check_rs(tally *t, agmm_sched s, span *spans)
{
    s.block_rows = (s.m + s.nranks - 1) / s.nranks;
    s.splits = 1;
    agmm_sched_init(&s);
    const int64_t ntiles = agmm_sched_num_tiles(&s), rb = s.block_rows;
    t->cases++;
    t->tiles += ntiles;
    int64_t prev_pos = -1, prev_group = -1, prev_col = -1, prev_row = -1, first_row_tile = 0;
    int prev_home = -1, seen_own = 0;
    agmm_tile prev_tile;
    for (int64_t i = 0; i < ntiles; i++) {
        agmm_tile tl;
        agmm_sched_tile(&s, i, &tl);
        check_run(t, RS_RUN, &s, i, ntiles, i ? &prev_tile : NULL, &tl);
        prev_tile = tl;
        const int home = (int)(tl.row0 / rb);
        if (tl.row0 < 0 || tl.row0 >= s.m || tl.row0 % s.bm != 0 ||
            tl.rows != (s.m - tl.row0 < s.bm ? s.m - tl.row0 : s.bm) || tl.col0 < 0 || tl.col0 >= s.n ||
            tl.col0 % s.bn != 0 || tl.cols != (s.n - tl.col0 < s.bn ? s.n - tl.col0 : s.bn))
            fail(t, RS_TILES, &s, "tile %lld: rows [%lld, +%d) cols [%lld, +%d)", (long long)i, (long long)tl.row0,
                 tl.rows, (long long)tl.col0, tl.cols);
        if (tl.src_rank != home || tl.chunk != home || tl.local != (home == s.rank) || tl.shard_row0 != tl.row0)
            fail(t, RS_HOME, &s, "tile %lld at row %lld (block %d): src_rank %d chunk %d local %d shard_row0 %lld",
                 (long long)i, (long long)tl.row0, home, tl.src_rank, tl.chunk, tl.local, (long long)tl.shard_row0);
        const int64_t pos = (home - s.rank - 1 + 2 * s.nranks) % s.nranks;
        if (pos < prev_pos || (seen_own && home != s.rank))
            fail(t, RS_ORDER, &s, "tile %lld homed in block %d (position %lld) after position %lld%s", (long long)i,
                 home, (long long)pos, (long long)prev_pos, seen_own ? ", after an own tile" : "");
        seen_own |= home == s.rank;
        if (home != prev_home)
            first_row_tile = tl.row0 / s.bm, prev_group = -1;
        const int64_t row_tile = tl.row0 / s.bm - first_row_tile, col_tile = tl.col0 / s.bn,
                      group = row_tile / s.group_m;
        if (home == prev_home &&
            !(group > prev_group ||
              (group == prev_group && (col_tile > prev_col || (col_tile == prev_col && row_tile > prev_row)))))
            fail(t, RS_GROUP, &s, "tile %lld: (group %lld, col tile %lld, row tile %lld) after (%lld, %lld, %lld)",
                 (long long)i, (long long)group, (long long)col_tile, (long long)row_tile, (long long)prev_group,
                 (long long)prev_col, (long long)prev_row);
        prev_pos = pos, prev_home = home, prev_group = group, prev_col = col_tile, prev_row = row_tile;
        spans[i] = (span){col_tile, tl.row0, tl.rows};
    }
    /* cover: per column tile, the row spans partition [0, M). */
    qsort(spans, (size_t)ntiles, sizeof *spans, span_cmp);
    int64_t col = 0, next_row = 0;
    for (int64_t i = 0; i < ntiles; i++) {
        if (spans[i].col_tile != col) {
            if (next_row != s.m || spans[i].col_tile != col + 1) {
                fail(t, RS_COVER, &s, "column tile %lld covers rows up to %lld of %lld", (long long)col,
                     (long long)next_row, (long long)s.m);
                return;
            }
            col++, next_row = 0;
        }
        if (spans[i].row0 != next_row) {
            fail(t, RS_COVER, &s, "column tile %lld: rows %lld.. %s", (long long)col, (long long)next_row,
                 spans[i].row0 > next_row ? "never covered" : "covered twice");
            return;
        }
        next_row += spans[i].rows;
    }
    if (next_row != s.m || col != s.col_tiles - 1)
        fail(t, RS_COVER, &s, "ended at column tile %lld row %lld (want %lld, %lld)", (long long)col,
             (long long)next_row, (long long)(s.col_tiles - 1), (long long)s.m);
}

static void rs_report(const tally *t, const char *what)
{
    for (int p = 0; p < RS_PROPS; p++)
        agmm_check(t->failures[p] == 0, "reduce-scatter visit %s: %s: %lld cases, %lld tiles, %lld failures%s", what,
                   rs_what[p], (long long)t->cases, (long long)t->tiles, (long long)t->failures[p], t->first[p]);
}

void test_schedule_reduce_scatter(void)
{
    /* Worked by hand: M = 10, W = 3 (R = 4: blocks [0,4) [4,8) [8,10)), bm = 3 (row tiles at 0, 3,
     * 6, 9: homes 0, 0, 1, 2; tile 3 straddles blocks 0 and 1), N = 5, bn = 4 (2 column tiles),
     * rank 1: block 2's tile first (row 9, 1 row), then block 0's (rows 0, 3; group_m 2: column-major),
     * its own (row 6, straddling into block 2) last. */
    agmm_sched s = {.m = 10, .n = 5, .nranks = 3, .rank = 1, .splits = 1, .bm = 3, .bn = 4, .group_m = 2,
                    .block_rows = 4};
    agmm_sched_init(&s);
    static const int64_t want[8][3] = {{9, 0, 2}, {9, 4, 2}, {0, 0, 0}, {3, 0, 0},
                                       {0, 4, 0}, {3, 4, 0}, {6, 0, 1}, {6, 4, 1}};
    int ok = agmm_sched_num_tiles(&s) == 8 && s.row_tile0 == 3;
    for (int i = 0; ok && i < 8; i++) {
        agmm_tile tl;
        agmm_sched_tile(&s, i, &tl);
        ok = tl.row0 == want[i][0] && tl.col0 == want[i][1] && tl.src_rank == want[i][2] &&
             tl.rows == (i < 2 ? 1 : 3) && tl.cols == (want[i][1] ? 1 : 4) && tl.local == (want[i][2] == 1);
    }
    agmm_check(ok, "reduce-scatter visit M=10 W=3 rank=1 bm=3 N=5 bn=4 group_m=2: hand-worked order of 8 tiles");

    static const int bms[] = {1, 2, 3, 16};
    static const int bns[] = {1, 4, 16};
    static const int ns[] = {1, 5, 17};
    tally t = {0};
    span *spans = malloc(sizeof *spans * 40 * 17);
    for (int w = 1; w <= 8; w++)
        for (int r = 0; r < w; r++)
            for (int m = 1; m <= 40; m++)
                for (int ni = 0; ni < 3; ni++)
                    for (int bi = 0; bi < 4; bi++)
                        for (int bj = 0; bj < 3; bj++)
                            for (int g = 1; g <= 3; g++)
                                check_rs(&t, (agmm_sched){.m = m, .n = ns[ni], .nranks = w, .rank = r, .bm = bms[bi],
                                                          .bn = bns[bj], .group_m = g},
                                         spans);
    free(spans);
    rs_report(&t, "exhaustive W<=8 M<=40");

    enum { CASES = 2000, MAX_TILES = 16384 };
    static const int sizes[] = {64, 128, 256};
    uint64_t rng = 0x2e5ca77e;
    tally u = {0};
    spans = malloc(sizeof *spans * MAX_TILES);
    for (int i = 0; i < CASES; i++) {
        agmm_sched c = {0};
        c.nranks = 1 + (int)(agmm_rng_next(&rng) % 64);
        c.rank = (int)(agmm_rng_next(&rng) % (uint64_t)c.nranks);
        c.m = 1 + (int64_t)(agmm_rng_next(&rng) % 20000);
        c.n = 1 + (int64_t)(agmm_rng_next(&rng) % 3000);
        c.bm = sizes[agmm_rng_next(&rng) % 3];
        c.bn = sizes[agmm_rng_next(&rng) % 3];
        c.group_m = 1 + (int)(agmm_rng_next(&rng) % 16);
        while ((c.m + c.bm - 1) / c.bm * ((c.n + c.bn - 1) / c.bn) > MAX_TILES)
            c.n = (c.n + 1) / 2;
        check_rs(&u, c, spans);
    }
    free(spans);
    rs_report(&u, "random W 1..64 M 1..20000 N 1..3000 bm,bn in {64,128,256} group_m 1..16");
}
