/* Do the engine's waiting CTAs slow the copy stream they wait for? In an emulated world (ranks
 * sharing one GPU) fused runs 3-14x ce and pull (agmm-bench --world emulated --ranks 4 --shapes
 * 256:1024:384 --backends ce,fused,pull --no-flush, H100, thirty-fifth session: fused 327-683 us,
 * ce 96-132, pull 30-80). Only fused has CTAs spinning in bounded waits (kernels/bounded_wait.cuh)
 * while its copy stream runs each rank's chain of peer copies and chunk flags
 * (backends/gather_gpu.c, ag_matmul_fused.c). Two readings:
 *   sysmem  every 64th poll reads the error record, host-mapped memory; ~128 spinners doing so may
 *           slow what else goes through the GPU's host interface, such as the copy stream's
 *           commands (every poll: 3.9 ms at emulated W = 8, every 64th: 0.64 ms, 2026-12-03);
 *   copies  a same-device copy runs on a copy engine at ~0.1-0.15 TB/s (gemm_engine.md) or on SMs
 *           the spinners hold.
 * This program runs that chain, CHUNKS x (cudaMemcpyAsync device to device of BYTES, then
 * cuStreamWriteValue32 of a flag), on a stream of the greatest priority (as the world's copy
 * stream), beside SPINNERS CTAs (one per SM: 200 KB of shared memory each) whose thread 0 waits on
 * the last flag with the library's own wait, agmm_spin_until<64, CHECK, 0>, its error record in:
 *   none           no spinners (ce's case)
 *   host /64       host-mapped memory, looked at every 64 polls (the engine's waits today)
 *   host /4096     host-mapped memory, every 4096 polls
 *   device /64     device memory, every 64 polls (the same polling, no host reads)
 * and prints, per variant, the median over --reps of the chain's time (event to event on the copy
 * stream, from when every spinner is resident and waiting). If "host /64" is slow and "device /64" is
 * not, the host reads are the cost; if both are slow, the spinners' SMs or their polling are. A wait
 * that ends without its flag (the copies never ran beside them: --spinners = the SM count, if the
 * copies need SMs) stops the program with a message. Built on branch exp/err-period, "host /64"
 * and "host /4096" measure that branch's wait (the record read once per millisecond) instead.
 *
 *   make spin-copy && build/spin-copy [--spinners N (default SMs - 4)] [--bytes B (default 2 MiB)]
 *                                     [--chunks C (default 3)] [--reps R (default 20)]
 *
 * Not yet run (written in the thirty-sixth session, which had no device machine). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_check.h"
#include "kernels/bounded_wait.cuh"

#define SPIN_SMEM (200 << 10)
#define SPIN_TIMEOUT_NS 2000000000ull

/* Thread 0 counts its CTA in `arrived` (the chain starts once every spinner is resident), waits,
 * and counts a wait that did not end on the flag (expired, or gave up) in `failed`. */
template <uint32_t CHECK>
__global__ void __launch_bounds__(32, 1)
    spinner(const uint32_t *flag, uint32_t target, const agmm_dev_error *err, uint32_t *arrived, uint32_t *failed)
{
    extern __shared__ char hold[]; /* one CTA per SM */
    if (threadIdx.x == 0) {
        atomicAdd(arrived, 1u);
        uint32_t seen;
        if (agmm_spin_until<64, CHECK, 0>(flag, target, SPIN_TIMEOUT_NS, err, &seen) != AGMM_SPIN_MET)
            atomicAdd(failed, 1u);
        hold[0] = (char)seen;
    }
}

typedef struct {
    const char *name;
    int check;        /* 0: no spinners */
    int host_record;  /* the error record in host-mapped memory */
} variant;

/* cuStreamWriteValue32 and cuStreamWaitValue32 through the runtime's entry points, as the library
 * takes them (no -lcuda). */
typedef CUresult (*stream_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

static stream_value_fn driver_fn(const char *name)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    LAB_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
    if (fn == NULL || q != cudaDriverEntryPointSuccess) {
        fprintf(stderr, "%s: not found\n", name);
        exit(1);
    }
    return (stream_value_fn)fn;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    cudaDeviceProp prop;
    LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
    int spinners = prop.multiProcessorCount - 4, chunks = 3, reps = 20;
    size_t bytes = 2u << 20;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--spinners") && atoi(v) > 0 && atoi(v) <= prop.multiProcessorCount)
            spinners = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bytes") && atoll(v) > 0)
            bytes = (size_t)atoll(argv[++i]);
        else if (!strcmp(argv[i], "--chunks") && atoi(v) > 0)
            chunks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && atoi(v) > 0)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: spin-copy [--spinners 1..%d] [--bytes B > 0] [--chunks C > 0] [--reps R > 0]\n",
                    prop.multiProcessorCount);
            return 2;
        }
    }
    const variant vs[] = {{"none", 0, 0}, {"host /64", 64, 1}, {"host /4096", 4096, 1}, {"device /64", 64, 0}};
    const int nv = (int)(sizeof vs / sizeof vs[0]);

    int least, greatest;
    LAB_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s, c;
    LAB_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    LAB_CHECK(cudaStreamCreateWithPriority(&c, cudaStreamNonBlocking, greatest));
    char *src, *dst;
    uint32_t *flags; /* one per chunk; the spinners wait for the last */
    agmm_dev_error *err_host, *err_host_dev, *err_dev;
    LAB_CHECK(cudaMalloc((void **)&src, bytes * chunks));
    LAB_CHECK(cudaMalloc((void **)&dst, bytes * chunks));
    LAB_CHECK(cudaMemset(src, 0x3c, bytes * chunks));
    LAB_CHECK(cudaMalloc((void **)&flags, sizeof *flags * chunks));
    LAB_CHECK(cudaMemset(flags, 0, sizeof *flags * chunks));
    LAB_CHECK(cudaHostAlloc((void **)&err_host, sizeof *err_host, cudaHostAllocMapped));
    memset(err_host, 0, sizeof *err_host);
    LAB_CHECK(cudaHostGetDevicePointer((void **)&err_host_dev, err_host, 0));
    LAB_CHECK(cudaMalloc((void **)&err_dev, sizeof *err_dev));
    LAB_CHECK(cudaMemset(err_dev, 0, sizeof *err_dev));
    uint32_t *arrived, *failed; /* device: the spinners so far; host-mapped: their failed waits */
    uint32_t *failed_dev;
    LAB_CHECK(cudaMalloc((void **)&arrived, sizeof *arrived));
    LAB_CHECK(cudaMemset(arrived, 0, sizeof *arrived));
    LAB_CHECK(cudaHostAlloc((void **)&failed, sizeof *failed, cudaHostAllocMapped));
    *failed = 0;
    LAB_CHECK(cudaHostGetDevicePointer((void **)&failed_dev, failed, 0));
    LAB_CHECK(cudaDeviceSynchronize()); /* the memsets above, on the legacy stream, before s and c */
    LAB_CHECK(cudaFuncSetAttribute(spinner<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, SPIN_SMEM));
    LAB_CHECK(cudaFuncSetAttribute(spinner<4096>, cudaFuncAttributeMaxDynamicSharedMemorySize, SPIN_SMEM));
    cudaEvent_t e0, e1;
    LAB_CHECK(cudaEventCreate(&e0));
    LAB_CHECK(cudaEventCreate(&e1));
    float *us = (float *)malloc(sizeof(float) * (size_t)reps * nv);
    if (us == NULL)
        return 1;

    const stream_value_fn write_value32 = driver_fn("cuStreamWriteValue32");
    const stream_value_fn wait_value32 = driver_fn("cuStreamWaitValue32");
    uint32_t epoch = 0, spinners_so_far = 0;
    for (int rep = -2; rep < reps; rep++) /* two untimed rounds first */
        for (int v = 0; v < nv; v++) {
            epoch++;
            const agmm_dev_error *err = vs[v].host_record ? err_host_dev : err_dev;
            if (vs[v].check == 64)
                spinner<64><<<spinners, 32, SPIN_SMEM, s>>>(flags + chunks - 1, epoch, err, arrived, failed_dev);
            else if (vs[v].check == 4096)
                spinner<4096><<<spinners, 32, SPIN_SMEM, s>>>(flags + chunks - 1, epoch, err, arrived, failed_dev);
            LAB_CHECK(cudaGetLastError());
            /* The chain starts once every spinner is resident and waiting, so that all of it runs
             * beside them (fused's chain starts beside its GEMM's launch; its copies of the later
             * chunks are the ones its waiting CTAs meet). */
            if (vs[v].check) {
                spinners_so_far += (uint32_t)spinners;
                if (wait_value32((CUstream)c, (CUdeviceptr)arrived, spinners_so_far, CU_STREAM_WAIT_VALUE_GEQ) !=
                    CUDA_SUCCESS) {
                    fprintf(stderr, "cuStreamWaitValue32 failed\n");
                    return 1;
                }
            }
            LAB_CHECK(cudaEventRecord(e0, c));
            for (int k = 0; k < chunks; k++) {
                LAB_CHECK(cudaMemcpyAsync(dst + k * bytes, src + k * bytes, bytes, cudaMemcpyDeviceToDevice, c));
                if (write_value32((CUstream)c, (CUdeviceptr)(flags + k), epoch, 0) != CUDA_SUCCESS) {
                    fprintf(stderr, "cuStreamWriteValue32 failed\n");
                    return 1;
                }
            }
            LAB_CHECK(cudaEventRecord(e1, c));
            LAB_CHECK(cudaStreamSynchronize(c));
            LAB_CHECK(cudaStreamSynchronize(s));
            if (*(volatile uint32_t *)failed != 0) {
                fprintf(stderr, "%s: %u spinners' waits ended without the flag (expired: the copies never ran "
                                "beside them)\n", vs[v].name, *(volatile uint32_t *)failed);
                return 1;
            }
            float ms;
            LAB_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep >= 0)
                us[(size_t)v * reps + rep] = 1e3f * ms;
        }
    printf("# %s, %d SMs; %d spinners, %d chunks of %zu bytes; median of %d rounds\n", prop.name,
           prop.multiProcessorCount, spinners, chunks, bytes, reps);
    printf("%-12s %10s %10s %10s\n", "record", "chain us", "min us", "max us");
    for (int v = 0; v < nv; v++) {
        float *m = us + (size_t)v * reps;
        qsort(m, (size_t)reps, sizeof *m, cmp_float);
        printf("%-12s %10.1f %10.1f %10.1f\n", vs[v].name, m[reps / 2], m[0], m[reps - 1]);
    }
    free(us);
    return 0;
}
