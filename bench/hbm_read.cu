/* How fast can this GPU read the weights of a decode GEMM? Decode's GEMMs (M = 1-128 rows) stream
 * B once and do little else: at 1 x 8192 x 3584, B is 58.7 MB. On an H100 under ncu with a clean
 * L2, cuBLASLt's kernel reads it at 2.50 TB/s (23.5 us), and the fastest read measured on that
 * card was the engine's 2.91 TB/s over 470 MB (docs/gemm_engine.md, "Decode"). On an H200,
 * torch_bench's decode rows take 24.5-25.8 us a call, GEMM and a one-rank all-reduce together:
 * ~2.4 TB/s of the card's 4.8 (docs/results, thirty-fifth session). Neither says what a read of
 * 58.7 MB can reach on its own. This program reads buffers of decode's sizes with no GEMM, two ways:
 *   ldg xU    every thread of 4 CTAs per SM keeps U 16-byte loads in flight (ld.global.nc.v4),
 *             grid-stride: the plain streaming kernel;
 *   bulk SxC  one CTA per SM (or per the first `ctas` SMs) reads its contiguous share through an
 *             S-slot shared-memory ring of C-byte 1-D bulk copies (cp.async.bulk, an mbarrier per
 *             slot), one thread issuing, one waiting and releasing: the engine's producer without
 *             its consumers. 64 CTAs is the engine's grid at 64 x 128 tiles on N = 8192.
 * Timed as gemm-lab times a GEMM: a 256 MB memset flushes L2 before each call (--no-flush: not),
 * then the call alone between events; the median of --reps rounds, each round every variant once
 * in a fixed order. If the best variant reads 58.7 MB much faster than cuBLASLt's decode kernel
 * does on the same card, decode's GEMMs are not at the HBM's pace and a kernel built like that
 * variant can beat them; if not, they are.
 *
 *   make hbm-read && build/hbm-read [--reps 20] [--no-flush]
 *
 * Not yet run (written in the thirty-fifth session, which had no device time left). */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_check.h"
#include "kernels/hopper_ptx.cuh"

#define FLUSH_BYTES (256u << 20)
#define MAX_SLOTS 16

/* U independent 16-byte loads per thread per step; the xor of everything read goes to *sink only
 * when it equals a value no input gives, so the loads stay and the store does not run. */
template <int U>
__global__ void __launch_bounds__(256) ldg_kernel(const uint4 *p, size_t n16, unsigned *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(p + i + u * stride));
#pragma unroll
        for (int u = 0; u < U; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride)
        acc ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

/* Thread 0 fills the ring with bulk copies of this CTA's share; thread 32 waits for each slot,
 * reads one word of it and gives it back. */
__global__ void __launch_bounds__(64, 1)
    bulk_kernel(const char *p, size_t bytes, int slots, unsigned chunk, unsigned *sink)
{
    extern __shared__ __align__(128) char ring[];
    __shared__ __align__(8) uint64_t full[MAX_SLOTS], empty[MAX_SLOTS];
    const size_t share = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16, begin = share * blockIdx.x;
    const size_t end = begin + share < bytes ? begin + share : bytes;
    const size_t nchunks = begin < end ? (end - begin + chunk - 1) / chunk : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < slots; s++) {
            mbar_init(smem_u32(&full[s]), 1);
            mbar_init(smem_u32(&empty[s]), 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (size_t c = 0; c < nchunks; c++) {
            const int s = (int)(c % slots);
            if (c >= (size_t)slots)
                mbar_wait(smem_u32(&empty[s]), (uint32_t)((c / slots - 1) & 1));
            const size_t at = begin + c * chunk;
            const unsigned len = (unsigned)(end - at < chunk ? end - at : chunk);
            const uint32_t bar = smem_u32(&full[s]);
            mbar_arrive_expect_tx(bar, len);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(smem_u32(ring + (size_t)s * chunk)), "l"(p + at), "r"(len), "r"(bar)
                         : "memory");
        }
    } else if (threadIdx.x == 32) {
        unsigned acc = 0;
        for (size_t c = 0; c < nchunks; c++) {
            const int s = (int)(c % slots);
            mbar_wait(smem_u32(&full[s]), (uint32_t)((c / slots) & 1));
            acc ^= *(volatile unsigned *)(ring + (size_t)s * chunk);
            mbar_arrive(smem_u32(&empty[s]));
        }
        if (acc == 0x9e3779b9u)
            *sink = acc;
    }
}

typedef struct {
    char name[32];
    int kind;              /* 0: ldg, 1: bulk */
    int u, ctas, slots;    /* ldg: loads in flight per thread; bulk: grid and ring */
    unsigned chunk;
} variant;

static void launch(const variant *v, const void *buf, size_t bytes, int sms, unsigned *sink, cudaStream_t s)
{
    const size_t n16 = bytes / 16;
    if (v->kind == 0) {
        const int grid = 4 * sms;
        if (v->u == 1)
            ldg_kernel<1><<<grid, 256, 0, s>>>((const uint4 *)buf, n16, sink);
        else if (v->u == 4)
            ldg_kernel<4><<<grid, 256, 0, s>>>((const uint4 *)buf, n16, sink);
        else
            ldg_kernel<8><<<grid, 256, 0, s>>>((const uint4 *)buf, n16, sink);
    } else {
        bulk_kernel<<<v->ctas, 64, (size_t)v->slots * v->chunk, s>>>((const char *)buf, bytes, v->slots, v->chunk,
                                                                     sink);
    }
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int reps = 20, flush = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-flush") == 0)
            flush = 0;
        else {
            fprintf(stderr, "usage: hbm-read [--reps N (>= 1, default 20)] [--no-flush]\n");
            return 2;
        }
    }
    cudaDeviceProp prop;
    LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    /* B of decode's GEMMs: 8192 x 1024 and 8192 x 3584 (LLaMA-3 70B at TP 8), 28672 x 8192. */
    const size_t sizes[] = {(size_t)8192 * 1024 * 2, (size_t)8192 * 3584 * 2, (size_t)28672 * 8192 * 2};
    const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
    variant vs[16];
    int nv = 0;
    const int us[] = {1, 4, 8};
    for (int i = 0; i < 3; i++) {
        vs[nv] = (variant){.kind = 0, .u = us[i]};
        snprintf(vs[nv].name, sizeof vs[nv].name, "ldg x%d", us[i]);
        nv++;
    }
    const struct {
        int slots;
        unsigned chunk;
    } rings[] = {{8, 8192}, {4, 16384}, {8, 16384}, {6, 32768}};
    const int grids[] = {sms, 64};
    for (int g = 0; g < 2; g++)
        for (int r = 0; r < 4; r++) {
            vs[nv] = (variant){.kind = 1, .ctas = grids[g], .slots = rings[r].slots, .chunk = rings[r].chunk};
            snprintf(vs[nv].name, sizeof vs[nv].name, "bulk %dx%uK, %d CTAs", rings[r].slots, rings[r].chunk / 1024,
                     grids[g]);
            nv++;
        }
    LAB_CHECK(cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * 32768));

    void *buf, *flush_buf;
    unsigned *sink;
    LAB_CHECK(cudaMalloc(&buf, sizes[nsizes - 1]));
    LAB_CHECK(cudaMalloc(&flush_buf, FLUSH_BYTES));
    LAB_CHECK(cudaMalloc((void **)&sink, sizeof *sink));
    LAB_CHECK(cudaMemset(buf, 0x3c, sizes[nsizes - 1]));
    cudaStream_t s;
    cudaEvent_t e0, e1;
    LAB_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    LAB_CHECK(cudaEventCreate(&e0));
    LAB_CHECK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * (size_t)reps * nv * nsizes);
    if (ms == NULL)
        return 1;
    for (int z = 0; z < nsizes; z++)
        for (int v = 0; v < nv; v++)
            launch(&vs[v], buf, sizes[z], sms, sink, s); /* warm-up: module load, clocks */
    LAB_CHECK(cudaStreamSynchronize(s));
    for (int rep = 0; rep < reps; rep++)
        for (int z = 0; z < nsizes; z++)
            for (int v = 0; v < nv; v++) {
                if (flush)
                    LAB_CHECK(cudaMemsetAsync(flush_buf, rep & 0xff, FLUSH_BYTES, s));
                LAB_CHECK(cudaEventRecord(e0, s));
                launch(&vs[v], buf, sizes[z], sms, sink, s);
                LAB_CHECK(cudaEventRecord(e1, s));
                LAB_CHECK(cudaEventSynchronize(e1));
                LAB_CHECK(cudaEventElapsedTime(&ms[((size_t)z * nv + v) * reps + rep], e0, e1));
            }
    LAB_CHECK(cudaGetLastError());
    printf("# %s, %d SMs; L2 %s before each call; median of %d rounds\n", prop.name, sms,
           flush ? "flushed (256 MB memset)" : "not flushed", reps);
    printf("%-24s %12s %10s %8s\n", "variant", "bytes", "us", "TB/s");
    for (int z = 0; z < nsizes; z++)
        for (int v = 0; v < nv; v++) {
            float *m = &ms[((size_t)z * nv + v) * reps];
            qsort(m, (size_t)reps, sizeof *m, cmp_float);
            const double us_med = 1e3 * m[reps / 2];
            printf("%-24s %12zu %10.2f %8.2f\n", vs[v].name, sizes[z], us_med, (double)sizes[z] / us_med * 1e-6);
        }
    free(ms);
    return 0;
}
