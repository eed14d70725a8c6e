/* The plain GEMM on the gathered shape, held for the overlap-efficiency column: the world's
 * reference library (cuBLASLt on GPUs, the CPU world's GEMM on the CPU) and agmm's GEMM engine
 * beside it on GPUs, through the library's extras (src/api/agmm_ext.h): the GEMM alone is a
 * yardstick of the benchmark, not an operation of the library. bench_turns.c times them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_mem.h"

static void fill_random_bf16(uint16_t *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
}

static agmm_ext_gemm *make(bench_dev *dev, agmm_ctx *ctx, agmm_ext_gemm_kind kind, const bench_gemm *g, int64_t rows,
                           int64_t n, int64_t k, agmm_layout layout)
{
    agmm_ext_gemm *e = NULL;
    char why[256] = "";
    if (agmm_ext_gemm_create(&e, ctx, kind, rows, n, k, layout, g->a, g->b, g->c, why, sizeof why) != AGMM_SUCCESS) {
        if (kind == AGMM_EXT_GEMM_ENGINE && dev->gpu)
            fprintf(stderr, "agmm-bench: GEMM engine unavailable for %lld x %lld x %lld: %s\n", (long long)rows,
                    (long long)n, (long long)k, why);
        return NULL;
    }
    return e;
}

void bench_gemm_hold(bench_dev *dev, agmm_ctx *ctx, int64_t rows, int64_t n, int64_t k, agmm_layout b_layout,
                     bench_gemm *g)
{
    memset(g, 0, sizeof *g);
    size_t a_bytes = (size_t)(rows * k) * 2, b_bytes = (size_t)(k * n) * 2;
    uint16_t *ha = malloc(a_bytes), *hb = malloc(b_bytes);
    g->a = bench_alloc(dev, a_bytes), g->b = bench_alloc(dev, b_bytes), g->c = bench_alloc(dev, (size_t)(rows * n) * 2);
    if (ha && hb && g->a && g->b && g->c) {
        /* Random operands: a GEMM on zeros runs ~13% faster and would flatter the ratio. */
        fill_random_bf16(ha, a_bytes / 2, 0x5eed0001u ^ (uint64_t)rows);
        fill_random_bf16(hb, b_bytes / 2, 0x5eed0002u ^ (uint64_t)n);
        if (bench_upload(dev, g->a, ha, a_bytes) == 0 && bench_upload(dev, g->b, hb, b_bytes) == 0) {
            g->lib = make(dev, ctx, AGMM_EXT_GEMM_LIBRARY, g, rows, n, k, b_layout);
            if (dev->gpu)
                g->engine = make(dev, ctx, AGMM_EXT_GEMM_ENGINE, g, rows, n, k, b_layout);
        }
    }
    free(ha);
    free(hb);
}

void bench_gemm_release(bench_dev *dev, bench_gemm *g)
{
    agmm_ext_gemm_destroy(g->lib);
    agmm_ext_gemm_destroy(g->engine);
    bench_free(dev, g->a);
    bench_free(dev, g->b);
    bench_free(dev, g->c);
    memset(g, 0, sizeof *g);
}
