/* A tile config of gemm_configs.h as a compile-time type (device code only). */
#ifndef AGMM_KERNELS_GEMM_CONFIG_CUH
#define AGMM_KERNELS_GEMM_CONFIG_CUH

#include <stdint.h>

#include "kernels/gemm/params.h"

/* BM x BN output tile, STAGES ring slots, WGN how the two consumer warpgroups split the tile (1:
 * by rows, 2: by columns), B_MN 1 for a row-major B, CL 2 for B-multicast pairs, SK 1 for the
 * split tail (gemm_configs.h documents each). */
template <int BM_, int BN_, int STAGES_, int WGN_, int B_MN_, int CL_, int SK_>
struct gemm_cfg {
    static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, WGN = WGN_, B_MN = B_MN_, CL = CL_, SK = SK_;
    /* One consumer's part: WM rows by WN columns, as MB blocks of 64 rows; NACC fp32 accumulators
     * per thread (wgmma m64nWNk16 gives each thread WN/2 of a 64-row block). */
    static constexpr int WM = WGN == 1 ? BM / 2 : BM, WN = BN / WGN, MB = WM / 64, NACC = MB * WN / 2;
    static_assert(CL == 1 || (BM == 128 && WGN == 1 && BN % 128 == 0 && !SK), "B multicast pairs: 128-row tiles");
    static_assert(BM / (3 - WGN) % 64 == 0 && BN / WGN % 64 == 0, "consumers own whole 64 x 64 blocks");
};

#endif /* AGMM_KERNELS_GEMM_CONFIG_CUH */
