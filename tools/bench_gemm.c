/* The plain GEMM on the gathered shape, timed for the overlap-efficiency column: the world's
 * reference library (cuBLASLt on GPUs, the CPU world's GEMM on the CPU) and agmm's GEMM engine
 * beside it on GPUs, through the library's extras (src/api/agmm_ext.h): the GEMM alone is a
 * yardstick of the benchmark, not an operation of the library. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_mem.h"

static void fill_random_bf16(uint16_t *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
}

/* Times `iters` runs of g after `warmup`, the L2 flushed before each; median us, < 0 on failure. */
static double time_gemm(bench_dev *dev, agmm_ext_gemm *g, int warmup, int iters)
{
    for (int i = 0; i < warmup; i++)
        if (agmm_ext_gemm_run(g, dev->stream) != AGMM_SUCCESS)
            return -1;
    for (int i = 0; i < iters; i++)
        if (bench_flush(dev) || bench_timer_start(dev, i) || agmm_ext_gemm_run(g, dev->stream) != AGMM_SUCCESS ||
            bench_timer_stop(dev, i))
            return -1;
    double *us = malloc((size_t)iters * sizeof *us);
    if (us == NULL || bench_timer_collect(dev, iters, us) != 0) {
        free(us);
        return -1;
    }
    agmm_stats s;
    agmm_stats_compute(us, iters, &s);
    free(us);
    return s.median;
}

static double time_kind(bench_dev *dev, agmm_ctx *ctx, agmm_ext_gemm_kind kind, int64_t rows, int64_t n, int64_t k,
                        agmm_layout layout, const void *a, const void *b, void *c, int warmup, int iters)
{
    agmm_ext_gemm *g = NULL;
    char why[256] = "";
    if (agmm_ext_gemm_create(&g, ctx, kind, rows, n, k, layout, a, b, c, why, sizeof why) != AGMM_SUCCESS) {
        if (kind == AGMM_EXT_GEMM_ENGINE && dev->gpu)
            fprintf(stderr, "agmm-bench: GEMM engine unavailable for %lld x %lld x %lld: %s\n", (long long)rows,
                    (long long)n, (long long)k, why);
        return -1;
    }
    double us = time_gemm(dev, g, warmup, iters);
    agmm_ext_gemm_destroy(g);
    return us;
}

void bench_time_plain_gemm(bench_dev *dev, agmm_ctx *ctx, int64_t rows, int64_t n, int64_t k, agmm_layout b_layout,
                           int warmup, int iters, double *lib_us, double *engine_us)
{
    *lib_us = *engine_us = -1;
    size_t a_bytes = (size_t)(rows * k) * 2, b_bytes = (size_t)(k * n) * 2;
    uint16_t *ha = malloc(a_bytes), *hb = malloc(b_bytes);
    void *a = bench_alloc(dev, a_bytes), *b = bench_alloc(dev, b_bytes), *c = bench_alloc(dev, (size_t)(rows * n) * 2);
    if (ha && hb && a && b && c) {
        /* Random operands: a GEMM on zeros runs ~13% faster and would flatter the ratio. */
        fill_random_bf16(ha, a_bytes / 2, 0x5eed0001u ^ (uint64_t)rows);
        fill_random_bf16(hb, b_bytes / 2, 0x5eed0002u ^ (uint64_t)n);
        if (bench_upload(dev, a, ha, a_bytes) == 0 && bench_upload(dev, b, hb, b_bytes) == 0) {
            *lib_us = time_kind(dev, ctx, AGMM_EXT_GEMM_LIBRARY, rows, n, k, b_layout, a, b, c, warmup, iters);
            if (dev->gpu)
                *engine_us = time_kind(dev, ctx, AGMM_EXT_GEMM_ENGINE, rows, n, k, b_layout, a, b, c, warmup, iters);
        }
    }
    bench_free(dev, a);
    bench_free(dev, b);
    bench_free(dev, c);
    free(ha);
    free(hb);
}
