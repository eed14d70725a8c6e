/* AGMM_HD: the qualifier of a pure header function compiled both into the C library (CPU code,
 * the CPU tests) and into CUDA kernels, so that the CPU tests prove what the GPU runs. */
#ifndef AGMM_CORE_HD_H
#define AGMM_CORE_HD_H

#if defined(__CUDACC__)
#define AGMM_HD __host__ __device__ __forceinline__
#else
#define AGMM_HD static inline
#endif

#endif
