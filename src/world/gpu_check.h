/* Checks for CUDA (core/cuda_check.h), NCCL and cuBLAS results in host C code (internal). Each
 * records "file:line: call -> text" where the failure starts and jumps to the function's `fail`
 * label with `st` set, like AGMM_TRY. Only for files built with CUDA. */
#ifndef AGMM_WORLD_GPU_CHECK_H
#define AGMM_WORLD_GPU_CHECK_H

#include "gpu_headers.h"

#include "../core/cuda_check.h"
#include "../core/error.h"

/* ncclGetLastError carries NCCL's own WARN text, which usually names the real cause. */
#define AGMM_NCCL_TRY(st, err, comm, call)                                                         \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            const char *w_ = ncclGetLastError(comm);                                               \
            (st) = AGMM_FAIL((err), AGMM_ERR_NCCL, "%s -> %s%s%s", #call, ncclGetErrorString(r_),  \
                             w_ && *w_ ? ": " : "", w_ ? w_ : "");                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#define AGMM_LT_TRY(st, err, call)                                                                 \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            (st) = AGMM_FAIL((err), AGMM_ERR_CUBLAS, "%s -> cuBLAS status %d", #call, (int)s_);    \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#endif
