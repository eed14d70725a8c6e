/* all_reduce_rmsnorm's epilogue on the CPU, in exactly the kernels' fp32 order (rmsnorm.h).
 * Every product and sum is its own statement: with -std=c11 neither GCC nor Clang contracts
 * statements into a fused multiply-add, so each rounds on its own, as __fmul_rn / __fadd_rn do
 * in the kernels. */
#include <math.h>
#include <string.h>

#include "numeric.h"
#include "rmsnorm.h"

float agmm_rmsnorm_sumsq(const uint16_t *r, int64_t h)
{
    float lane[AGMM_RMSNORM_LANES];
    memset(lane, 0, sizeof lane);
    for (int64_t v = 0; v < h / AGMM_RMSNORM_VEC; v++) {
        const uint16_t *x = r + v * AGMM_RMSNORM_VEC;
        float p = 0.0f;
        for (int e = 0; e < AGMM_RMSNORM_VEC; e++) {
            const float f = agmm_bf16_to_f32(x[e]);
            const float sq = f * f;
            p = e == 0 ? sq : p + sq;
        }
        const int j = (int)(v % AGMM_RMSNORM_LANES);
        lane[j] = lane[j] + p;
    }
    float ss = 0.0f;
    for (int w = 0; w < AGMM_RMSNORM_LANES / AGMM_RMSNORM_WARP; w++) {
        float *s = lane + w * AGMM_RMSNORM_WARP, t[AGMM_RMSNORM_WARP];
        for (int m = AGMM_RMSNORM_WARP / 2; m >= 1; m /= 2) {
            for (int i = 0; i < AGMM_RMSNORM_WARP; i++)
                t[i] = s[i] + s[i ^ m];
            memcpy(s, t, sizeof t);
        }
        ss = w == 0 ? s[0] : ss + s[0];
    }
    return ss;
}

float agmm_rmsnorm_rstd(float ss, int64_t h, float eps)
{
    const float mean = ss / (float)h;
    const float shifted = mean + eps;
    const float root = sqrtf(shifted);
    return 1.0f / root;
}

void agmm_rmsnorm_row(const float *acc, const uint16_t *bias, const uint16_t *residual, const uint16_t *gamma,
                      int64_t h, float eps, uint16_t *r_out, uint16_t *y)
{
    for (int64_t i = 0; i < h; i++) {
        float a = acc[i];
        if (bias)
            a = a + agmm_bf16_to_f32(bias[i]);
        if (residual)
            a = a + agmm_bf16_to_f32(residual[i]);
        r_out[i] = agmm_f32_to_bf16(a);
    }
    const float rstd = agmm_rmsnorm_rstd(agmm_rmsnorm_sumsq(r_out, h), h, eps);
    for (int64_t i = 0; i < h; i++) {
        const float scaled = agmm_bf16_to_f32(r_out[i]) * rstd;
        const float weighted = scaled * agmm_bf16_to_f32(gamma[i]);
        y[i] = agmm_f32_to_bf16(weighted);
    }
}
