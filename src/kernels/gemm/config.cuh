/* A tile config of gemm_configs.h as a compile-time type (device code only). */
#ifndef AGMM_KERNELS_GEMM_CONFIG_CUH
#define AGMM_KERNELS_GEMM_CONFIG_CUH

#include <stdint.h>

#include "kernels/gemm/params.h"

/* BM x BN output tile, STAGES ring slots, WGN how the two cooperative consumer warpgroups split
 * the tile (1: by rows, 2: by columns), B_MN 1 for a row-major B, CL 2 for B-multicast pairs, SK 1
 * for the split tail and 2 for the stream-K tail, PP 1 for ping-pong consumers (each a whole tile of its own, alternate units;
 * gemm_configs.h documents each). */
template <int BM_, int BN_, int STAGES_, int WGN_, int B_MN_, int CL_, int SK_, int PP_ = 0>
struct gemm_cfg {
    static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, WGN = WGN_, B_MN = B_MN_, CL = CL_, SK = SK_, PP = PP_;
    /* One consumer's part: WM rows by WN columns, as MB blocks of 64 rows; NACC fp32 accumulators
     * per thread (wgmma m64nWNk16 gives each thread WN/2 of a 64-row block). Ping-pong: the whole
     * tile (128 x 128 or 64 x 256: 128 accumulators; 128 x 176: 176). */
    static constexpr int WM = PP ? BM : WGN == 1 ? BM / 2 : BM, WN = PP ? BN : BN / WGN, MB = WM / 64,
                         NACC = MB * WN / 2;
    /* Consumer cw's part starts at row cw * CW_ROWS, column cw * CW_COLS of the tile. */
    static constexpr int CW_ROWS = !PP && WGN == 1 ? WM : 0, CW_COLS = !PP && WGN == 2 ? WN : 0;
    /* B multicast pairs: each CTA loads half of B's columns for both (b_loader.cuh): with column-major
     * B BN/2 rows of the slot, whole 8-row swizzle atoms; with row-major B whole 64-column boxes. */
    static_assert(CL == 1 || (BM == 128 && WGN == 1 && (B_MN ? BN % 128 == 0 : BN % 16 == 0) && !SK),
                  "B multicast pairs: 128-row tiles, halves of whole swizzle atoms or boxes");
    /* A consumer width that is not a multiple of 64 (192 x 192's 96, the pairs' and ping-pong's 144,
     * 160, 176; gemm_configs.h): its columns in 16s, its last 64-column piece partial in the
     * epilogues; column-major B only (row-major B comes in 64-column boxes, b_loader.cuh). Split by
     * columns (WGN = 2), the second consumer's B starts WN rows into the slot: whole 1024-byte
     * swizzle atoms (8 rows each). */
    static constexpr bool WIDE_ODD = WN % 64 != 0;
    static_assert(WM % 64 == 0 && WN % 16 == 0, "consumers own whole 64-row blocks of 16-column multiples");
    static_assert(!WIDE_ODD || !B_MN, "a consumer width that is not a multiple of 64: column-major B");
    static_assert(!PP || (WGN == 1 && CL == 1 && !SK && NACC <= 176),
                  "ping-pong: no cluster or split tail; at most 176 accumulators per thread (128 x 192's 192 "
                  "spill in the consumers' 224 registers)");
};

#endif /* AGMM_KERNELS_GEMM_CONFIG_CUH */
