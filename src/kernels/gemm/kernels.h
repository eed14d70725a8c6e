/* The GEMM engine's kernel table (internal; plain C): one kernel per A source, B layout and tile
 * config, instantiated by the inst_*.cu files from gemm_configs.h's list, so the table and the
 * policy's config table (policy.h) cannot disagree. */
#ifndef AGMM_KERNELS_GEMM_KERNELS_H
#define AGMM_KERNELS_GEMM_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const void *fn;    /* the __global__ function, for cudaLaunchKernelExC and attribute calls */
    size_t smem_bytes; /* its dynamic shared memory */
} agmm_gemm_kernel;

/* Indexed by config (gemm_configs.h order). */
extern const agmm_gemm_kernel agmm_gemm_kernels_plain_bcol[], agmm_gemm_kernels_plain_brow[];
extern const agmm_gemm_kernel agmm_gemm_kernels_chunks_bcol[], agmm_gemm_kernels_chunks_brow[];
extern const agmm_gemm_kernel agmm_gemm_kernels_peers_bcol[], agmm_gemm_kernels_peers_brow[];

#ifdef __cplusplus
}
#endif
#endif /* AGMM_KERNELS_GEMM_KERNELS_H */
