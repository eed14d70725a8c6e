/* What the two row-parallel matmul operations share as types (internal to src/api):
 * op_matmul_reduce_scatter.c and op_matmul_all_reduce.c have the same descriptor fields and the
 * same io checks but for their output. */
#ifndef AGMM_API_OP_MATMUL_REDUCE_H
#define AGMM_API_OP_MATMUL_REDUCE_H

#include "api.h"
#include "../core/row_split.h"
#include "../core/validate.h"

/* The shape check (core/validate.h). */
agmm_status agmm_op_mr_check(agmm_op op, int64_t m, int64_t n, int64_t k, agmm_layout b_layout,
                             const int64_t *reserved, size_t reserved_bytes, agmm_error *err);

/* The operations' limits (api.h's limit hook): K, and N with a row-major B, multiples of
 * AGMM_MATMUL_REDUCE_ROW_MULTIPLE; 0 for the others. */
int64_t agmm_op_mr_limit(agmm_limit what);

/* auto's scratch (api.h): A_r (m x k), B_r (k x n) and the output (out_rows x n), bf16. */
int agmm_op_mr_scratch(int64_t m, int64_t n, int64_t k, int64_t out_rows, size_t bytes[]);

/* No symmetric input: always the plan's (none). */
const void *agmm_op_mr_input_of(const void *io);

/* The checks of a run's buffers (A: m x k, B: k x n): on GPUs A, B and the output 16-byte aligned
 * (cuBLASLt's plans, the engine's TMA maps); the output (out_bytes at out, named out_name)
 * overlapping neither A nor B. */
agmm_status agmm_op_mr_check_buffers(const agmm_plan *plan, int64_t m, int64_t n, int64_t k, const void *a,
                                     const void *b, void *out, const char *out_name, size_t out_bytes, agmm_error *err);

/* "M=64 N=32 K=16 b_layout=col": what the ranks compare at plan creation. */
size_t agmm_op_mr_describe(char *buf, size_t len, int64_t m, int64_t n, int64_t k, agmm_layout b_layout);

#endif
