/* The kernel that fills one of pull mode's map slots (pull_maps.c), and its launcher. */
#include "kernels/gemm/plan_impl.h"

/* Grid 1 x 256: stores the first n maps of `maps` into a map slot (params.h: why a parameter). */
__global__ void fill_map_slot_kernel(CUtensorMap *slot, int n, const __grid_constant__ gemm_map_set maps)
{
    const uint4 *src = (const uint4 *)maps.map;
    uint4 *dst = (uint4 *)slot;
    for (int i = (int)threadIdx.x; i < n * (int)(sizeof(CUtensorMap) / sizeof(uint4)); i += (int)blockDim.x)
        dst[i] = src[i];
}

extern "C" cudaError_t agmm_gemm_launch_fill_maps(CUtensorMap *slot, int n, const gemm_map_set *maps,
                                                  cudaStream_t stream)
{
    fill_map_slot_kernel<<<1, 256, 0, stream>>>(slot, n, *maps);
    return cudaGetLastError();
}
