/* GPU tests of the skinny GEMM (src/kernels/skinny_gemm.h) and of its place among the plain GEMMs
 * (src/backends/gemm_lt.h):
 *   kernel  every tile count (m = 1 .. 64), n not a multiple of 8, K not a multiple of 32 and
 *           shorter than the K split, on integers in [-1, 1] (every product and sum exact: C must
 *           equal the fp64 product bit for bit) and on uniform values (relative Frobenius error
 *           <= 1e-2 against fp64, bf16 rounding alone gives ~2e-3; decode's shapes among them,
 *           checked on 256 sampled columns); C poisoned with NaN before every run and followed by a
 *           poisoned guard that must stay untouched; a second run gives the same bits
 *   choice  AGMM_SKINNY=force makes a plain GEMM plan run the kernel where it applies, and not
 *           where it does not (row-major B) or where the plan does not allow it (the baselines'
 *           flags), nor with AGMM_SKINNY=0; each runs correctly */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_tests.h"
#include "../harness.h"
#include "backends/gemm_lt.h"
#include "core/numeric.h"
#include "kernels/skinny_gemm.h"

#define TOL 1e-2
#define GUARD 256    /* poisoned elements after C */
#define SAMPLED 256  /* columns checked on the large shapes */

typedef struct {
    int64_t m, n, k;
    int exact; /* integer inputs: compare bit for bit */
} shape;

typedef struct {
    uint16_t *h_a, *h_b, *h_c, *h_c2;
    void *d_a, *d_b, *d_c;
} bufs;

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        return agmm_check(0, "skinny: %s: %s", what, cudaGetErrorString(e));
    return 1;
}

static void fill(uint16_t *x, size_t n, int exact, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) {
        float v = exact ? (float)agmm_rng_small_int(&st, 1) : agmm_rng_uniform(&st);
        x[i] = agmm_f32_to_bf16(v);
    }
}

static int poison(void *d, size_t elems, uint16_t *scratch)
{
    for (size_t i = 0; i < elems; i++)
        scratch[i] = AGMM_POISON_BF16;
    return cuda_ok(cudaMemcpy(d, scratch, elems * 2, cudaMemcpyHostToDevice), "poison C");
}

static void bufs_free(bufs *b)
{
    free(b->h_a);
    free(b->h_b);
    free(b->h_c);
    free(b->h_c2);
    cudaFree(b->d_a);
    cudaFree(b->d_b);
    cudaFree(b->d_c);
    memset(b, 0, sizeof *b);
}

/* Host and device operands of s with fresh values; B column-major (B^T, n x k). */
static int bufs_make(bufs *b, const shape *s, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    const size_t a = (size_t)(s->m * s->k), bb = (size_t)(s->k * s->n), c = (size_t)(s->m * s->n) + GUARD;
    b->h_a = malloc(a * 2);
    b->h_b = malloc(bb * 2);
    b->h_c = malloc(c * 2);
    b->h_c2 = malloc(c * 2);
    if (!b->h_a || !b->h_b || !b->h_c || !b->h_c2)
        return agmm_check(0, "skinny: host allocation");
    fill(b->h_a, a, s->exact, seed);
    fill(b->h_b, bb, s->exact, seed * 31 + 7);
    return cuda_ok(cudaMalloc(&b->d_a, a * 2), "cudaMalloc A") && cuda_ok(cudaMalloc(&b->d_b, bb * 2), "cudaMalloc B") &&
           cuda_ok(cudaMalloc(&b->d_c, c * 2), "cudaMalloc C") &&
           cuda_ok(cudaMemcpy(b->d_a, b->h_a, a * 2, cudaMemcpyHostToDevice), "upload A") &&
           cuda_ok(cudaMemcpy(b->d_b, b->h_b, bb * 2, cudaMemcpyHostToDevice), "upload B");
}

/* C (host copy, m x n then the guard) against the fp64 product: every column up to SAMPLED
 * columns, else SAMPLED of them (first, last, spread). Returns 1 if it passes; *what says how. */
static int check(const bufs *b, const shape *s, const uint16_t *c, char *what, size_t what_len)
{
    int64_t nans = 0, guard_hit = 0, mismatch = 0;
    for (int64_t i = 0; i < s->m * s->n; i++)
        nans += isnan(agmm_bf16_to_f32(c[i]));
    for (int64_t i = 0; i < GUARD; i++)
        guard_hit += c[s->m * s->n + i] != AGMM_POISON_BF16;
    const int64_t cols = s->n <= SAMPLED ? s->n : SAMPLED;
    double num = 0, den = 0;
    for (int64_t ci = 0; ci < cols; ci++) {
        const int64_t j = s->n <= SAMPLED ? ci : ci == cols - 1 ? s->n - 1 : ci * (s->n / SAMPLED) + ci % 7;
        for (int64_t i = 0; i < s->m; i++) {
            double ref = 0;
            for (int64_t kk = 0; kk < s->k; kk++)
                ref += (double)agmm_bf16_to_f32(b->h_a[i * s->k + kk]) * agmm_bf16_to_f32(b->h_b[j * s->k + kk]);
            const double got = agmm_bf16_to_f32(c[i * s->n + j]);
            mismatch += got != ref;
            num += (got - ref) * (got - ref);
            den += ref * ref;
        }
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    snprintf(what, what_len, "%lld NaN, %lld guard elements written, %s", (long long)nans, (long long)guard_hit,
             s->exact ? "" : "rel ");
    const size_t used = strlen(what);
    if (s->exact)
        snprintf(what + used, what_len - used, "%lld of %lld checked elements differ from the exact product",
                 (long long)mismatch, (long long)(cols * s->m));
    else
        snprintf(what + used, what_len - used, "%.2e over %lld columns", rel, (long long)cols);
    return nans == 0 && guard_hit == 0 && (s->exact ? mismatch == 0 : rel <= TOL);
}

static void kernel_case(const shape *s, int sms, uint64_t seed)
{
    bufs b;
    agmm_skinny_shape sh;
    char why[200], what[200];
    if (agmm_skinny_plan(s->m, s->n, s->k, AGMM_LAYOUT_COL_MAJOR, 16, sms, &sh, why, sizeof why) != 0) {
        agmm_check(0, "skinny %lld x %lld x %lld: %s", (long long)s->m, (long long)s->n, (long long)s->k, why);
        return;
    }
    const size_t c = (size_t)(s->m * s->n) + GUARD;
    if (bufs_make(&b, s, seed) && poison(b.d_c, c, b.h_c) &&
        cuda_ok(agmm_skinny_launch(&sh, b.d_a, b.d_b, b.d_c, s->m, s->n, s->k, 0), "launch") &&
        cuda_ok(cudaDeviceSynchronize(), "first run") &&
        cuda_ok(cudaMemcpy(b.h_c, b.d_c, c * 2, cudaMemcpyDeviceToHost), "download C") &&
        poison(b.d_c, c, b.h_c2) &&
        cuda_ok(agmm_skinny_launch(&sh, b.d_a, b.d_b, b.d_c, s->m, s->n, s->k, 0), "second launch") &&
        cuda_ok(cudaDeviceSynchronize(), "second run") &&
        cuda_ok(cudaMemcpy(b.h_c2, b.d_c, c * 2, cudaMemcpyDeviceToHost), "download C")) {
        const int ok = check(&b, s, b.h_c, what, sizeof what);
        agmm_check(ok, "skinny %lld x %lld x %lld (%s; %d tiles, %d n8 blocks x %d K parts per CTA, %d CTAs): %s",
                   (long long)s->m, (long long)s->n, (long long)s->k, s->exact ? "integers" : "uniform", sh.mt, sh.nb,
                   sh.ks, sh.grid, what);
        agmm_check(memcmp(b.h_c, b.h_c2, (size_t)(s->m * s->n) * 2) == 0,
                   "skinny %lld x %lld x %lld: a second run gives the same bits", (long long)s->m, (long long)s->n,
                   (long long)s->k);
    }
    bufs_free(&b);
}

/* A plain GEMM plan of s under AGMM_SKINNY=mode with flags and B in `layout`: runs the skinny
 * kernel or not as `want`, and correctly. */
static void choice_case(cublasLtHandle_t lt, const char *mode, unsigned flags, agmm_layout layout, int want)
{
    const shape s = {8, 1000, 264, 1};
    bufs b;
    char what[200];
    agmm_gemm_lt *g = NULL;
    void *ws = NULL;
    agmm_error err = {0};
    setenv("AGMM_SKINNY", mode, 1);
    const size_t c = (size_t)(s.m * s.n) + GUARD;
    if (bufs_make(&b, &s, 0x5ca1e) && cuda_ok(cudaMalloc(&ws, AGMM_GEMM_LT_WORKSPACE_BYTES), "workspace")) {
        if (layout == AGMM_LAYOUT_ROW_MAJOR) { /* the same B, stored k x n */
            uint16_t *t = malloc((size_t)(s.k * s.n) * 2);
            for (int64_t kk = 0; kk < s.k; kk++)
                for (int64_t j = 0; j < s.n; j++)
                    t[kk * s.n + j] = b.h_b[j * s.k + kk];
            cuda_ok(cudaMemcpy(b.d_b, t, (size_t)(s.k * s.n) * 2, cudaMemcpyHostToDevice), "upload B (row-major)");
            free(t);
        }
        agmm_status st = agmm_gemm_lt_create(&g, lt, s.m, s.n, s.k, layout, 16, AGMM_GEMM_LT_WORKSPACE_BYTES, flags,
                                             &err);
        if (!agmm_check(st == AGMM_SUCCESS, "skinny choice: plan (%s)", err.msg))
            goto done;
        const int is = agmm_gemm_lt_skinny(g);
        agmm_check(is == want, "skinny choice: AGMM_SKINNY=%s, flags %u, B %s: the plan runs %s (wanted %s)", mode,
                   flags, layout == AGMM_LAYOUT_COL_MAJOR ? "column-major" : "row-major",
                   is ? "the skinny kernel" : "cuBLASLt", want ? "the skinny kernel" : "cuBLASLt");
        if (poison(b.d_c, c, b.h_c) &&
            agmm_check(agmm_gemm_lt_run(g, b.d_a, b.d_b, b.d_c, ws, 0, &err) == AGMM_SUCCESS, "skinny choice: run (%s)",
                       err.msg) &&
            cuda_ok(cudaDeviceSynchronize(), "run") &&
            cuda_ok(cudaMemcpy(b.h_c, b.d_c, c * 2, cudaMemcpyDeviceToHost), "download C"))
            agmm_check(check(&b, &s, b.h_c, what, sizeof what), "skinny choice: AGMM_SKINNY=%s, flags %u: %s", mode,
                       flags, what);
    }
done:
    agmm_gemm_lt_destroy(g);
    cudaFree(ws);
    bufs_free(&b);
    unsetenv("AGMM_SKINNY");
}

/* The exact shapes (every tile count, ragged n and K), then with all, the uniform ones. */
static void kernel_cases(int all)
{
    int sms = 0;
    if (!cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count"))
        return;
    const shape shapes[] = {
        {1, 8, 8, 1},      {1, 2, 32, 1},     {3, 10, 40, 1},    {8, 16, 64, 1},    {9, 64, 72, 1},
        {15, 130, 96, 1},  {16, 200, 128, 1}, {17, 62, 24, 1},   {31, 66, 256, 1},  {32, 64, 136, 1},
        {33, 1000, 72, 1}, {48, 40, 64, 1},   {63, 250, 200, 1}, {64, 1024, 256, 1},
        {1, 8192, 3584, 0}, {8, 8192, 3584, 0}, {32, 8192, 3584, 0}, {64, 4096, 1024, 0}, {5, 2050, 1000, 0},
        {13, 8190, 264, 0}, {40, 8192, 8, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (all || shapes[i].exact)
            kernel_case(&shapes[i], sms, 0x51 + i);
}

void test_skinny_small(void) { kernel_cases(0); }

void test_skinny_gpu(void)
{
    kernel_cases(1);

    cublasLtHandle_t lt = NULL;
    if (!agmm_check(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "skinny choice: cublasLtCreate"))
        return;
    choice_case(lt, "force", AGMM_GEMM_LT_SKINNY, AGMM_LAYOUT_COL_MAJOR, 1);
    choice_case(lt, "force", AGMM_GEMM_LT_SKINNY | AGMM_GEMM_LT_SHARED_DEVICE, AGMM_LAYOUT_COL_MAJOR, 1);
    choice_case(lt, "force", AGMM_GEMM_LT_SKINNY, AGMM_LAYOUT_ROW_MAJOR, 0);
    choice_case(lt, "force", 0, AGMM_LAYOUT_COL_MAJOR, 0);
    choice_case(lt, "0", AGMM_GEMM_LT_SKINNY, AGMM_LAYOUT_COL_MAJOR, 0);
    cublasLtDestroy(lt);
}
