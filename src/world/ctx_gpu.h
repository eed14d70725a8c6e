/* The CUDA-side state of a rank's context (internal; world_gpu.c fills it). Host C code may
 * include this: only the CUDA runtime and cuBLASLt C headers are needed. */
#ifndef AGMM_WORLD_CTX_GPU_H
#define AGMM_WORLD_CTX_GPU_H

#include <cuda_runtime_api.h>
#include <cublasLt.h>
#include <stdint.h>

#include "../kernels/dev_error.h"
#include "world.h"

/* Driver entry points, fetched once through cudaGetDriverEntryPoint so that the binary does not
 * link libcuda (it must start on machines with no driver, where it runs the CPU world). */
typedef int (*agmm_cu_stream_write_value32_fn)(cudaStream_t stream, uintptr_t addr, uint32_t value, unsigned flags);
typedef int (*agmm_cu_stream_wait_value32_fn)(cudaStream_t stream, uintptr_t addr, uint32_t value, unsigned flags);

struct agmm_ctx_gpu {
    cudaStream_t copy_stream;          /* high priority, non-blocking: the copy-engine role */
    cublasLtHandle_t lt;
    agmm_dev_error *err_host;          /* mapped pinned memory written by kernels on timeout */
    agmm_dev_error *err_dev;           /* its device alias, passed to kernels */
    uint64_t timeout_ns;               /* bound of every device-side wait */
    int num_sms;                       /* SMs of the device */
    int ranks_on_device;               /* local ranks sharing this device (emulated worlds) */
    agmm_cu_stream_write_value32_fn write_value32;
    agmm_cu_stream_wait_value32_fn wait_value32;
};

/* Turns a recorded device timeout into AGMM_ERR_TIMEOUT in ctx->err; AGMM_SUCCESS if none. */
agmm_status agmm_ctx_gpu_check_dev_error(agmm_ctx *ctx);

#endif
