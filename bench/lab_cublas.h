/* gemm-lab's yardstick (bench/gemm_lab.cu times it against the engine): the cuBLAS calls on the
 * lab's operands, in cuBLAS's column-major terms C^T (n x rows) = op(B) A^T for the row-major
 * C = A B:
 *   cuBLASLt  up to MAX_ALGOS of its heuristic's algorithms for the shape, best first by its own
 *             estimate (lt_set); with `clusters`, each also with its cluster shape forced to 1x1,
 *             2x1, 1x2 and 2x2 where cuBLASLt accepts that;
 *   cuBLAS    cublasGemmEx with the default algorithm: torch.matmul's route, and its kernel (ncu:
 *             the same nvjet kernel, grid and time; docs/results, 2026-12-05).
 * Both use one workspace: the lab runs its variants one at a time, on stream 0. Host C. */
#ifndef AGMM_BENCH_LAB_CUBLAS_H
#define AGMM_BENCH_LAB_CUBLAS_H

#include <cublas_v2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "world/gpu_headers.h" /* cublasLt.h, as C11 takes it */

#ifdef __cplusplus
extern "C" {
#endif

#define MAX_ALGOS 16
#define MAX_LT (5 * MAX_ALGOS) /* the heuristic's and, with clusters, 4 cluster shapes of each */

/* A cuBLAS call that must work (set-up, a timed call already checked once): exit with its status. */
#define CHECK_LT(x)                                                                              \
    do {                                                                                         \
        cublasStatus_t s_ = (x);                                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                       \
            fprintf(stderr, "%s:%d: %s -> cublas status %d\n", __FILE__, __LINE__, #x, (int)s_); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

typedef struct {
    cublasLtHandle_t lt;
    cublasHandle_t blas;
    void *ws;
    size_t ws_bytes;
    const void *a, *b; /* A: rows x k row-major; B: k x n, column-major (B^T row-major) or row-major */
} lab_cublas;

/* One shape's cuBLASLt descriptors and candidates, and what cublasGemmEx needs of it. */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t lb, la, lc;
    cublasOperation_t ta; /* B's op */
    int64_t rows, n, k, ldb;
    cublasLtMatmulHeuristicResult_t h[MAX_LT];
    int count;
} lt_set;

/* The handles, on the lab's workspace and operands. */
void lab_cublas_init(lab_cublas *Y, void *ws, size_t ws_bytes, const void *a, const void *b);
/* Exits when the heuristic offers nothing. */
void lt_set_make(const lab_cublas *Y, lt_set *P, int64_t rows, int64_t n, int64_t k, int b_col_major, int want,
                 int clusters);
void lt_set_free(lt_set *P);
/* Enqueue C = A B into c with algorithm i of P, or with cublasGemmEx. */
cublasStatus_t lt_run(const lab_cublas *Y, const lt_set *P, int i, void *c);
cublasStatus_t blas_run(const lab_cublas *Y, const lt_set *P, void *c);
/* "id=21:tile=..:sk=1:st=..:cl=..": which kernel family algorithm i is, for the CSV. */
void lt_algo_name(const lt_set *P, int i, char *out, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* AGMM_BENCH_LAB_CUBLAS_H */
