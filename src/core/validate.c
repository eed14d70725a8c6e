/* Shape and argument validation (see validate.h). */
#include <float.h>

#include "validate.h"

#include <stdio.h>

int agmm_overlap(const void *x, size_t x_bytes, const void *y, size_t y_bytes)
{
    const uintptr_t a = (uintptr_t)x, b = (uintptr_t)y;
    return x != NULL && y != NULL && x_bytes && y_bytes && a < b + y_bytes && b < a + x_bytes;
}

int64_t agmm_mul_checked(int64_t a, int64_t b)
{
    if (a < 0 || b < 0)
        return -1;
    if (a != 0 && b > AGMM_MAX_ELEMS / a)
        return -1;
    return a * b;
}

size_t agmm_dtype_bytes(agmm_dtype dtype) { return dtype == AGMM_DTYPE_F32 ? 4 : 2; }

const char *agmm_dtype_name(agmm_dtype dtype)
{
    switch (dtype) {
    case AGMM_DTYPE_BF16: return "bf16";
    case AGMM_DTYPE_F32: return "fp32";
    }
    return "?";
}

agmm_status agmm_check_reserved(const void *p, size_t bytes, const char *what, agmm_error *err)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != 0)
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                             "%s: the reserved tail is not zero (byte %zu): initialise the struct with = {...} or "
                             "memset; a program built against a newer agmm.h needs a newer library",
                             what, i);
    return AGMM_SUCCESS;
}

agmm_status agmm_check_ag_matmul(const agmm_ag_matmul_desc *d, int nranks, agmm_error *err)
{
    if (d == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "desc is NULL");
    if (d->m < 1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "M=%lld: rows per rank must be >= 1", (long long)d->m);
    if (d->n < 1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "N=%lld: must be >= 1", (long long)d->n);
    if (d->k < 1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "K=%lld: must be >= 1", (long long)d->k);
    if (d->k % AGMM_AG_MATMUL_ROW_MULTIPLE != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "K=%lld is not a multiple of %d: rows of A must be 16-byte aligned for TMA",
                         (long long)d->k, AGMM_AG_MATMUL_ROW_MULTIPLE);
    if (d->n % AGMM_AG_MATMUL_ROW_MULTIPLE != 0 && d->b_layout == AGMM_LAYOUT_ROW_MAJOR)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "N=%lld is not a multiple of %d: rows of a row-major B must be 16-byte aligned",
                         (long long)d->n, AGMM_AG_MATMUL_ROW_MULTIPLE);
    int64_t rows = agmm_mul_checked(nranks, d->m);
    if (rows < 0 || agmm_mul_checked(rows, d->k) < 0 || agmm_mul_checked(rows, d->n) < 0 ||
        agmm_mul_checked(d->k, d->n) < 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "shape W=%d M=%lld N=%lld K=%lld: a matrix would exceed 2^40 elements",
                         nranks, (long long)d->m, (long long)d->n, (long long)d->k);
    if (d->b_layout != AGMM_LAYOUT_COL_MAJOR && d->b_layout != AGMM_LAYOUT_ROW_MAJOR)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "b_layout=%d: must be AGMM_LAYOUT_COL_MAJOR or AGMM_LAYOUT_ROW_MAJOR",
                         (int)d->b_layout);
    if (d->splits < 0 || d->splits > d->m || d->splits > AGMM_AG_MATMUL_MAX_SPLITS)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "splits=%d: must be 0..min(M=%lld, %d)", d->splits,
                         (long long)d->m, AGMM_AG_MATMUL_MAX_SPLITS);
    return agmm_check_reserved(d->reserved, sizeof d->reserved, "ag_matmul desc", err);
}

agmm_status agmm_check_all_reduce(const agmm_all_reduce_desc *d, agmm_error *err)
{
    if (d == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "desc is NULL");
    if (d->n < 1 || d->n > AGMM_MAX_ELEMS)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "n=%lld: elements per rank must be 1..2^40", (long long)d->n);
    if (d->dtype != AGMM_DTYPE_BF16 && d->dtype != AGMM_DTYPE_F32)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "dtype=%d: must be AGMM_DTYPE_BF16 or AGMM_DTYPE_F32", (int)d->dtype);
    return agmm_check_reserved(d->reserved, sizeof d->reserved, "all_reduce desc", err);
}

agmm_status agmm_check_matmul_reduce(const char *op, int64_t m, int64_t n, int64_t k, agmm_layout b_layout,
                                     const int64_t *reserved, size_t reserved_bytes, agmm_error *err)
{
    if (m < 1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s: M=%lld: rows of A must be >= 1", op, (long long)m);
    if (n < 1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s: N=%lld: must be >= 1", op, (long long)n);
    if (k < 1 || k % AGMM_MATMUL_REDUCE_ROW_MULTIPLE != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "%s: K=%lld is not a positive multiple of %d: rows of A must be 16-byte aligned for TMA", op,
                         (long long)k, AGMM_MATMUL_REDUCE_ROW_MULTIPLE);
    if (b_layout != AGMM_LAYOUT_COL_MAJOR && b_layout != AGMM_LAYOUT_ROW_MAJOR)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "%s: b_layout=%d: must be AGMM_LAYOUT_COL_MAJOR or AGMM_LAYOUT_ROW_MAJOR", op, (int)b_layout);
    if (n % AGMM_MATMUL_REDUCE_ROW_MULTIPLE != 0 && b_layout == AGMM_LAYOUT_ROW_MAJOR)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "%s: N=%lld is not a multiple of %d: rows of a row-major B must be 16-byte aligned", op,
                         (long long)n, AGMM_MATMUL_REDUCE_ROW_MULTIPLE);
    if (agmm_mul_checked(m, k) < 0 || agmm_mul_checked(m, n) < 0 || agmm_mul_checked(k, n) < 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s: shape M=%lld N=%lld K=%lld: a matrix would exceed 2^40 elements",
                         op, (long long)m, (long long)n, (long long)k);
    char what[64];
    snprintf(what, sizeof what, "%s desc", op);
    return agmm_check_reserved(reserved, reserved_bytes, what, err);
}

agmm_status agmm_check_all_reduce_rmsnorm(const agmm_all_reduce_rmsnorm_desc *d, agmm_error *err)
{
    if (d == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "desc is NULL");
    if (d->tokens < 1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "tokens=%lld: rows of x must be >= 1", (long long)d->tokens);
    if (d->hidden < 8 || d->hidden % 8 != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "hidden=%lld is not a multiple of 8 (>= 8): rows must be whole 16-byte vectors of bf16",
                         (long long)d->hidden);
    if (agmm_mul_checked(d->tokens, d->hidden) < 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "tokens=%lld x hidden=%lld exceeds 2^40 elements",
                         (long long)d->tokens, (long long)d->hidden);
    /* The norm runs in fp32: an eps that is 0 or inf there would divide by 0 or zero every row. */
    const float eps32 = (float)d->eps;
    if (!(d->eps > 0) || !(eps32 > 0) || eps32 > FLT_MAX)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "eps=%.9g: must be > 0 and finite, and stay so as fp32 (%.9g to %.9g)", d->eps,
                         (double)FLT_TRUE_MIN, (double)FLT_MAX);
    return agmm_check_reserved(d->reserved, sizeof d->reserved, "all_reduce_rmsnorm desc", err);
}
