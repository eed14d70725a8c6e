/* The row split of matmul_reduce_scatter (agmm.h, "Row split"): which rows of S = sum_r A_r * B_r
 * each rank gets. One definition for the API, every backend, the CPU world and the tests, so the
 * split cannot differ between them. Header-only, plain C (kernels include it too). */
#ifndef AGMM_CORE_ROW_SPLIT_H
#define AGMM_CORE_ROW_SPLIT_H

#include <stdint.h>

/* R = ceil(m / nranks): the rows of the largest block, and the block every slot is sized for. */
static inline int64_t agmm_split_block_rows(int64_t m, int nranks)
{
    return (m + nranks - 1) / nranks;
}

/* Rank q's rows: [*first, *first + returned count), q*R and (q+1)*R clipped to m. */
static inline int64_t agmm_split_rows(int64_t m, int nranks, int q, int64_t *first)
{
    const int64_t r = agmm_split_block_rows(m, nranks);
    const int64_t lo = (int64_t)q * r < m ? (int64_t)q * r : m;
    const int64_t hi = ((int64_t)q + 1) * r < m ? ((int64_t)q + 1) * r : m;
    if (first)
        *first = lo;
    return hi - lo;
}

#endif
