/* Argument and shape validation of the operations, shared by every backend and world. Each check
 * names the argument and what is allowed, so a caller's mistake reads as a sentence. Backends are
 * not core's business: which backend a descriptor names is checked against the table above. */
#ifndef AGMM_CORE_VALIDATE_H
#define AGMM_CORE_VALIDATE_H

#include "agmm.h"
#include "error.h"

/* Largest element count of any single matrix or vector we accept (2^40). */
#define AGMM_MAX_ELEMS ((int64_t)1 << 40)
/* ag_matmul's limits, every backend's (agmm_backend_limit reports them): K, and N with a
 * row-major B, multiples of 8 (16-byte bf16 rows, for TMA and cuBLASLt); at most 1024 chunks per
 * rank (the chunk flags of one plan). */
#define AGMM_AG_MATMUL_ROW_MULTIPLE 8
#define AGMM_AG_MATMUL_MAX_SPLITS 1024

/* m, n >= 1; k >= 1 and a multiple of AGMM_AG_MATMUL_ROW_MULTIPLE, n too with a row-major B;
 * W*m*k, W*m*n and k*n fit AGMM_MAX_ELEMS; splits 0..min(m, AGMM_AG_MATMUL_MAX_SPLITS); layout
 * known; reserved tail zero. */
agmm_status agmm_check_ag_matmul(const agmm_ag_matmul_desc *d, int nranks, agmm_error *err);
/* n >= 1 and within AGMM_MAX_ELEMS; dtype known; reserved tail zero. */
agmm_status agmm_check_all_reduce(const agmm_all_reduce_desc *d, agmm_error *err);
/* The row-parallel matmuls' limits, every backend's: K, and N with a row-major B, multiples of 8
 * (16-byte bf16 rows, as ag_matmul's). */
#define AGMM_MATMUL_REDUCE_ROW_MULTIPLE 8
/* The row-parallel matmuls (one shape check for both; `op` names them in messages): m, n >= 1;
 * k >= 1 and a multiple of AGMM_MATMUL_REDUCE_ROW_MULTIPLE, n too with a row-major B; m*k, m*n,
 * k*n within AGMM_MAX_ELEMS; layout known; reserved tail zero. */
agmm_status agmm_check_matmul_reduce(const char *op, int64_t m, int64_t n, int64_t k, agmm_layout b_layout,
                                     const int64_t *reserved, size_t reserved_bytes, agmm_error *err);
/* tokens >= 1; hidden >= 8 and a multiple of 8 (16-byte rows); tokens * hidden within
 * AGMM_MAX_ELEMS; eps > 0, finite, and neither 0 nor inf as fp32; reserved tail zero. */
agmm_status agmm_check_all_reduce_rmsnorm(const agmm_all_reduce_rmsnorm_desc *d, agmm_error *err);
/* AGMM_ERR_INVALID_ARG naming `what` unless the `bytes` at p are all zero. */
agmm_status agmm_check_reserved(const void *p, size_t bytes, const char *what, agmm_error *err);
/* 1 where [x, x + x_bytes) and [y, y + y_bytes) share a byte (a NULL or empty range shares none). */
int agmm_overlap(const void *x, size_t x_bytes, const void *y, size_t y_bytes);
/* a * b if it stays within AGMM_MAX_ELEMS, else -1. Both >= 0. */
int64_t agmm_mul_checked(int64_t a, int64_t b);
size_t agmm_dtype_bytes(agmm_dtype dtype);
const char *agmm_dtype_name(agmm_dtype dtype);

#endif
