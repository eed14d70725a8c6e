/* Timing of ag_matmul `ce` against `nccl` at W = 1 on the seed shapes (M = N = K = 256..4096 step
 * 128): issue 5's bar is ce <= 1.03 x nccl on every one. Runs only with AGMM_GPUTEST_PERF=1 (the
 * GPU-machine script sets it); agmm-bench is the full benchmark.
 *
 * Method (design.md §5, shortened): random inputs, 5 warm-up calls, then 30 timed calls of each
 * backend, alternating, each after a 256 MB write that flushes L2, timed with CUDA events on the
 * stream; medians reported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/numeric.h"
#include "core/stats.h"
#include "gpu_tests.h"
#include "../harness.h"

#define PERF_WARMUP 5
#define PERF_ITERS 30
#define PERF_MAX 4096
#define FLUSH_BYTES ((size_t)256 << 20)

typedef struct {
    gpu_rank_results res;
    int rows;
    int shape[64];
    double t_us[64][2];
} perf_args;

#define PERF_CUDA(call)                                                                                 \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            gpu_rank_fail(&a->res, 0, "%s:%d: %s -> %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            goto done;                                                                                  \
        }                                                                                               \
    } while (0)

#define PERF_AGMM(call)                                                                                 \
    do {                                                                                                \
        agmm_status s_ = (call);                                                                        \
        if (s_ != AGMM_SUCCESS) {                                                                       \
            gpu_rank_fail(&a->res, 0, "%s -> %s: %s", #call, agmm_status_str(s_), agmm_last_error(ctx)); \
            goto done;                                                                                  \
        }                                                                                               \
    } while (0)

static agmm_status perf_rank(agmm_ctx *ctx, void *arg)
{
    perf_args *a = arg;
    const size_t max_elems = (size_t)PERF_MAX * PERF_MAX;
    cudaStream_t s = NULL;
    cudaEvent_t ev0 = NULL, ev1 = NULL;
    void *d_pool = NULL, *d_b = NULL, *d_ag = NULL, *d_c = NULL, *d_flush = NULL;
    uint16_t *h_pool = NULL;
    agmm_plan *plan[2] = {NULL, NULL};
    double samples[2][PERF_ITERS];
    a->res.ok[0] = 1;
    RANK_STREAM(&a->res, 0, s, 0);
    PERF_CUDA(cudaEventCreate(&ev0));
    PERF_CUDA(cudaEventCreate(&ev1));
    PERF_CUDA(cudaMalloc(&d_pool, max_elems * 2));
    PERF_CUDA(cudaMalloc(&d_b, max_elems * 2));
    PERF_CUDA(cudaMalloc(&d_ag, max_elems * 2));
    PERF_CUDA(cudaMalloc(&d_c, max_elems * 2));
    PERF_CUDA(cudaMalloc(&d_flush, FLUSH_BYTES));
    h_pool = malloc(max_elems * 2);
    if (h_pool == NULL) {
        gpu_rank_fail(&a->res, 0, "host pool allocation failed");
        goto done;
    }
    uint64_t seed = 4242;
    for (size_t i = 0; i < max_elems; i++)
        h_pool[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
    PERF_CUDA(cudaMemcpyAsync(d_pool, h_pool, max_elems * 2, cudaMemcpyHostToDevice, s));
    PERF_CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < max_elems; i++)
        h_pool[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
    PERF_CUDA(cudaMemcpyAsync(d_b, h_pool, max_elems * 2, cudaMemcpyHostToDevice, s));
    const char *const backends[2] = {"nccl", "ce"};
    agmm_ag_matmul_io io = {.b = d_b, .a_gathered = d_ag, .c = d_c};
    for (int sz = 256; sz <= PERF_MAX; sz += 128) {
        for (int bi = 0; bi < 2; bi++) {
            agmm_ag_matmul_desc d = {.m = sz, .n = sz, .k = sz, .b_layout = AGMM_LAYOUT_COL_MAJOR, .splits = 1,
                                     .backend = backends[bi]};
            PERF_AGMM(agmm_plan_ag_matmul(&plan[bi], ctx, &d));
            PERF_CUDA(cudaMemcpyAsync(agmm_plan_input(plan[bi]), d_pool, (size_t)sz * sz * 2,
                                      cudaMemcpyDeviceToDevice, s));
        }
        for (int it = 0; it < PERF_WARMUP; it++)
            for (int bi = 0; bi < 2; bi++)
                PERF_AGMM(agmm_ag_matmul(plan[bi], &io, s));
        for (int it = 0; it < PERF_ITERS; it++)
            for (int o = 0; o < 2; o++) {
                int bi = (it + o) % 2; /* alternate which goes first */
                PERF_CUDA(cudaMemsetAsync(d_flush, it & 0xff, FLUSH_BYTES, s));
                PERF_CUDA(cudaEventRecord(ev0, s));
                PERF_AGMM(agmm_ag_matmul(plan[bi], &io, s));
                PERF_CUDA(cudaEventRecord(ev1, s));
                PERF_CUDA(cudaEventSynchronize(ev1));
                float ms = 0;
                PERF_CUDA(cudaEventElapsedTime(&ms, ev0, ev1));
                samples[bi][it] = 1e3 * ms;
            }
        PERF_AGMM(agmm_ctx_sync(ctx));
        for (int bi = 0; bi < 2; bi++) {
            agmm_stats st;
            agmm_stats_compute(samples[bi], PERF_ITERS, &st);
            a->t_us[a->rows][bi] = st.median;
            agmm_plan_destroy(plan[bi]);
            plan[bi] = NULL;
        }
        a->shape[a->rows++] = sz;
    }
done:
    if (s)
        cudaStreamSynchronize(s);
    agmm_plan_destroy(plan[0]);
    agmm_plan_destroy(plan[1]);
    free(h_pool);
    cudaFree(d_pool);
    cudaFree(d_b);
    cudaFree(d_ag);
    cudaFree(d_c);
    cudaFree(d_flush);
    if (ev0)
        cudaEventDestroy(ev0);
    if (ev1)
        cudaEventDestroy(ev1);
    return AGMM_SUCCESS;
}

void test_ag_matmul_perf_w1(void)
{
    const char *on = getenv("AGMM_GPUTEST_PERF");
    if (on == NULL || strcmp(on, "1") != 0) {
        agmm_skip("ag_matmul_perf_w1: timing runs only with AGMM_GPUTEST_PERF=1");
        return;
    }
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, 1, 0);
    if (w == NULL)
        return;
    perf_args *a = calloc(1, sizeof *a);
    if (a == NULL) {
        agmm_check(0, "perf: out of host memory");
        agmm_world_destroy(w);
        return;
    }
    agmm_status st = agmm_world_run(w, perf_rank, a);
    agmm_check(st == AGMM_SUCCESS, "perf: agmm_world_run -> %s", agmm_status_str(st));
    gpu_report_ranks(&a->res, 1, "perf ce vs nccl W=1 ran");
    printf("  %-16s %12s %12s %8s\n", "shape (M=N=K)", "nccl us", "ce us", "ce/nccl");
    for (int i = 0; i < a->rows; i++) {
        double ratio = a->t_us[i][1] / a->t_us[i][0];
        printf("  %-16d %12.1f %12.1f %8.3f\n", a->shape[i], a->t_us[i][0], a->t_us[i][1], ratio);
    }
    for (int i = 0; i < a->rows; i++) {
        double ratio = a->t_us[i][1] / a->t_us[i][0];
        agmm_check(ratio <= 1.03, "perf W=1 M=N=K=%d: ce %.1f us <= 1.03 x nccl %.1f us (ratio %.3f)", a->shape[i],
                   a->t_us[i][1], a->t_us[i][0], ratio);
    }
    free(a);
    agmm_world_destroy(w);
}
