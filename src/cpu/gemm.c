/* The CPU world's GEMM: C (bf16) = A (bf16) * B (bf16) with fp32 accumulation, used by the three
 * all-gather matmul backends of the CPU world and by agmm-bench's plain-GEMM column there.
 *
 * Blocked the GotoBLAS way, small enough to read:
 *   for each block of NC columns:   convert B's K x NC block to fp32 once, in NR-wide panels
 *                                   (kept for the next call if it asks for the same block)
 *     for each block of MC rows:    convert A's MC x K block to fp32, in MR-tall panels
 *       for each KC slice of K:     MR x NR micro-kernel over every (row panel, column panel),
 *                                   accumulating into an fp32 MC x NC block
 *     round the block to bf16
 * The micro-kernel keeps its MR x NR sums in registers (GCC/Clang vector types, so SSE2 is enough)
 * and adds the products of k = kc, kc+1, ... in order. Across KC slices a sum goes to memory and
 * back unchanged, so every element is the fp32 sum over k = 0..K-1 in order, rounded once:
 * identical for any tiling, which is what lets the backends be compared bit for bit. Products are
 * never fused into FMAs (C11 mode keeps -ffp-contract=off). */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#include "../core/numeric.h"

enum {
    MR = 4,    /* micro-kernel rows */
    NR = 8,    /* micro-kernel columns (two 4-wide vectors) */
    MC = 64,   /* rows per A block */
    NC = 128,  /* columns per B block (a multiple of NR) */
    KC = 256   /* k per pass over the block, so a B panel slice stays in L1 */
};

typedef float v4f __attribute__((vector_size(16)));

static v4f load4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void store4(float *p, v4f v) { memcpy(p, &v, sizeof v); }

uint64_t agmm_cpu_gemm_ws_bytes(int64_t k)
{
    return ((uint64_t)MC * (uint64_t)k + (uint64_t)NC * (uint64_t)k + (uint64_t)MC * NC) * sizeof(float) + 128;
}

agmm_status agmm_cpu_gemm_ws_init(agmm_cpu_gemm_ws *ws, int64_t k, agmm_error *err)
{
    memset(ws, 0, sizeof *ws);
    ws->k = k;
    size_t a_bytes = (size_t)MC * (size_t)k * sizeof(float);
    size_t b_bytes = (size_t)NC * (size_t)k * sizeof(float);
    size_t acc_bytes = (size_t)MC * NC * sizeof(float); /* agmm_cpu_gemm_ws_bytes: these, rounded */
    ws->a_pack = aligned_alloc(64, (a_bytes + 63) / 64 * 64);
    ws->b_pack = aligned_alloc(64, (b_bytes + 63) / 64 * 64);
    ws->acc = aligned_alloc(64, acc_bytes);
    if (ws->a_pack == NULL || ws->b_pack == NULL || ws->acc == NULL) {
        agmm_cpu_gemm_ws_free(ws);
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "GEMM workspace for K=%lld (%zu bytes) allocation failed",
                         (long long)k, a_bytes + b_bytes + acc_bytes);
    }
    return AGMM_SUCCESS;
}

void agmm_cpu_gemm_ws_forget_b(agmm_cpu_gemm_ws *ws) { ws->b_packed = NULL; }

void agmm_cpu_gemm_ws_free(agmm_cpu_gemm_ws *ws)
{
    free(ws->a_pack);
    free(ws->b_pack);
    free(ws->acc);
    ws->a_pack = ws->b_pack = ws->acc = NULL;
}

/* B columns [col0, col0+cols) (cols <= NC) into NR-wide panels: panel p holds, for every kk, the
 * NR values of columns col0 + p*NR ... at b_pack[p*NR*k + kk*NR + j]. Missing columns are 0. */
static void pack_b(float *bp, const uint16_t *b, agmm_layout layout, int64_t k, int64_t n, int64_t col0,
                   int64_t cols)
{
    int64_t panels = (cols + NR - 1) / NR;
    for (int64_t p = 0; p < panels; p++) {
        float *dst = bp + p * NR * k;
        int64_t j0 = col0 + p * NR;
        int64_t w = cols - p * NR < NR ? cols - p * NR : NR;
        if (layout == AGMM_LAYOUT_COL_MAJOR) {
            /* Column j of B is row j of B^T: contiguous in kk. */
            for (int64_t j = 0; j < NR; j++) {
                if (j < w) {
                    const uint16_t *src = b + (j0 + j) * k;
                    for (int64_t kk = 0; kk < k; kk++)
                        dst[kk * NR + j] = agmm_bf16_to_f32(src[kk]);
                } else {
                    for (int64_t kk = 0; kk < k; kk++)
                        dst[kk * NR + j] = 0.0f;
                }
            }
        } else {
            for (int64_t kk = 0; kk < k; kk++) {
                const uint16_t *src = b + kk * n + j0;
                for (int64_t j = 0; j < NR; j++)
                    dst[kk * NR + j] = j < w ? agmm_bf16_to_f32(src[j]) : 0.0f;
            }
        }
    }
}

/* A rows [0, rows) (rows <= MC) into MR-tall panels: a_pack[p*MR*k + kk*MR + i]. Missing rows 0. */
static void pack_a(float *ap, const uint16_t *a, int64_t lda, int64_t k, int64_t rows)
{
    int64_t panels = (rows + MR - 1) / MR;
    for (int64_t p = 0; p < panels; p++) {
        float *dst = ap + p * MR * k;
        for (int64_t i = 0; i < MR; i++) {
            int64_t r = p * MR + i;
            if (r < rows) {
                const uint16_t *src = a + r * lda;
                for (int64_t kk = 0; kk < k; kk++)
                    dst[kk * MR + i] = agmm_bf16_to_f32(src[kk]);
            } else {
                for (int64_t kk = 0; kk < k; kk++)
                    dst[kk * MR + i] = 0.0f;
            }
        }
    }
}

/* acc[MR x NR] (row stride NC) (+)= ap * bp over kn values of k. first: start from zero. */
static void micro_kernel(int64_t kn, const float *ap, const float *bp, float *acc, int first)
{
    v4f c0l, c0h, c1l, c1h, c2l, c2h, c3l, c3h;
    if (first) {
        c0l = c0h = c1l = c1h = c2l = c2h = c3l = c3h = (v4f){0, 0, 0, 0};
    } else {
        c0l = load4(acc + 0 * NC), c0h = load4(acc + 0 * NC + 4);
        c1l = load4(acc + 1 * NC), c1h = load4(acc + 1 * NC + 4);
        c2l = load4(acc + 2 * NC), c2h = load4(acc + 2 * NC + 4);
        c3l = load4(acc + 3 * NC), c3h = load4(acc + 3 * NC + 4);
    }
    for (int64_t kk = 0; kk < kn; kk++) {
        v4f bl = load4(bp + kk * NR), bh = load4(bp + kk * NR + 4);
        const float *a = ap + kk * MR;
        v4f a0 = {a[0], a[0], a[0], a[0]}, a1 = {a[1], a[1], a[1], a[1]};
        v4f a2 = {a[2], a[2], a[2], a[2]}, a3 = {a[3], a[3], a[3], a[3]};
        c0l += a0 * bl, c0h += a0 * bh;
        c1l += a1 * bl, c1h += a1 * bh;
        c2l += a2 * bl, c2h += a2 * bh;
        c3l += a3 * bl, c3h += a3 * bh;
    }
    store4(acc + 0 * NC, c0l), store4(acc + 0 * NC + 4, c0h);
    store4(acc + 1 * NC, c1l), store4(acc + 1 * NC + 4, c1h);
    store4(acc + 2 * NC, c2l), store4(acc + 2 * NC + 4, c2h);
    store4(acc + 3 * NC, c3l), store4(acc + 3 * NC + 4, c3h);
}

/* One MC x NC block: A and B are packed; accumulate and round into C. */
static void block(agmm_cpu_gemm_ws *ws, int64_t rows, int64_t cols, uint16_t *c, int64_t ldc)
{
    int64_t k = ws->k;
    int64_t row_panels = (rows + MR - 1) / MR, col_panels = (cols + NR - 1) / NR;
    for (int64_t kc = 0; kc < k; kc += KC) {
        int64_t kn = k - kc < KC ? k - kc : KC;
        for (int64_t jp = 0; jp < col_panels; jp++) {
            const float *bp = ws->b_pack + jp * NR * k + kc * NR;
            for (int64_t ip = 0; ip < row_panels; ip++)
                micro_kernel(kn, ws->a_pack + ip * MR * k + kc * MR, bp, ws->acc + ip * MR * NC + jp * NR, kc == 0);
        }
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            c[i * ldc + j] = agmm_f32_to_bf16(ws->acc[i * NC + j]);
}

void agmm_cpu_gemm_bf16(agmm_cpu_gemm_ws *ws, const uint16_t *a, int64_t lda, int64_t rows, const uint16_t *b,
                        agmm_layout b_layout, int64_t n, int64_t col0, int64_t cols, uint16_t *c, int64_t ldc)
{
    int64_t k = ws->k;
    for (int64_t jc = 0; jc < cols; jc += NC) {
        int64_t nc = cols - jc < NC ? cols - jc : NC;
        if (ws->b_packed != b || ws->b_layout != b_layout || ws->b_n != n || ws->b_col0 != col0 + jc ||
            ws->b_cols != nc) {
            pack_b(ws->b_pack, b, b_layout, k, n, col0 + jc, nc);
            ws->b_packed = b, ws->b_layout = b_layout, ws->b_n = n, ws->b_col0 = col0 + jc, ws->b_cols = nc;
        }
        for (int64_t ic = 0; ic < rows; ic += MC) {
            int64_t mc = rows - ic < MC ? rows - ic : MC;
            pack_a(ws->a_pack, a + ic * lda, lda, k, mc);
            block(ws, mc, nc, c + ic * ldc + jc, ldc);
        }
    }
}
