/* Device shim for agmm-bench (bench_mem.h). */
#include "bench_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#ifdef AGMM_HAVE_CUDA
#include <cuda_runtime_api.h>

#define CU(dev, call)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            snprintf((dev)->err, sizeof (dev)->err, "%s -> %s", #call, cudaGetErrorString(e_)); \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)
#endif

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

int bench_dev_init(bench_dev *dev, agmm_ctx *ctx, int flush, int max_timed)
{
    memset(dev, 0, sizeof *dev);
    dev->max_timed = max_timed > 0 ? max_timed : 1;
    dev->gpu = agmm_ctx_device(ctx) >= 0;
    dev->flush_bytes = flush ? (dev->gpu ? (size_t)256 << 20 : (size_t)64 << 20) : 0;
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        cudaStream_t s;
        CU(dev, cudaSetDevice(agmm_ctx_device(ctx)));
        CU(dev, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        dev->stream = s;
        cudaEvent_t *a = calloc((size_t)dev->max_timed, sizeof *a), *b = calloc((size_t)dev->max_timed, sizeof *b);
        dev->ev_start = a;
        dev->ev_stop = b;
        if (a == NULL || b == NULL) {
            snprintf(dev->err, sizeof dev->err, "event arrays: out of memory");
            return -1;
        }
        for (int i = 0; i < dev->max_timed; i++) {
            CU(dev, cudaEventCreate(&a[i]));
            CU(dev, cudaEventCreate(&b[i]));
        }
        if (dev->flush_bytes)
            CU(dev, cudaMalloc(&dev->flush, dev->flush_bytes));
        return 0;
    }
#endif
    dev->ev_start = calloc((size_t)dev->max_timed, sizeof(double));
    dev->ev_stop = calloc((size_t)dev->max_timed, sizeof(double));
    if (dev->ev_start == NULL || dev->ev_stop == NULL) {
        snprintf(dev->err, sizeof dev->err, "timer arrays: out of memory");
        return -1;
    }
    if (dev->flush_bytes && (dev->flush = malloc(dev->flush_bytes)) == NULL) {
        snprintf(dev->err, sizeof dev->err, "flush buffer of %zu bytes: out of memory", dev->flush_bytes);
        return -1;
    }
    return 0;
}

void bench_dev_fini(bench_dev *dev)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        cudaFree(dev->flush);
        for (int i = 0; i < dev->max_timed; i++) {
            if (dev->ev_start && ((cudaEvent_t *)dev->ev_start)[i])
                cudaEventDestroy(((cudaEvent_t *)dev->ev_start)[i]);
            if (dev->ev_stop && ((cudaEvent_t *)dev->ev_stop)[i])
                cudaEventDestroy(((cudaEvent_t *)dev->ev_stop)[i]);
        }
        if (dev->stream)
            cudaStreamDestroy((cudaStream_t)dev->stream);
    } else
#endif
    {
        free(dev->flush);
    }
    free(dev->ev_start);
    free(dev->ev_stop);
}

void *bench_alloc(bench_dev *dev, size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, bytes);
        if (e != cudaSuccess) {
            snprintf(dev->err, sizeof dev->err, "cudaMalloc(%zu) -> %s", bytes, cudaGetErrorString(e));
            return NULL;
        }
        return p;
    }
#endif
    void *p = malloc(bytes);
    if (p == NULL)
        snprintf(dev->err, sizeof dev->err, "malloc(%zu): out of memory", bytes);
    return p;
}

void bench_free(bench_dev *dev, void *p)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

int bench_upload(bench_dev *dev, void *dst, const void *src, size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)dev->stream));
        CU(dev, cudaStreamSynchronize((cudaStream_t)dev->stream));
        return 0;
    }
#endif
    memcpy(dst, src, bytes);
    return 0;
}

int bench_download(bench_dev *dev, void *dst, const void *src, size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)dev->stream));
        CU(dev, cudaStreamSynchronize((cudaStream_t)dev->stream));
        return 0;
    }
#endif
    memcpy(dst, src, bytes);
    return 0;
}

int bench_poison_bf16(bench_dev *dev, void *dst, size_t count)
{
    /* Byte-wise poison, so memset can write it on host and device alike: 0xffff is a bf16 NaN. */
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaMemsetAsync(dst, 0xff, count * 2, (cudaStream_t)dev->stream));
        return 0;
    }
#endif
    memset(dst, 0xff, count * 2);
    return 0;
}

int bench_flush(bench_dev *dev)
{
    if (dev->flush_bytes == 0)
        return 0;
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaMemsetAsync(dev->flush, 0, dev->flush_bytes, (cudaStream_t)dev->stream));
        return 0;
    }
#endif
    memset(dev->flush, ++dev->flush_gen & 0xff, dev->flush_bytes);
    return 0;
}

int bench_sync(bench_dev *dev)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaStreamSynchronize((cudaStream_t)dev->stream));
        return 0;
    }
#endif
    return 0;
}

int bench_timer_start(bench_dev *dev, int i)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaEventRecord(((cudaEvent_t *)dev->ev_start)[i], (cudaStream_t)dev->stream));
        return 0;
    }
#endif
    ((double *)dev->ev_start)[i] = now_us();
    return 0;
}

int bench_timer_stop(bench_dev *dev, int i)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaEventRecord(((cudaEvent_t *)dev->ev_stop)[i], (cudaStream_t)dev->stream));
        return 0;
    }
#endif
    ((double *)dev->ev_stop)[i] = now_us();
    return 0;
}

int bench_timer_collect(bench_dev *dev, int count, double *us)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        for (int i = 0; i < count; i++) {
            float ms = 0;
            CU(dev, cudaEventSynchronize(((cudaEvent_t *)dev->ev_stop)[i]));
            CU(dev, cudaEventElapsedTime(&ms, ((cudaEvent_t *)dev->ev_start)[i], ((cudaEvent_t *)dev->ev_stop)[i]));
            us[i] = (double)ms * 1e3;
        }
        return 0;
    }
#endif
    for (int i = 0; i < count; i++)
        us[i] = ((double *)dev->ev_stop)[i] - ((double *)dev->ev_start)[i];
    return 0;
}

int bench_graph_begin(bench_dev *dev)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaStreamBeginCapture((cudaStream_t)dev->stream, cudaStreamCaptureModeThreadLocal));
        return 0;
    }
#endif
    snprintf(dev->err, sizeof dev->err, "CUDA graphs need a GPU world");
    return -1;
}

int bench_graph_end(bench_dev *dev, int ok, void **exec)
{
    *exec = NULL;
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        cudaGraph_t graph = NULL;
        cudaGraphExec_t e = NULL;
        cudaError_t ce = cudaStreamEndCapture((cudaStream_t)dev->stream, &graph);
        if (ok && ce == cudaSuccess)
            ce = cudaGraphInstantiate(&e, graph, 0);
        if (graph)
            cudaGraphDestroy(graph);
        if (ce != cudaSuccess) {
            snprintf(dev->err, sizeof dev->err, "graph capture: %s", cudaGetErrorString(ce));
            return -1;
        }
        *exec = e;
        return ok ? 0 : -1;
    }
#endif
    snprintf(dev->err, sizeof dev->err, "CUDA graphs need a GPU world");
    return -1;
}

int bench_graph_launch(bench_dev *dev, void *exec)
{
#ifdef AGMM_HAVE_CUDA
    if (dev->gpu) {
        CU(dev, cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)dev->stream));
        return 0;
    }
#endif
    snprintf(dev->err, sizeof dev->err, "CUDA graphs need a GPU world");
    return -1;
}

void bench_graph_free(void *exec)
{
#ifdef AGMM_HAVE_CUDA
    if (exec)
        cudaGraphExecDestroy((cudaGraphExec_t)exec);
#endif
}
