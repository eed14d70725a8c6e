/* What the examples share: memory on the rank's device and copies to and from it, and bf16
 * small integers (exact, so results can be compared bit for bit). In a CPU world memory is host
 * memory; on GPUs the examples use the CUDA runtime, whose flags agmm.pc carries, with
 * AGMM_WITH_CUDA defined, when agmm was built with CUDA (without, it runs the CPU world only). */
#ifndef AGMM_EXAMPLE_H
#define AGMM_EXAMPLE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <agmm.h>

#ifdef AGMM_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

static inline void *ex_alloc(const agmm_ctx *ctx, size_t bytes)
{
    (void)ctx; /* (unused without CUDA) */
#ifdef AGMM_WITH_CUDA
    void *p = NULL;
    if (agmm_ctx_device(ctx) >= 0)
        return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
#endif
    return malloc(bytes);
}

static inline void ex_free(const agmm_ctx *ctx, void *p)
{
    (void)ctx;
#ifdef AGMM_WITH_CUDA
    if (agmm_ctx_device(ctx) >= 0) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

/* A copy ordered after the rank's work on `stream` (device memory on GPUs). 0 on success. */
static inline int ex_copy(const agmm_ctx *ctx, void *dst, const void *src, size_t bytes, void *stream)
{
    (void)ctx, (void)stream;
#ifdef AGMM_WITH_CUDA
    if (agmm_ctx_device(ctx) >= 0)
        return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream) != cudaSuccess ||
               cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess;
#endif
    memcpy(dst, src, bytes);
    return 0;
}

/* The rank's stream: its own non-blocking CUDA stream on GPUs, NULL in the CPU world. */
static inline void *ex_stream(const agmm_ctx *ctx)
{
    (void)ctx;
#ifdef AGMM_WITH_CUDA
    cudaStream_t s = NULL;
    if (agmm_ctx_device(ctx) >= 0 && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess)
        return s;
#endif
    return NULL;
}

static inline void ex_stream_destroy(void *stream)
{
    (void)stream;
#ifdef AGMM_WITH_CUDA
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
#endif
}

/* bf16 holds small integers exactly: the top half of their fp32 bits. */
static inline uint16_t ex_bf16(int v)
{
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
}

static inline int ex_int(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return (int)f;
}

#endif
