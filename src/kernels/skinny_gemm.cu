/* The skinny GEMM's kernel (skinny_gemm.h has the design and the lane map). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "skinny_gemm.h"

namespace {

constexpr int kMaxThreads = 32 * AGMM_SKINNY_WARPS;

/* D += A * B on one 16 x 8 x 16 tile: fragments as the PTX ISA's mma.m16n8k16 (.bf16) gives them. */
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void words(uint4 v, uint32_t w[4])
{
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
}

/* MT 16-row tiles of A; U chunks of B loaded before their mmas (the loads in flight per lane). */
template <int MT, int U>
__global__ void __launch_bounds__(kMaxThreads, 2)
skinny_kernel(const __nv_bfloat16 *__restrict__ a, const __nv_bfloat16 *__restrict__ bt,
              __nv_bfloat162 *__restrict__ c, int m, int n, int k, int nb, int ks)
{
    extern __shared__ float sums[]; /* [ks - 1][nb][MT * 4][32]: warps wk >= 1 of each n8 block */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wn = warp % nb, wk = warp / nb;
    const int n8 = blockIdx.x * nb + wn;
    const int col = n8 * 8 + agmm_skinny_lane_col(lane), kl = agmm_skinny_lane_k(lane);
    const int row = agmm_skinny_lane_row(lane);
    const int chunks = (k + AGMM_SKINNY_CHUNK - 1) / AGMM_SKINNY_CHUNK;
    const bool col_ok = col < n;
    const __nv_bfloat16 *bcol = bt + (size_t)(col_ok ? col : 0) * (size_t)k + kl;
    const uint4 zero = make_uint4(0, 0, 0, 0);

    float acc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; t++)
        acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

    for (int c0 = wk; c0 < chunks; c0 += ks * U) {
        /* B is read once: streaming loads (evict first), so that A stays in L1 for the other warps. */
        uint4 bv[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int ch = c0 + u * ks, kk = ch * AGMM_SKINNY_CHUNK + kl;
            bv[u] = col_ok && ch < chunks && kk < k ? __ldcs((const uint4 *)(bcol + (size_t)ch * AGMM_SKINNY_CHUNK))
                                                    : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int ch = c0 + u * ks; /* the same for the whole warp */
            if (ch >= chunks)
                break;
            const int kk = ch * AGMM_SKINNY_CHUNK + kl;
            uint32_t bw[4];
            words(bv[u], bw);
#pragma unroll
            for (int t = 0; t < MT; t++) {
                if (16 * t >= m) /* a tile past m: nothing to multiply (warp-uniform) */
                    break;
                const int r0 = 16 * t + row, r1 = r0 + 8;
                const uint4 lo = kk < k && r0 < m ? __ldg((const uint4 *)(a + (size_t)r0 * k + kk)) : zero;
                const uint4 hi = kk < k && r1 < m ? __ldg((const uint4 *)(a + (size_t)r1 * k + kk)) : zero;
                uint32_t lw[4], hw[4], ar[4], br[2];
                words(lo, lw);
                words(hi, hw);
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    agmm_skinny_operands(lw, hw, bw, s, ar, br);
                    mma_16816(acc[t], ar, br);
                }
            }
        }
    }

    /* The K parts of an n8 block, added in warp order by its first warp: the same bits every run. */
    if (ks > 1) {
        if (wk > 0) {
            float *mine = sums + ((size_t)(wk - 1) * nb + wn) * (MT * 4 * 32);
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    mine[(t * 4 + q) * 32 + lane] = acc[t][q];
        }
        __syncthreads();
        if (wk > 0)
            return;
        for (int w = 1; w < ks; w++) {
            const float *part = sums + ((size_t)(w - 1) * nb + wn) * (MT * 4 * 32);
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    acc[t][q] += part[(t * 4 + q) * 32 + lane];
        }
    }

    /* The accumulator's (row, 2 columns) and (row + 8, the same columns) per tile; n is even, so a
     * pair is wholly inside C or wholly outside. */
    const int oc = n8 * 8 + agmm_skinny_lane_out_col(lane);
    if (oc >= n)
        return;
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = 16 * t + row + 8 * h;
            if (r < m)
                c[((size_t)r * n + oc) / 2] = __floats2bfloat162_rn(acc[t][2 * h], acc[t][2 * h + 1]);
        }
}

template <int MT, int U>
cudaError_t launch(const agmm_skinny_shape *sh, const void *a, const void *b, void *c, int m, int n, int k,
                   cudaStream_t stream)
{
    skinny_kernel<MT, U><<<sh->grid, sh->threads, sh->smem, stream>>>(
        (const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, (__nv_bfloat162 *)c, m, n, k, sh->nb, sh->ks);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t agmm_skinny_launch(const agmm_skinny_shape *sh, const void *a, const void *b, void *c,
                                          int64_t m, int64_t n, int64_t k, cudaStream_t stream)
{
    /* Fewer loads in flight for four tiles: their accumulators and A pieces need the registers. */
    switch (sh->mt) {
    case 1: return launch<1, 4>(sh, a, b, c, (int)m, (int)n, (int)k, stream);
    case 2: return launch<2, 4>(sh, a, b, c, (int)m, (int)n, (int)k, stream);
    case 4: return launch<4, 2>(sh, a, b, c, (int)m, (int)n, (int)k, stream);
    default: return cudaErrorInvalidValue;
    }
}
