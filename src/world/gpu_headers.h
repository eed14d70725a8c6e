/* The vendor headers host C code needs (CUDA runtime, cuBLASLt, NCCL), for C11 translation units:
 * cublasLt.h and nccl.h declare a few functions with empty parameter lists (e.g.
 * ncclGroupStart()), which -Wstrict-prototypes -Werror rejects in C. */
#ifndef AGMM_WORLD_GPU_HEADERS_H
#define AGMM_WORLD_GPU_HEADERS_H

#if defined(__GNUC__) && !defined(__cplusplus)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#endif
#include <cuda_runtime_api.h>
#include <cublasLt.h>
#include <nccl.h>
#if defined(__GNUC__) && !defined(__cplusplus)
#pragma GCC diagnostic pop
#endif

#endif
