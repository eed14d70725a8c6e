/* The numerics of all_reduce_rmsnorm's epilogue, shared by the kernels (src/kernels/ar_norm.cu)
 * and the CPU world (rmsnorm.c), so that both compute every row bit for bit alike. Plain C.
 *
 * One row t of H = hidden bf16 values, from acc[h] (the fp32 sum over ranks of x_r[t][h], ranks in
 * order 0..W-1, acc = x_0; acc += x_1; ...; no rounding in between):
 *   1. a = acc[h]; a += bias[h] (if any); a += residual[t][h] (if any); r[h] = bf16(a), round to
 *      nearest even: the new residual, written out, and what the norm reads.
 *   2. ss = the fp32 sum of r[h]^2 in the order below (every product and sum rounded on its own:
 *      no fused multiply-add).
 *   3. rstd = 1 / sqrt(ss / H + eps): fp32 division, sum, square root and division, each IEEE
 *      round to nearest (eps as fp32, H as fp32).
 *   4. y[h] = bf16((r[h] * rstd) * gamma[h]): two fp32 products, then one rounding.
 *
 * The order of step 2 is that of AGMM_RMSNORM_LANES threads sharing a row, as the kernels run it:
 * the row is AGMM_RMSNORM_LANES lanes of 16-byte vectors (8 values); vector v (values 8v..8v+7)
 * belongs to lane j = v mod AGMM_RMSNORM_LANES.
 *   a. vector v's partial p_v = r[8v]^2; p_v += r[8v+1]^2; ... p_v += r[8v+7]^2.
 *   b. lane j's partial s_j = 0; s_j += p_v for its vectors v = j, j + LANES, ... in increasing v.
 *   c. within each warp of AGMM_RMSNORM_WARP lanes (j = 32w + i), a butterfly: for m = 16, 8, 4,
 *      2, 1, every lane's s_i becomes s_i + s_{i xor m} (the same bits in both lanes, addition
 *      commutes); lane 0's value is the warp's total w_w.
 *   d. ss = w_0; ss += w_1; ... ss += w_{LANES/32 - 1}.
 * Lanes without vectors (H < 8 * LANES) add zeros, which change nothing. */
#ifndef AGMM_CORE_RMSNORM_H
#define AGMM_CORE_RMSNORM_H

#include <stdint.h>

/* Threads that share one row in the kernels, and the order of step 2 above. */
#define AGMM_RMSNORM_LANES 256
#define AGMM_RMSNORM_WARP 32
/* bf16 values per 16-byte vector. */
#define AGMM_RMSNORM_VEC 8

/* Step 2: the fp32 sum of squares of r[0..h) (bf16, h a multiple of 8) in the order above. */
float agmm_rmsnorm_sumsq(const uint16_t *r, int64_t h);

/* Step 3. */
float agmm_rmsnorm_rstd(float ss, int64_t h, float eps);

/* Steps 1 to 4 for one row: acc[0..h) the fp32 sums over ranks; bias (h values) and residual (h,
 * this row's) may be NULL; writes r_out[0..h) and y[0..h). r_out may equal residual. */
void agmm_rmsnorm_row(const float *acc, const uint16_t *bias, const uint16_t *residual, const uint16_t *gamma,
                      int64_t h, float eps, uint16_t *r_out, uint16_t *y);

#endif
