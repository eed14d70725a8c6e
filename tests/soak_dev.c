/* The soak's device shim (soak.h): CUDA memory, pinned staging and a stream of the rank's device in
 * GPU worlds, plain host memory and copies in the CPU world, where runs block and need no stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AGMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "soak.h"

#ifdef AGMM_HAVE_CUDA
static int cuda_ok(soak_dev *d, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    snprintf(d->err, sizeof d->err, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}
#endif

int soak_dev_init(soak_dev *d, agmm_ctx *ctx)
{
    memset(d, 0, sizeof *d);
    d->gpu = agmm_ctx_device(ctx) >= 0;
#ifdef AGMM_HAVE_CUDA
    /* Non-blocking: ranks sharing a GPU need streams of their own (agmm.h). The context made the
     * rank's device current on this thread. */
    if (d->gpu)
        return cuda_ok(d, cudaStreamCreateWithFlags((cudaStream_t *)&d->stream, cudaStreamNonBlocking),
                       "cudaStreamCreateWithFlags");
#else
    if (d->gpu) {
        snprintf(d->err, sizeof d->err, "a GPU rank in a build without CUDA");
        return -1;
    }
#endif
    return 0;
}

void soak_dev_fini(soak_dev *d)
{
#ifdef AGMM_HAVE_CUDA
    if (d->stream)
        cudaStreamDestroy((cudaStream_t)d->stream);
#endif
    d->stream = NULL;
}

void *soak_dev_alloc(soak_dev *d, size_t bytes)
{
    void *p = NULL;
#ifdef AGMM_HAVE_CUDA
    if (d->gpu)
        return cuda_ok(d, cudaMalloc(&p, bytes), "cudaMalloc") ? NULL : p;
#endif
    p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == NULL)
        snprintf(d->err, sizeof d->err, "aligned_alloc(%zu) failed", bytes);
    return p;
}

void soak_dev_free(soak_dev *d, void *p)
{
#ifdef AGMM_HAVE_CUDA
    if (d->gpu) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

void *soak_host_alloc(soak_dev *d, size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    void *p = NULL;
    if (d->gpu)
        return cuda_ok(d, cudaMallocHost(&p, bytes), "cudaMallocHost") ? NULL : p;
#endif
    return soak_dev_alloc(d, bytes);
}

void soak_host_free(soak_dev *d, void *p)
{
#ifdef AGMM_HAVE_CUDA
    if (d->gpu) {
        cudaFreeHost(p);
        return;
    }
#endif
    free(p);
}

static int copy(soak_dev *d, void *dst, const void *src, size_t bytes, int kind)
{
#ifdef AGMM_HAVE_CUDA
    if (d->gpu)
        return cuda_ok(d, cudaMemcpyAsync(dst, src, bytes, (enum cudaMemcpyKind)kind, (cudaStream_t)d->stream),
                       "cudaMemcpyAsync");
#endif
    memcpy(dst, src, bytes);
    return 0;
}

#ifdef AGMM_HAVE_CUDA
#define KIND(k) (cudaMemcpy##k)
#else
#define KIND(k) 0
#endif

int soak_dev_upload(soak_dev *d, void *dst, const void *src, size_t bytes)
{
    return copy(d, dst, src, bytes, KIND(HostToDevice));
}

int soak_dev_download(soak_dev *d, void *dst, const void *src, size_t bytes)
{
    return copy(d, dst, src, bytes, KIND(DeviceToHost));
}

int soak_dev_copy(soak_dev *d, void *dst, const void *src, size_t bytes)
{
    return copy(d, dst, src, bytes, KIND(DeviceToDevice));
}

int soak_dev_poison(soak_dev *d, void *dst, size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    if (d->gpu)
        return cuda_ok(d, cudaMemsetAsync(dst, 0xff, bytes, (cudaStream_t)d->stream), "cudaMemsetAsync");
#endif
    memset(dst, 0xff, bytes);
    return 0;
}

int soak_dev_sync(soak_dev *d)
{
#ifdef AGMM_HAVE_CUDA
    if (d->gpu)
        return cuda_ok(d, cudaStreamSynchronize((cudaStream_t)d->stream), "cudaStreamSynchronize");
#endif
    return 0;
}

uint64_t soak_dev_used(soak_dev *d)
{
#ifdef AGMM_HAVE_CUDA
    size_t free_b = 0, total_b = 0;
    if (d->gpu && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        return (uint64_t)(total_b - free_b);
#endif
    return 0;
}
