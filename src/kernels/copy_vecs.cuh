/* A device-side copy of 16-byte units, shared by the kernels that copy beside other work (the GEMM
 * engine's copy_local, copy_after.cu): this thread's units i, i + stride, ... below hi, with ILP
 * loads in flight before their stores. ILP is the knob between speed and the bandwidth left to
 * whatever runs beside the copy. */
#ifndef AGMM_KERNELS_COPY_VECS_CUH
#define AGMM_KERNELS_COPY_VECS_CUH

#include <stdint.h>

template <int ILP>
static __device__ __forceinline__ void agmm_copy_vecs(const uint4 *src, uint4 *dst, int64_t i, int64_t hi,
                                                      int64_t stride)
{
    for (; i + (ILP - 1) * stride < hi; i += ILP * stride) {
        uint4 v[ILP];
#pragma unroll
        for (int u = 0; u < ILP; u++)
            v[u] = __ldg(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < ILP; u++)
            dst[i + u * stride] = v[u];
    }
    for (; i < hi; i += stride)
        dst[i] = __ldg(src + i);
}

#endif /* AGMM_KERNELS_COPY_VECS_CUH */
