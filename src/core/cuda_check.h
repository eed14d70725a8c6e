/* The CUDA runtime check for host C code of every layer (internal; files built with CUDA only):
 * records "file:line: call -> name (text)" where the failure starts and jumps to the function's
 * `fail` label with `st` set, like AGMM_TRY. world/gpu_check.h adds NCCL's and cuBLAS's. */
#ifndef AGMM_CORE_CUDA_CHECK_H
#define AGMM_CORE_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "error.h"

#define AGMM_CUDA_TRY(st, err, call)                                                               \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            (st) = AGMM_FAIL((err), AGMM_ERR_CUDA, "%s -> %s (%s)", #call, cudaGetErrorName(e_),   \
                             cudaGetErrorString(e_));                                              \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#endif
