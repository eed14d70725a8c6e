/* The GEMM engine's B loads (device code only): one K block of the unit's B tile into a ring
 * slot, for either layout, alone or shared with the cluster partner.
 *   column-major B (B^T is N x K): one box {64 k, BN n} (K-major, like A);
 *   row-major B (K x N): BN/64 boxes {64 n, 64 k}, each 8 KB (MN-major; the consumers' wgmma
 *     reads them transposed);
 *   shared (CL = 2, tile_sched.cuh): each CTA loads half of the tile and multicasts it into both
 *     CTAs' slots at the same offset, completing the same full barrier in each (ring.cuh counts
 *     the whole tile's bytes in both). */
#ifndef AGMM_KERNELS_GEMM_B_LOADER_CUH
#define AGMM_KERNELS_GEMM_B_LOADER_CUH

#include <stdint.h>

#include "kernels/gemm/config.cuh"
#include "kernels/gemm/params.h"
#include "kernels/gemm/tile_sched.cuh"
#include "kernels/hopper_ptx.cuh"

/* crank: this CTA's rank in its cluster. */
template <class Cfg>
__device__ __forceinline__ void load_b(const gemm_core &p, const tile_job &j, int kb, uint32_t dst, uint32_t full,
                                       int crank)
{
    constexpr int BN = Cfg::BN;
    if (Cfg::CL == 2 && j.share) {
        if (Cfg::B_MN) {
#pragma unroll
            for (int i = 0; i < BN / 128; i++) {
                const int box = crank * (BN / 128) + i;
                tma_load_2d_mc(dst + box * 8192, &p.map_b, j.col0 + 64 * box, kb * GEMM_BK, full, 3);
            }
        } else {
            tma_load_2d_mc(dst + crank * (BN / 2) * 128, &p.map_b_half, kb * GEMM_BK, j.col0 + crank * (BN / 2),
                           full, 3);
        }
    } else if (Cfg::B_MN) {
#pragma unroll
        for (int i = 0; i < BN / 64; i++)
            tma_load_2d(dst + i * 8192, &p.map_b, j.col0 + 64 * i, kb * GEMM_BK, full);
    } else {
        tma_load_2d(dst, &p.map_b, kb * GEMM_BK, j.col0, full);
    }
}

#endif /* AGMM_KERNELS_GEMM_B_LOADER_CUH */
