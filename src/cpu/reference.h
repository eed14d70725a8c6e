/* Plain fp64 references for checking every backend (CPU tests, GPU tests, agmm-bench): the
 * all-gather matmul's GEMM, the all-reduce sum, all_reduce_rmsnorm, and the error measures the
 * checks report. Deliberately naive (llm.c's "plain CPU reference first"): no blocking, no
 * threads, fp64 everywhere, so a reader can trust them at a glance. Use them on small shapes. */
#ifndef AGMM_CPU_REFERENCE_H
#define AGMM_CPU_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"

/* C = A * B in fp64.
 *   a        bf16, rows x k, row-major (e.g. the gathered A)
 *   b        bf16, k x n in `b_layout` (COL_MAJOR: element (kk, nn) at b[nn*k + kk];
 *            ROW_MAJOR: at b[kk*n + nn])
 *   c        if not NULL: rows x n doubles, row-major, the exact-as-fp64 products summed in fp64
 *   c_bf16   if not NULL: the same rounded once to bf16 (round to nearest even)
 * With small-integer inputs (|sum| <= 256) both are exact, and a backend's bf16 C must equal
 * c_bf16 bit for bit. Returns AGMM_ERR_NO_MEMORY if a row buffer cannot be allocated. */
agmm_status agmm_ref_gemm_bf16(const uint16_t *a, const uint16_t *b, agmm_layout b_layout, int64_t rows, int64_t n,
                               int64_t k, double *c, uint16_t *c_bf16);

/* out[i] = sum over r = 0..nranks-1 of inputs[r][i], in fp64; inputs are `dtype` vectors of n
 * elements (bf16 as uint16_t, fp32 as float). */
void agmm_ref_all_reduce(const void *const *inputs, int nranks, int64_t n, agmm_dtype dtype, double *out);

/* all_reduce_rmsnorm in fp64, for t rows of h (x[r]: rank r's t x h bf16 input; bias (h) and
 * residual (t x h) may be NULL): r = sum over ranks of x + bias + residual in fp64; r_bf16 = r
 * rounded once to bf16; y = r_bf16 / sqrt(mean over the row of r_bf16^2 + eps) * gamma in fp64,
 * from the rounded r' as the backends compute it (agmm.h). eps is taken as the backends use it:
 * rounded to fp32. r, r_bf16 and y (t * h each) may each be NULL. AGMM_ERR_NO_MEMORY if a row
 * buffer cannot be allocated. */
agmm_status agmm_ref_all_reduce_rmsnorm(const uint16_t *const *x, int nranks, const uint16_t *bias,
                                        const uint16_t *residual, const uint16_t *gamma, int64_t t, int64_t h,
                                        double eps, double *r, uint16_t *r_bf16, double *y);

/* x rounded to the nearest bf16 (ties to even) in one step; NaN stays NaN, overflow gives inf. */
uint16_t agmm_ref_f64_to_bf16(double x);
/* x rounded to the nearest fp32 (the C conversion). */
float agmm_ref_f64_to_f32(double x);

/* Relative Frobenius error ||got - want|| / ||want|| over `count` elements of `got` (`dtype`: bf16
 * or fp32) against fp64 `want`; ||got - want|| when want is all zeros. NaN or inf anywhere in
 * `got` gives NaN/inf, so `err <= tol` fails on a poisoned element. */
double agmm_ref_rel_frobenius(const void *got, agmm_dtype dtype, const double *want, int64_t count);

/* Largest |got - want| over `count` elements, NaN if any element of got is NaN. */
double agmm_ref_max_abs_error(const void *got, agmm_dtype dtype, const double *want, int64_t count);

/* Index of the first element where two arrays of `count` elements of `elem_bytes` each differ bit
 * for bit, or -1 if they are equal. */
int64_t agmm_ref_first_mismatch(const void *x, const void *y, int64_t count, size_t elem_bytes);

#endif
