/* The random fill of fill.h: each element a hash of its index and the seed (splitmix64's
 * finaliser), its top 24 bits scaled to [-1, 1) and rounded to bf16. */
#include <cuda_bf16.h>

#include "fill.h"

__global__ void fill_random_bf16(__nv_bfloat16 *x, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        x[i] = __float2bfloat16((float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

extern "C" cudaError_t agmm_fill_random_bf16(void *x, size_t n, uint64_t seed, cudaStream_t stream)
{
    if (n > 0)
        fill_random_bf16<<<1024, 256, 0, stream>>>((__nv_bfloat16 *)x, n, seed);
    return cudaGetLastError();
}
