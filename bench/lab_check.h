/* The bench programs' check of a CUDA runtime call (gemm-lab and the one-file experiments of
 * bench/lab.mk): on failure it prints the call, where it was and CUDA's reason, and exits with 1.
 * Bench programs only; the library returns an agmm_status instead (src/core/cuda_check.h). */
#ifndef AGMM_BENCH_LAB_CHECK_H
#define AGMM_BENCH_LAB_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define LAB_CHECK(x)                                                                               \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
