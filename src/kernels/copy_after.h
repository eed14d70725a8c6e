/* A device-to-device copy that overlaps the kernel before it on its stream (copy_after.cu), for a
 * copy that needs nothing from that kernel: ce's local shard at W = 1 beside its cuBLAS GEMM,
 * without a second stream and the two events between streams that such a copy would cost. Plain
 * C header. */
#ifndef AGMM_KERNELS_COPY_AFTER_H
#define AGMM_KERNELS_COPY_AFTER_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
/* Enqueues on `stream` a copy of `bytes` (a multiple of 16; both pointers 16-byte aligned) from
 * src to dst, launched as a programmatic dependent of the kernel enqueued just before it: it may
 * start before that kernel has finished, so src and dst must be memory that kernel neither writes
 * nor reads (src: written before that kernel was enqueued). Work enqueued after the copy still
 * waits for both: the copy's last act is to wait for its predecessor to complete. */
cudaError_t agmm_launch_copy_after(void *dst, const void *src, size_t bytes, cudaStream_t stream);
#ifdef __cplusplus
}
#endif
#endif
