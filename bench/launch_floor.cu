/* What a launch alone costs between two CUDA events, timed as gemm-lab times a GEMM (a 256 MB
 * memset to flush L2 before each call, then the call alone between events): empty kernels with the
 * launch shapes of the small shapes' GEMMs. At 256^3 the engine's kernel runs 5.5-5.6 us under
 * ncu and 7.8 in the lab (2.2 us outside the kernel), cuBLAS's 4.1-4.5 and 5.5 (1.2 outside:
 * docs/results, twenty-fifth session): is the microsecond between them the launch's shape (CTAs,
 * threads, shared memory, a cluster), or the engine's own start and end? Rows, in order:
 *   engine 256^3     8 CTAs x 384 threads, 217,088 B dynamic shared memory (64x192/s6/pp)
 *   engine, no smem  the same without shared memory
 *   engine 132 CTAs  a full persistent grid with that shared memory
 *   cuBLAS 256^3     128 CTAs in clusters of 2, 164,308 B (nvjet 64x8, 16 stages; ncu's grid and
 *                    shared memory), at 384 threads (assumed: ncu's LaunchStats gives nvjet's own)
 *   one CTA          1 x 32, nothing: the floor
 * each empty and "params" (every thread reads a 1 KB __grid_constant__ block: the engine's
 * parameters are about that size), with and without the flush. Prints the median of --reps rounds
 * (each round times every row once, in a fixed order).
 *
 *   make launch-floor && build/launch-floor [--reps 200]
 *
 * Answer (H100, twenty-eighth session, docs/results): the two shapes cost the same (3.04 and 3.20
 * us empty, 4.77 and 4.93 with the parameters read), so the microsecond is the engine's own start
 * and end, not its launch.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_check.h"

typedef struct {
    unsigned long long w[128];
} params_1k;

__global__ void empty_kernel(const __grid_constant__ params_1k p) {}

/* Every thread sums 16 of the block's words (all 128 among the block's first 8 warps), so the
 * constant bank's lines are fetched; a sum that no input makes nonzero keeps the store unexecuted. */
__global__ void params_kernel(const __grid_constant__ params_1k p, unsigned long long *sink)
{
    unsigned long long s = 0;
    for (int i = 0; i < 16; i++)
        s += p.w[(threadIdx.x * 16 + i) & 127];
    if (s == 1)
        *sink = s;
}

typedef struct {
    const char *name;
    int ctas, threads, smem, cluster;
} shape;

static const shape shapes[] = {
    {"engine 256^3", 8, 384, 217088, 1},   {"engine, no smem", 8, 384, 0, 1},
    {"engine 132 CTAs", 132, 384, 217088, 1}, {"cuBLAS 256^3", 128, 384, 164308, 2},
    {"one CTA", 1, 32, 0, 1},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static void launch(const shape *s, int with_params, const params_1k *p, unsigned long long *sink)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr = {};
    cfg.gridDim = dim3(s->ctas);
    cfg.blockDim = dim3(s->threads);
    cfg.dynamicSmemBytes = s->smem;
    if (s->cluster > 1) {
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = s->cluster, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
        cfg.attrs = &attr, cfg.numAttrs = 1;
    }
    if (with_params)
        LAB_CHECK(cudaLaunchKernelEx(&cfg, params_kernel, *p, sink));
    else
        LAB_CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, *p));
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int reps = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--reps N]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    const size_t flush_bytes = 256u << 20;
    void *flush;
    unsigned long long *sink;
    LAB_CHECK(cudaMalloc(&flush, flush_bytes));
    LAB_CHECK(cudaMalloc(&sink, sizeof *sink));
    LAB_CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 217088));
    LAB_CHECK(cudaFuncSetAttribute(params_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 217088));
    cudaEvent_t e0, e1;
    LAB_CHECK(cudaEventCreate(&e0));
    LAB_CHECK(cudaEventCreate(&e1));
    params_1k p;
    for (int i = 0; i < 128; i++)
        p.w[i] = 0;

    enum { VARIANTS = NSHAPES * 4 }; /* shape x {empty, params} x {flush, none} */
    float *t = (float *)malloc(sizeof(float) * VARIANTS * reps);
    for (int r = -3; r < reps; r++) /* three warm-up rounds */
        for (int v = 0; v < VARIANTS; v++) {
            const shape *s = &shapes[v / 4];
            const int with_params = v & 1, flushed = !(v & 2);
            if (flushed)
                LAB_CHECK(cudaMemsetAsync(flush, r & 0xff, flush_bytes, 0));
            LAB_CHECK(cudaEventRecord(e0, 0));
            launch(s, with_params, &p, sink);
            LAB_CHECK(cudaEventRecord(e1, 0));
            LAB_CHECK(cudaEventSynchronize(e1));
            float ms;
            LAB_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0)
                t[v * reps + r] = ms * 1000.f;
        }
    cudaDeviceProp prop;
    LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s: median us between the events around one launch, %d rounds\n", prop.name, reps);
    printf("%-16s %6s %7s %9s %7s | %9s %9s | %9s %9s\n", "shape", "ctas", "threads", "smem", "cluster",
           "empty,fl", "params,fl", "empty", "params");
    for (int i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        float med[4];
        for (int j = 0; j < 4; j++) {
            float *x = t + (i * 4 + j) * reps;
            qsort(x, reps, sizeof(float), cmp_float);
            med[j] = x[reps / 2];
        }
        printf("%-16s %6d %7d %9d %7d | %9.2f %9.2f | %9.2f %9.2f\n", s->name, s->ctas, s->threads, s->smem,
               s->cluster, med[0], med[1], med[2], med[3]);
    }
    free(t);
    return 0;
}
