/* The skinny GEMM's plan (skinny_gemm.h): where it applies and its CTA shape. Plain C. */
#include "skinny_gemm.h"

#include <stdio.h>

/* CTAs resident per SM: the kernel's launch bounds (skinny_gemm.cu) promise 2 of 16 warps. */
#define CTAS_PER_SM 2

int agmm_skinny_plan(int64_t m, int64_t n, int64_t k, agmm_layout b_layout, unsigned align, int sms,
                     agmm_skinny_shape *out, char *why, size_t why_len)
{
    const char *no = NULL;
    if (m < 1 || m > AGMM_SKINNY_MAX_ROWS)
        no = "m must be 1..64";
    else if (n < 2 || n % 2 != 0 || n > INT32_MAX)
        no = "n must be even (C is stored in pairs of columns) and below 2^31";
    else if (k < 8 || k % 8 != 0 || k > INT32_MAX)
        no = "k must be a positive multiple of 8 below 2^31";
    else if (b_layout != AGMM_LAYOUT_COL_MAJOR)
        no = "B must be column-major (B^T n x k contiguous)";
    else if (align < 16)
        no = "A and C pointers must be 16-byte aligned";
    else if (sms < 1)
        no = "the GPU's SM count is unknown";
    if (no != NULL) {
        snprintf(why, why_len, "skinny GEMM of %lld x %lld x %lld: %s", (long long)m, (long long)n, (long long)k, no);
        return -1;
    }
    agmm_skinny_shape s = {.mt = m <= 16 ? 1 : m <= 32 ? 2 : 4};
    /* Fewest n8 blocks per CTA that fit the grid in one round of resident CTAs; the rest of the 16
     * warps split K, but never into more parts than the K chunks. */
    const int64_t n8 = (n + 7) / 8, chunks = (k + AGMM_SKINNY_CHUNK - 1) / AGMM_SKINNY_CHUNK;
    s.nb = 1;
    while (s.nb < AGMM_SKINNY_WARPS && (n8 + s.nb - 1) / s.nb > (int64_t)CTAS_PER_SM * sms)
        s.nb *= 2;
    s.ks = AGMM_SKINNY_WARPS / s.nb;
    while (s.ks > 1 && s.ks > chunks)
        s.ks /= 2;
    s.grid = (int)((n8 + s.nb - 1) / s.nb);
    s.threads = 32 * s.nb * s.ks;
    s.smem = (s.ks - 1) * s.nb * s.mt * 4 * 32 * (int)sizeof(float);
    *out = s;
    return 0;
}
