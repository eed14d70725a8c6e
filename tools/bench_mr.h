/* agmm-bench's inputs and fp64 reference for matmul_reduce_scatter and matmul_all_reduce
 * (bench_mr.c). */
#ifndef AGMM_TOOLS_BENCH_MR_H
#define AGMM_TOOLS_BENCH_MR_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"
#include "api/agmm_ext.h"

/* What every rank's inputs are: A_p from seed_a[p] (M x K, row-major), B_p from seed_b[p] (K x N
 * in layout), each element uniform in [-1, 1) rounded to bf16 (bench_mr_fill). */
typedef struct {
    int nranks;
    int64_t m, n, k;
    agmm_layout layout;
    uint64_t seed_a[AGMM_MAX_RANKS], seed_b[AGMM_MAX_RANKS];
} bench_mr_ref;

/* count bf16 values of the stream `seed`. */
void bench_mr_fill(uint16_t *x, size_t count, uint64_t seed);

/* The error of rows [row0, row0 + rows) of S in `out` (rows x N): ||S - S64||_F / ||T||_F, S64 the
 * fp64 sum over every rank's P_p = A_p * B_p and T = sum_p |P_p| elementwise (the scale of the terms,
 * not of S, which cancellation makes small). Every element for small shapes, else sampled rows
 * (first, last, spread) and columns; *nan_seen set if any element of out is NaN. The library
 * rounds each P_p and then S to bf16 (docs/matmul_reduce.md, "The sum"): at most 2^-9 T and
 * 2^-9 |S| <= 2^-9 T, 2^-8 T in all; NCCL rounds once per hop (random errors, ~1e-3 of T). The
 * callers' tolerance is 1e-2 (CELL_TOL_BF16). A partial missing, doubled or of the wrong sign costs
 * ||P_p||_F, about 1/W of ||T||_F for W like partials: above 1e-2 up to the 64 ranks of a world. */
double bench_mr_check(const bench_mr_ref *r, const uint16_t *out, int64_t row0, int64_t rows, int *nan_seen);

/* FNV-1a of the bytes: what the ranks compare to see the same S. */
uint64_t bench_mr_hash(const void *p, size_t bytes);

#endif
