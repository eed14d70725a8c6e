/* The skinny GEMM's host half (src/kernels/skinny_gemm.h), without a GPU:
 *   lane_map  a warp's loads, as the kernel makes them (each lane's 16-byte pieces of A and B at
 *             agmm_skinny_lane_k/row/col, agmm_skinny_operands for both steps of a chunk), fed to
 *             an emulated mma.m16n8k16 that places every register's elements where the PTX ISA
 *             says the fragments hold them: the product of a 16 x 32 by 32 x 8 chunk comes out
 *             where the kernel stores it (agmm_skinny_lane_out_col), exactly, on random integers;
 *             the operands fill each fragment element once per step
 *   plan      the decode shape's CTA shape worked out by hand; refusals name what is wrong; over
 *             random shapes the grid covers n once, the warps fit, K is never split into more
 *             parts than chunks, and the tiles cover m */
#include <stdio.h>
#include <string.h>

#include "cpu_tests.h"
#include "harness.h"
#include "core/numeric.h"
#include "kernels/skinny_gemm.h"

/* A 16-byte piece: 8 bf16 of a row from k0, as 4 words (lower k in the low half). */
static void piece(const float *row, int k0, uint32_t w[4])
{
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)agmm_f32_to_bf16(row[k0 + 2 * i]) | (uint32_t)agmm_f32_to_bf16(row[k0 + 2 * i + 1]) << 16;
}

static float lo_half(uint32_t w) { return agmm_bf16_to_f32((uint16_t)(w & 0xffff)); }
static float hi_half(uint32_t w) { return agmm_bf16_to_f32((uint16_t)(w >> 16)); }

void test_skinny_lane_map(void)
{
    uint64_t rng = 0x5eed5c1;
    int bad = 0, once_bad = 0;
    char first[200] = "";
    for (int trial = 0; trial < 20; trial++) {
        float a[16][32], bt[8][32]; /* A rows, B's columns (B^T rows): one chunk of k */
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 32; k++)
                a[r][k] = (float)agmm_rng_small_int(&rng, 3);
        for (int n = 0; n < 8; n++)
            for (int k = 0; k < 32; k++)
                bt[n][k] = (float)agmm_rng_small_int(&rng, 3);
        double d[16][8] = {{0}}; /* the emulated accumulator, by (row, column) of the fragment */
        for (int s = 0; s < 2; s++) {
            /* Fragments assembled from the registers of all 32 lanes (PTX ISA, mma.m16n8k16 .bf16):
             * A register i of lane (g, t) holds rows g (i = 0, 2) or g + 8 (i = 1, 3), k 2t, 2t+1
             * (i = 0, 1) or 2t+8, 2t+9 (i = 2, 3); B register i holds k 2t+8i, 2t+8i+1 of column g. */
            double fa[16][16], fb[16][8];
            int seen_a[16][16] = {{0}}, seen_b[16][8] = {{0}};
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3, kl = agmm_skinny_lane_k(lane);
                uint32_t lo[4], hi[4], b[4], ar[4], br[2];
                piece(a[agmm_skinny_lane_row(lane)], kl, lo);
                piece(a[agmm_skinny_lane_row(lane) + 8], kl, hi);
                piece(bt[agmm_skinny_lane_col(lane)], kl, b);
                agmm_skinny_operands(lo, hi, b, s, ar, br);
                for (int i = 0; i < 4; i++) {
                    const int row = g + 8 * (i & 1), k = 2 * t + 8 * (i >> 1);
                    fa[row][k] = lo_half(ar[i]);
                    fa[row][k + 1] = hi_half(ar[i]);
                    seen_a[row][k]++;
                    seen_a[row][k + 1]++;
                }
                for (int i = 0; i < 2; i++) {
                    const int k = 2 * t + 8 * i;
                    fb[k][g] = lo_half(br[i]);
                    fb[k + 1][g] = hi_half(br[i]);
                    seen_b[k][g]++;
                    seen_b[k + 1][g]++;
                }
            }
            for (int r = 0; r < 16; r++)
                for (int k = 0; k < 16; k++)
                    once_bad += seen_a[r][k] != 1 || (r < 8 && seen_b[k][r] != 1);
            for (int r = 0; r < 16; r++)
                for (int n = 0; n < 8; n++)
                    for (int k = 0; k < 16; k++)
                        d[r][n] += fa[r][k] * fb[k][n];
        }
        /* Accumulator element i of lane (g, t): row g + 8 (i >> 1), column 2t + (i & 1). */
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < 4; i++) {
                const int frow = (lane >> 2) + 8 * (i >> 1), fcol = 2 * (lane & 3) + (i & 1);
                const int row = agmm_skinny_lane_row(lane) + 8 * (i >> 1);
                const int col = agmm_skinny_lane_out_col(lane) + (i & 1);
                double want = 0;
                for (int k = 0; k < 32; k++)
                    want += (double)a[row][k] * (double)bt[col][k];
                if (d[frow][fcol] != want && bad++ == 0)
                    snprintf(first, sizeof first, " (first: trial %d lane %d element %d: %g, want %g)", trial, lane,
                             i, d[frow][fcol], want);
            }
    }
    agmm_check(once_bad == 0, "skinny GEMM: every element of the A and B fragments comes from exactly one lane's "
                              "operands in each step of a chunk");
    agmm_check(bad == 0,
               "skinny GEMM: a chunk's loads through the emulated mma.m16n8k16 give C (16 x 8) = A (16 x 32) * B "
               "(32 x 8) exactly where the lanes store it, 20 random integer chunks%s",
               first);
#undef BELOW
}

void test_skinny_plan(void)
{
    char why[200] = "";
    agmm_skinny_shape s;
    /* Decode on an H200: 1024 n8 blocks, 132 SMs x 2 CTAs: 4 blocks per CTA (256 CTAs), K in 4. */
    int rc = agmm_skinny_plan(1, 8192, 3584, AGMM_LAYOUT_COL_MAJOR, 16, 132, &s, why, sizeof why);
    agmm_check(rc == 0 && s.mt == 1 && s.nb == 4 && s.ks == 4 && s.grid == 256 && s.threads == 512 &&
                   s.smem == 3 * 4 * 1 * 4 * 32 * 4,
               "skinny plan 1 x 8192 x 3584 on 132 SMs: 1 tile, 4 n8 blocks x 4 K parts per CTA, 256 CTAs of 512 "
               "threads, 6144 bytes for the sums (got rc %d: %d, %d, %d, %d, %d, %d)",
               rc, s.mt, s.nb, s.ks, s.grid, s.threads, s.smem);
    rc = agmm_skinny_plan(33, 1024, 64, AGMM_LAYOUT_COL_MAJOR, 16, 132, &s, why, sizeof why);
    agmm_check(rc == 0 && s.mt == 4 && s.nb == 1 && s.ks == 2 && s.grid == 128,
               "skinny plan 33 x 1024 x 64: 4 tiles, one n8 block per CTA, K (2 chunks) in 2 parts, 128 CTAs");

    const struct {
        int64_t m, n, k;
        agmm_layout layout;
        unsigned align;
        const char *says;
    } bad[] = {
        {0, 64, 64, AGMM_LAYOUT_COL_MAJOR, 16, "m must be 1..64"},
        {65, 64, 64, AGMM_LAYOUT_COL_MAJOR, 16, "m must be 1..64"},
        {8, 63, 64, AGMM_LAYOUT_COL_MAJOR, 16, "n must be even"},
        {8, 64, 60, AGMM_LAYOUT_COL_MAJOR, 16, "k must be a positive multiple of 8"},
        {8, 64, 0, AGMM_LAYOUT_COL_MAJOR, 16, "k must be a positive multiple of 8"},
        {8, 64, 64, AGMM_LAYOUT_ROW_MAJOR, 16, "B must be column-major"},
        {8, 64, 64, AGMM_LAYOUT_COL_MAJOR, 8, "16-byte aligned"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        rc = agmm_skinny_plan(bad[i].m, bad[i].n, bad[i].k, bad[i].layout, bad[i].align, 132, &s, why, sizeof why);
        agmm_check(rc == -1 && strstr(why, bad[i].says) != NULL, "skinny plan %lld x %lld x %lld refused: \"%s\"",
                   (long long)bad[i].m, (long long)bad[i].n, (long long)bad[i].k, why);
    }

    uint64_t rng = 0xc0ffee;
#define BELOW(n) ((int64_t)(agmm_rng_next(&rng) % (uint64_t)(n))) /* 0 .. n - 1 */
    int wrong = 0;
    char first[sizeof why + 80] = "";
    for (int i = 0; i < 5000; i++) {
        const int64_t m = 1 + BELOW(64), n = 2 * (1 + BELOW(20000)), k = 8 * (1 + BELOW(2000));
        const int sms = 1 + (int)BELOW(200);
        if (agmm_skinny_plan(m, n, k, AGMM_LAYOUT_COL_MAJOR, 16, sms, &s, why, sizeof why) != 0) {
            if (wrong++ == 0)
                snprintf(first, sizeof first, " (first: %lld x %lld x %lld refused: %s)", (long long)m, (long long)n,
                         (long long)k, why);
            continue;
        }
        const int64_t n8 = (n + 7) / 8, chunks = (k + 31) / 32;
        const int ok = (s.mt == 1 || s.mt == 2 || s.mt == 4) && 16 * s.mt >= m && (s.mt == 1 || 8 * s.mt < m) &&
                       s.nb >= 1 && s.ks >= 1 && s.nb * s.ks <= AGMM_SKINNY_WARPS &&
                       (int64_t)s.grid * s.nb >= n8 && (int64_t)(s.grid - 1) * s.nb < n8 &&
                       (s.ks == 1 || s.ks <= chunks) && (s.nb == AGMM_SKINNY_WARPS || s.grid <= 2 * sms) &&
                       s.threads == 32 * s.nb * s.ks && s.smem == (s.ks - 1) * s.nb * s.mt * 512 &&
                       s.smem <= 48 * 1024;
        if (!ok && wrong++ == 0)
            snprintf(first, sizeof first, " (first: %lld x %lld x %lld on %d SMs: mt %d nb %d ks %d grid %d)",
                     (long long)m, (long long)n, (long long)k, sms, s.mt, s.nb, s.ks, s.grid);
    }
    agmm_check(wrong == 0,
               "skinny plan, 5000 random shapes: tiles cover m, the grid covers n once, at most 16 warps, K in no more "
               "parts than chunks, one round of 2 CTAs per SM unless 16 n8 blocks per CTA, sums under 48 KB%s",
               first);
#undef BELOW
}
