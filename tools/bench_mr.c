/* agmm-bench's inputs and reference for the row-parallel matmuls (bench_mr.h): every rank's A_r and
 * B_r come from seeds, element i of a seeded stream being computable on its own (splitmix64's
 * state after i steps is seed + i * gamma), so a rank checks sampled elements of S against every
 * rank's inputs without generating or holding them whole. */
#include <math.h>
#include <stdlib.h>

#include "bench_mr.h"

#define GAMMA 0x9e3779b97f4a7c15ull
/* Shapes whose whole S (all ranks' products) is at most this many multiply-adds are checked in
 * full; larger ones on sampled rows and columns. */
#define FULL_CHECK_MACS ((int64_t)1 << 24)
#define SAMPLE_ROWS 6
#define SAMPLE_COLS 64

static float value_at(uint64_t seed, int64_t i)
{
    uint64_t s = seed + (uint64_t)i * GAMMA;
    return agmm_bf16_to_f32(agmm_f32_to_bf16(agmm_rng_uniform(&s)));
}

void bench_mr_fill(uint16_t *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
}

/* Element (row, col) of S in fp64; *scale = the sum over ranks of |P_p(row, col)|. */
static double s_at(const bench_mr_ref *r, int64_t row, int64_t col, double *scale)
{
    double acc = 0;
    *scale = 0;
    for (int p = 0; p < r->nranks; p++) {
        double part = 0;
        for (int64_t kk = 0; kk < r->k; kk++) {
            int64_t bi = r->layout == AGMM_LAYOUT_COL_MAJOR ? col * r->k + kk : kk * r->n + col;
            part += (double)value_at(r->seed_a[p], row * r->k + kk) * (double)value_at(r->seed_b[p], bi);
        }
        acc += part;
        *scale += fabs(part);
    }
    return acc;
}

/* The index-th of `count` samples spread over [0, len): the first, the last, then even spacing. */
static int64_t spread(int64_t index, int64_t count, int64_t len)
{
    if (index == 0 || len <= 1)
        return 0;
    if (index == 1)
        return len - 1;
    return len * (index - 1) / (count - 1);
}

double bench_mr_check(const bench_mr_ref *r, const uint16_t *out, int64_t row0, int64_t rows, int *nan_seen)
{
    const int full = (double)r->nranks * (double)r->m * (double)r->n * (double)r->k <= (double)FULL_CHECK_MACS;
    /* Sampled elements leave most of the output unread: scan all of it for the poison, so a tile
     * never written fails the check even where the error is not computed. */
    for (int64_t i = 0; i < rows * r->n; i++)
        if (isnan(agmm_bf16_to_f32(out[i]))) {
            *nan_seen = 1;
            break;
        }
    const int64_t nrows = full || rows < SAMPLE_ROWS ? rows : SAMPLE_ROWS;
    const int64_t ncols = full || r->n < SAMPLE_COLS ? r->n : SAMPLE_COLS;
    double num = 0, den = 0;
    for (int64_t i = 0; i < nrows; i++) {
        const int64_t row = nrows == rows ? i : spread(i, nrows, rows);
        for (int64_t j = 0; j < ncols; j++) {
            const int64_t col = ncols == r->n ? j : spread(j, ncols, r->n);
            double scale;
            const double want = s_at(r, row0 + row, col, &scale), got = agmm_bf16_to_f32(out[row * r->n + col]);
            num += (got - want) * (got - want);
            den += scale * scale;
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

uint64_t bench_mr_hash(const void *p, size_t bytes)
{
    const unsigned char *c = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}
