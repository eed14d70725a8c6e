/* Where does the hardware put the CTAs of a launch? Launches GRID CTAs of 128 threads in clusters
 * of C (1: no cluster attribute) with SMEM bytes of dynamic shared memory each (default 200 KiB:
 * one CTA per SM, as the GEMM engine runs), every CTA held 200 us so that all are resident at once,
 * and prints per CTA "C blockIdx clusterid smid", after a "# max active clusters" line for C > 1.
 * A cluster never spans GPCs, so the SMs that clusters of 16 (or 8) share name the GPCs;
 * bench/gpc_map.py joins several such runs into the SM-to-GPC map.
 *
 *   make sm-placement && build/sm-placement GRID C [SMEM]
 *   e.g. build/sm-placement 132 1; build/sm-placement 132 2; build/sm-placement 128 16
 *
 * H100 80GB HBM3, 2026-12-06 (docs/results/h100_2026-12-06g/placement; run as a first draft of this
 * program): 7 GPCs hold a cluster of 16. Without clusters, consecutive CTAs fill a GPC (CTAs 8-15
 * on one, 16-31 on the next, ...); clusters of 2 go round-robin over the GPCs (clusters 4-35 over
 * 8, 36-63 over 7), so the GEMM engine's pairs k and k + 8 share a GPC where its plain CTAs b and
 * b + 1 do. Which GPC a launch starts in moves from launch to launch (the engine's own launches,
 * docs/results/h100_2026-12-06h/gpc_per_launch.txt); the SM-to-GPC map itself is fixed. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "lab_check.h"

__global__ void probe(unsigned *out)
{
    unsigned smid, cid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = smid;
        out[2 * blockIdx.x + 1] = cid;
    }
    /* Hold the SM, so that a later CTA cannot land on it while this one runs. */
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < 200000);
}

int main(int argc, char **argv)
{
    if (argc < 3 || atoi(argv[1]) < 1 || atoi(argv[2]) < 1 || atoi(argv[2]) > 16) {
        fprintf(stderr, "usage: sm-placement GRID C [SMEM]: GRID >= 1 CTAs in clusters of C (1-16; GRID a "
                        "multiple of C), SMEM bytes of dynamic shared memory each (default 204800)\n");
        return 2;
    }
    const int grid = atoi(argv[1]), c = atoi(argv[2]);
    const int smem = argc > 3 ? atoi(argv[3]) : 200 * 1024;
    if (grid % c != 0) {
        fprintf(stderr, "sm-placement: GRID %d is not a multiple of C %d\n", grid, c);
        return 2;
    }
    unsigned *d, *h = (unsigned *)malloc(2 * sizeof *h * grid);
    LAB_CHECK(cudaMalloc(&d, 2 * sizeof *d * grid));
    LAB_CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (c > 8)
        LAB_CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchAttribute at = {};
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = c;
    at.val.clusterDim.y = at.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = &at;
    cfg.numAttrs = c > 1;
    if (c > 1) {
        int n = 0;
        LAB_CHECK(cudaOccupancyMaxActiveClusters(&n, probe, &cfg));
        printf("# max active clusters of %d: %d\n", c, n);
    }
    LAB_CHECK(cudaLaunchKernelEx(&cfg, probe, d));
    LAB_CHECK(cudaDeviceSynchronize());
    LAB_CHECK(cudaMemcpy(h, d, 2 * sizeof *h * grid, cudaMemcpyDeviceToHost));
    for (int b = 0; b < grid; b++)
        printf("%d %d %u %u\n", c, b, h[2 * b + 1], h[2 * b]);
    free(h);
    return 0;
}
