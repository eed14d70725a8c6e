/* Random bf16 operands on the device (fill.cu), for timing kernels on data like a model's: a
 * product timed on constant operands runs faster than on real ones (less switching power), and
 * not by the same factor for every kernel. Plain C header. */
#ifndef AGMM_KERNELS_FILL_H
#define AGMM_KERNELS_FILL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* Enqueues a fill of x[0..n) with bf16 values uniform in [-1, 1), a hash of (seed, index). */
cudaError_t agmm_fill_random_bf16(void *x, size_t n, uint64_t seed, cudaStream_t stream);
#ifdef __cplusplus
}
#endif
#endif
