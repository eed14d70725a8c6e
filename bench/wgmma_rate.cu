/* How fast does a warpgroup's wgmma stream run with its operands already in shared memory? This
 * kernel runs the GEMM engine's consumer pattern alone: NWG warpgroups, no producer, a 4-slot ring
 * of A (each warpgroup its own MB x 64 rows) and B (WN columns, shared) filled once, then NKB K
 * blocks of: wgmma.fence; 4 K steps of MB m64nWNk16 each; commit; wait_group DEPTH. Per variant it
 * prints the median over CTAs of clock64 cycles per K block against the MMAs' own (NWG * MB * 4 *
 * WN/2: m64nNk16 is N/2 cycles of an SM's tensor cores), at 33 and 132 CTAs, on operands with 7
 * varying bits (flat) and uniform in [-1, 1) (rand).
 *
 *   make wgmma-rate && build/wgmma-rate
 *
 * H100 (nvidia-h100-x1), 2026-12-05 (docs/results): every variant at 1.000 of its MMA cycles (1024
 * per K block for two warpgroups of m64n256k16 or of 2 x m64n128k16, wait_group 1 or 0; 512 for
 * one), flat or random, 33 or 132 CTAs; ncu agrees (sm__cycles_active 4.21 M for 4.19 M of MMAs).
 * The engine's own mainloop does as well: under ncu at 33 CTAs (8192 x 8192 x 4096, 128 x 256)
 * its tensor pipe is busy 4.13 M of 4.37 M cycles, the rest ~3.9 k cycles per tile outside the
 * mainloop. So the ~1150 cycles per K block that bench/engine_probe.sh reported there came from
 * gemm-lab --clock's reading (2071 MHz, above the H100's 1980 maximum; ncu: 1812), not from the
 * mainloop. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/hopper_ptx.cuh"

#define SLOTS 4
#define SMEM_BYTES (227 * 1024) /* one CTA per SM whatever the variant needs */

template <int WN, int MB, int NWG, int DEPTH>
__global__ void __launch_bounds__(128 * NWG, 1) rate_kernel(int nkb, int random, long long *cycles, float *sink)
{
    extern __shared__ uint8_t smem_raw[];
    constexpr uint32_t A_WG = MB * 64 * 128, A_SLOT = NWG * A_WG, B_SLOT = WN * 128, SLOT = A_SLOT + B_SLOT;
    static_assert(SLOTS * SLOT + 1023 <= SMEM_BYTES, "the ring fits");
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    uint8_t *gen = smem_raw + (base - smem_u32(smem_raw));
    /* Operands from a hash of the element's index: random: uniform in [-1, 1) as the lab's (every
     * bit of the mantissa and sign varies); else 128 values in [0.0078, 0.0156) (7 bits vary). */
    for (uint32_t i = threadIdx.x; i < SLOTS * SLOT / 2; i += blockDim.x) {
        uint32_t h = i * 2654435761u + blockIdx.x;
        h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12;
        const float v = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
        ((uint16_t *)gen)[i] = random ? (uint16_t)(__float_as_uint(v) >> 16) : (uint16_t)(0x3c00 | (h >> 25));
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const int wg = threadIdx.x / 128;
    float acc[MB][WN / 2];
    long long t0 = clock64();
    for (int kb = 0; kb < nkb; kb++) {
        const uint32_t slot = base + (kb % SLOTS) * SLOT;
        const uint32_t a0 = slot + wg * A_WG, b0 = slot + A_SLOT;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
                wgmma_tile<WN, 0>(acc[mb], sw128_desc(a0 + mb * 64 * 128 + kk * 32, 16, 1024),
                                  sw128_desc(b0 + kk * 32, 16, 1024), (uint32_t)(kb | kk) != 0);
        wgmma_commit();
        wgmma_wait<DEPTH>();
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
        acc_fence(acc[mb]);
    const long long t1 = clock64();
    float s = 0;
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int i = 0; i < WN / 2; i++)
            s += acc[mb][i];
    if (s == 12345.0f) /* never: keeps the MMAs */
        sink[threadIdx.x] = s;
    if (threadIdx.x == 0)
        cycles[blockIdx.x] = t1 - t0;
}

static int cmp_ll(const void *a, const void *b)
{
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

template <int WN, int MB, int NWG, int DEPTH>
static void variant(const char *what, long long *d_cycles, float *sink)
{
    auto k = rate_kernel<WN, MB, NWG, DEPTH>;
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES) != cudaSuccess) {
        fprintf(stderr, "%s: cannot get %d bytes of shared memory\n", what, SMEM_BYTES);
        exit(1);
    }
    const int nkb = 4096, mma = NWG * MB * 4 * WN / 2;
    printf("%-41s MMA/KB %4d cyc/KB:", what, mma);
    for (int random = 0; random < 2; random++)
    for (int ctas : {33, 132}) {
        long long h[132], med = 0;
        for (int rep = 0; rep < 3; rep++) { /* the last of 3: warm */
            k<<<ctas, 128 * NWG, SMEM_BYTES>>>(nkb, random, d_cycles, sink);
            if (cudaDeviceSynchronize() != cudaSuccess) {
                fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(cudaGetLastError()));
                exit(1);
            }
        }
        cudaMemcpy(h, d_cycles, ctas * sizeof(long long), cudaMemcpyDeviceToHost);
        qsort(h, ctas, sizeof h[0], cmp_ll);
        med = h[ctas / 2];
        printf("  %s %3d CTAs: %5.0f = %.3f", random ? "rand" : "flat", ctas, (double)med / nkb, (double)med / nkb / mma);
    }
    printf("\n");
}

int main(void)
{
    long long *d_cycles;
    float *sink;
    if (cudaMalloc(&d_cycles, 132 * sizeof(long long)) != cudaSuccess ||
        cudaMalloc(&sink, 512 * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "wgmma-rate: no GPU\n");
        return 1;
    }
    variant<256, 1, 2, 1>("2 WG, 1 x m64n256k16 per K step, wait 1", d_cycles, sink); /* engine 128x256 */
    variant<256, 1, 2, 0>("2 WG, 1 x m64n256k16 per K step, wait 0", d_cycles, sink);
    variant<256, 1, 1, 1>("1 WG, 1 x m64n256k16 per K step, wait 1", d_cycles, sink);
    variant<128, 2, 2, 1>("2 WG, 2 x m64n128k16 per K step, wait 1", d_cycles, sink); /* engine 256x128 */
    variant<128, 2, 1, 1>("1 WG, 2 x m64n128k16 per K step, wait 1", d_cycles, sink); /* ping-pong 128x128 */
    variant<128, 1, 2, 1>("2 WG, 1 x m64n128k16 per K step, wait 1", d_cycles, sink); /* engine 128x128 */
    variant<192, 2, 2, 1>("2 WG, 2 x m64n192k16 per K step, wait 1", d_cycles, sink); /* engine 256x192 */
    cudaFree(d_cycles);
    cudaFree(sink);
    return 0;
}
