/* The plain GEMM on the gathered shape, timed for the overlap-efficiency column: cuBLASLt on
 * GPUs (and our GEMM engine beside it), the CPU world's GEMM on the CPU. The one place the CLI reaches below the public API: the
 * GEMM alone is a yardstick of the benchmark, not an operation of the library. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_mem.h"
#include "core/numeric.h"
#include "core/stats.h"
#include "cpu/cpu.h"
#include "world/world.h"
#ifdef AGMM_HAVE_CUDA
#include "kernels/gemm_engine.h"
#include "ops/gemm_lt.h"
#include "world/ctx_gpu.h"
#endif

static void fill_random_bf16(uint16_t *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
}

/* Times `iters` calls of gemm(arg) after `warmup`, the L2 flushed before each; median us. */
static double time_calls(bench_dev *dev, int (*gemm)(void *), void *arg, int warmup, int iters)
{
    for (int i = 0; i < warmup; i++)
        if (gemm(arg))
            return -1;
    for (int i = 0; i < iters; i++)
        if (bench_flush(dev) || bench_timer_start(dev, i) || gemm(arg) || bench_timer_stop(dev, i))
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

typedef struct {
    const uint16_t *a, *b;
    uint16_t *c;
    int64_t rows, n, k;
    agmm_layout layout;
    agmm_cpu_gemm_ws ws;
#ifdef AGMM_HAVE_CUDA
    agmm_gemm_lt *lt;
    agmm_gemm_plan *engine;
    void *workspace;
    cudaStream_t stream;
    agmm_error err;
#endif
} gemm_job;

static int cpu_gemm(void *p)
{
    gemm_job *g = p;
    agmm_cpu_gemm_ws_forget_b(&g->ws); /* convert B every call, as the backends do */
    agmm_cpu_gemm_bf16(&g->ws, g->a, g->k, g->rows, g->b, g->layout, g->n, 0, g->n, g->c, g->n);
    return 0;
}

#ifdef AGMM_HAVE_CUDA
static int gpu_gemm(void *p)
{
    gemm_job *g = p;
    return agmm_gemm_lt_run(g->lt, g->a, g->b, g->c, g->workspace, g->stream, &g->err) != AGMM_SUCCESS;
}

static int engine_gemm(void *p)
{
    gemm_job *g = p;
    return agmm_gemm_run(g->engine, 0, g->stream) != AGMM_SUCCESS;
}

/* Times cuBLASLt and our engine on the same operands. */
static void time_gpu(bench_dev *dev, agmm_ctx *ctx, gemm_job *g, int warmup, int iters, double *lt_us,
                     double *engine_us)
{
    g->stream = (cudaStream_t)dev->stream;
    g->workspace = bench_alloc(dev, AGMM_GEMM_LT_WORKSPACE_BYTES);
    if (g->workspace && agmm_gemm_lt_create(&g->lt, ctx->gpu->lt, g->rows, g->n, g->k, g->layout, 16,
                                            AGMM_GEMM_LT_WORKSPACE_BYTES, &g->err) == AGMM_SUCCESS)
        *lt_us = time_calls(dev, gpu_gemm, g, warmup, iters);
    agmm_gemm_lt_destroy(g->lt);
    bench_free(dev, g->workspace);
    agmm_gemm_desc d = {.a = g->a, .b = g->b, .c = g->c, .b_layout = g->layout, .m = g->rows, .n = g->n, .k = g->k,
                        .nranks = 1, .rank = 0, .splits = 1, .config = -1};
    char why[256];
    if (agmm_gemm_plan_create(&g->engine, &d, why, sizeof why) == AGMM_SUCCESS)
        *engine_us = time_calls(dev, engine_gemm, g, warmup, iters);
    else
        fprintf(stderr, "agmm-bench: GEMM engine unavailable for %lld x %lld x %lld: %s\n", (long long)g->rows,
                (long long)g->n, (long long)g->k, why);
    agmm_gemm_plan_destroy(g->engine);
}
#endif

void bench_time_plain_gemm(bench_dev *dev, agmm_ctx *ctx, int64_t rows, int64_t n, int64_t k, agmm_layout b_layout,
                           int warmup, int iters, double *lib_us, double *engine_us)
{
    gemm_job g = {.rows = rows, .n = n, .k = k, .layout = b_layout};
    *lib_us = *engine_us = -1;
    size_t a_bytes = (size_t)(rows * k) * 2, b_bytes = (size_t)(k * n) * 2;
    uint16_t *ha = malloc(a_bytes), *hb = malloc(b_bytes);
    void *a = bench_alloc(dev, a_bytes), *b = bench_alloc(dev, b_bytes), *c = bench_alloc(dev, (size_t)(rows * n) * 2);
    if (ha && hb && a && b && c) {
        /* Random operands: a GEMM on zeros runs ~13% faster and would flatter the ratio. */
        fill_random_bf16(ha, a_bytes / 2, 0x5eed0001u ^ (uint64_t)rows);
        fill_random_bf16(hb, b_bytes / 2, 0x5eed0002u ^ (uint64_t)n);
        g.a = a;
        g.b = b;
        g.c = c;
        if (bench_upload(dev, a, ha, a_bytes) == 0 && bench_upload(dev, b, hb, b_bytes) == 0) {
#ifdef AGMM_HAVE_CUDA
            if (dev->gpu)
                time_gpu(dev, ctx, &g, warmup, iters, lib_us, engine_us);
            else
#endif
            {
                agmm_error err = {0};
                if (agmm_cpu_gemm_ws_init(&g.ws, k, &err) == AGMM_SUCCESS)
                    *lib_us = time_calls(dev, cpu_gemm, &g, warmup, iters);
                agmm_cpu_gemm_ws_free(&g.ws);
            }
        }
    }
    bench_free(dev, a);
    bench_free(dev, b);
    bench_free(dev, c);
    free(ha);
    free(hb);
}
