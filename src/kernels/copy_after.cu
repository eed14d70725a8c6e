/* The copy that may overlap its predecessor (copy_after.h). Launched with programmatic stream
 * serialization: it starts once every CTA of the kernel before it has started and signalled
 * (griddepcontrol.launch_dependents) or exited, copies, and then waits (griddepcontrol.wait) for
 * that kernel to complete and its writes to be visible. That wait is what keeps the stream's
 * order for whatever comes after: a later launch waits for this kernel, and this kernel ends only
 * after its predecessor has. */
#include <stdint.h>

#include "copy_after.h"
#include "copy_vecs.cuh"

#define COPY_AFTER_THREADS 256
#define COPY_AFTER_ILP 4

__global__ void __launch_bounds__(COPY_AFTER_THREADS) copy_after_kernel(uint4 *dst, const uint4 *src, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * COPY_AFTER_THREADS;
    agmm_copy_vecs<COPY_AFTER_ILP>(src, dst, (int64_t)blockIdx.x * COPY_AFTER_THREADS + threadIdx.x, n, stride);
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

extern "C" cudaError_t agmm_launch_copy_after(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
    const int64_t n = (int64_t)(bytes / 16);
    const int64_t per_cta = (int64_t)COPY_AFTER_THREADS * COPY_AFTER_ILP;
    int64_t ctas = (n + per_cta - 1) / per_cta;
    if (ctas > 264) /* two waves of a Hopper's SMs at most; the loop strides over the rest */
        ctas = 264;
    if (ctas < 1)
        ctas = 1;
    cudaLaunchConfig_t cfg = {0};
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3((unsigned)ctas);
    cfg.blockDim = dim3(COPY_AFTER_THREADS);
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, copy_after_kernel, (uint4 *)dst, (const uint4 *)src, n);
}
