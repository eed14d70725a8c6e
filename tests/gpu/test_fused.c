/* GPU tests of the `fused` backend's waits: a chunk whose copy lands late is waited for (its
 * tiles read the rows only after the flag, so C is right although the gathered A starts as NaN),
 * and a chunk that lands after the bound ends in a timeout naming the rank and the chunk. And its
 * seam with the GEMM engine: an argument the engine refuses is reported with the engine's own
 * message, naming the argument, and a tile config forced through the backend runs right. The
 * correctness sweep over worlds and shapes is in test_ag_matmul.c (with nccl and ce). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "core/numeric.h"
#include "cpu/reference.h"
#include "gpu_tests.h"
#include "backends/ag_matmul_fused.h"
#include "kernels/gemm/policy.h"
#include "../harness.h"

typedef struct {
    pthread_barrier_t ready;   /* every rank has allocated and uploaded before any rank runs */
    int nranks;
    int64_t m, n, k;
    int splits;
    int delay_chunk_step;      /* delay the chunk of rank (rank + step) % W, split splits-1 */
    int64_t delay_ns;
    int set_config;            /* 1: ask the engine for bad_config (refused), then good_config */
    int bad_config, good_config;
    agmm_status refused[AGMM_MAX_RANKS];
    char refused_msg[AGMM_MAX_RANKS][512];
    char engine[AGMM_MAX_RANKS][160]; /* agmm_fused_describe after the configs were set */
    const uint16_t *a, *b;     /* all shards in rank order; B (col-major), the same on every rank */
    const double *c_ref;
    double run_s[AGMM_MAX_RANKS];
    agmm_status status[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][512];
    double rel[AGMM_MAX_RANKS];
    int a_exact[AGMM_MAX_RANKS];
} delay_job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static agmm_status delay_rank(agmm_ctx *ctx, void *arg)
{
    delay_job *j = arg;
    int rank = agmm_ctx_rank(ctx), W = j->nranks;
    agmm_plan *plan = NULL;
    cudaStream_t s = NULL;
    void *d_b = NULL, *d_ag = NULL, *d_c = NULL;
    uint16_t *h_ag = NULL, *h_c = NULL;
    agmm_ag_matmul_desc d = {.m = j->m, .n = j->n, .k = j->k, .b_layout = AGMM_LAYOUT_COL_MAJOR, .splits = j->splits,
                             .backend = "fused"};
    agmm_status st = agmm_plan_ag_matmul(&plan, ctx, &d);
    j->status[rank] = st;
    if (st != AGMM_SUCCESS) {
        snprintf(j->msg[rank], sizeof j->msg[rank], "plan: %s", agmm_last_error(ctx));
        pthread_barrier_wait(&j->ready);
        return AGMM_SUCCESS;
    }
    size_t shard = (size_t)(j->m * j->k);
    size_t ag = (size_t)W * shard, c = (size_t)W * (size_t)(j->m * j->n);
    int chunk = ((rank + j->delay_chunk_step) % W) * j->splits + j->splits - 1;
    h_ag = malloc(ag * 2);
    h_c = malloc(c * 2);
    if (h_ag == NULL || h_c == NULL || (s = gpu_rank_stream(rank, 0)) == NULL ||
        cudaMalloc(&d_b, (size_t)(j->k * j->n) * 2) != cudaSuccess || cudaMalloc(&d_ag, ag * 2) != cudaSuccess ||
        cudaMalloc(&d_c, c * 2) != cudaSuccess) {
        j->status[rank] = AGMM_ERR_NO_MEMORY;
        snprintf(j->msg[rank], sizeof j->msg[rank], "allocation failed");
        pthread_barrier_wait(&j->ready);
        goto done;
    }
    if (j->set_config) {
        /* Before the ranks run together: the engine's plan allocates (rank_gpu.h's rule). */
        j->refused[rank] = agmm_fused_set_gemm_config(plan, j->bad_config);
        snprintf(j->refused_msg[rank], sizeof j->refused_msg[rank], "%s", agmm_last_error(ctx));
        st = agmm_fused_set_gemm_config(plan, j->good_config);
        snprintf(j->engine[rank], sizeof j->engine[rank], "%s", agmm_fused_describe(plan));
        if (st != AGMM_SUCCESS) {
            j->status[rank] = st;
            snprintf(j->msg[rank], sizeof j->msg[rank], "agmm_fused_set_gemm_config(%d): %s", j->good_config,
                     agmm_last_error(ctx));
            pthread_barrier_wait(&j->ready);
            goto done;
        }
    }
    st = agmm_fused_set_copy_delay(plan, chunk, j->delay_ns);
    if (st != AGMM_SUCCESS) {
        j->status[rank] = st;
        snprintf(j->msg[rank], sizeof j->msg[rank], "agmm_fused_set_copy_delay(chunk %d): %s", chunk,
                 agmm_last_error(ctx));
        pthread_barrier_wait(&j->ready);
        goto done;
    }
    cudaMemcpyAsync(agmm_plan_input(plan), j->a + (size_t)rank * shard, shard * 2, cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(d_b, j->b, (size_t)(j->k * j->n) * 2, cudaMemcpyHostToDevice, s);
    cudaMemsetAsync(d_ag, 0xff, ag * 2, s); /* NaN: a tile that reads before its chunk lands shows */
    cudaMemsetAsync(d_c, 0xff, c * 2, s);
    cudaStreamSynchronize(s);
    /* Nobody allocates or copies from pageable memory once a peer's run may be spinning on a
     * shared GPU (rank_gpu.h's rule for emulated worlds). */
    pthread_barrier_wait(&j->ready);
    agmm_ag_matmul_io io = {.b = d_b, .a_gathered = d_ag, .c = d_c};
    double t0 = now_s();
    st = agmm_ag_matmul(plan, &io, s);
    if (st == AGMM_SUCCESS) {
        cudaStreamSynchronize(s);
        st = agmm_ctx_sync(ctx);
    }
    j->run_s[rank] = now_s() - t0;
    j->status[rank] = st;
    if (st != AGMM_SUCCESS) {
        snprintf(j->msg[rank], sizeof j->msg[rank], "%s", agmm_last_error(ctx));
        goto done;
    }
    cudaMemcpy(h_ag, d_ag, ag * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(h_c, d_c, c * 2, cudaMemcpyDeviceToHost);
    j->a_exact[rank] = agmm_ref_first_mismatch(h_ag, j->a, (int64_t)ag, 2) < 0;
    j->rel[rank] = agmm_ref_rel_frobenius(h_c, AGMM_DTYPE_BF16, j->c_ref, (int64_t)c);
done:
    if (s)
        cudaStreamSynchronize(s);
    agmm_plan_destroy(plan);
    cudaFree(d_b);
    cudaFree(d_ag);
    cudaFree(d_c);
    free(h_ag);
    free(h_c);
    return AGMM_SUCCESS;
}

/* Builds inputs for W ranks and runs the job; returns 0 if the world could not be made. */
static int run_delay_job(delay_job *j, int W, double timeout_s)
{
    size_t shard = (size_t)(j->m * j->k);
    uint16_t *a = malloc((size_t)W * shard * 2), *b = malloc((size_t)(j->k * j->n) * 2);
    double *c_ref = malloc((size_t)W * (size_t)(j->m * j->n) * sizeof *c_ref);
    if (a == NULL || b == NULL || c_ref == NULL) {
        agmm_check(0, "ag_matmul/fused W=%d: out of host memory", W);
        free(a);
        free(b);
        free(c_ref);
        return 0;
    }
    uint64_t seed = 0xf05edull ^ (uint64_t)W;
    for (size_t i = 0; i < (size_t)W * shard; i++)
        a[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
    for (int64_t i = 0; i < j->k * j->n; i++)
        b[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
    agmm_ref_gemm_bf16(a, b, AGMM_LAYOUT_COL_MAJOR, (int64_t)W * j->m, j->n, j->k, c_ref, NULL);
    j->nranks = W;
    j->a = a;
    j->b = b;
    j->c_ref = c_ref;
    agmm_world *w = gpu_test_world(AGMM_WORLD_EMULATED, W, timeout_s);
    int ok = w != NULL;
    if (ok) {
        pthread_barrier_init(&j->ready, NULL, (unsigned)W);
        agmm_world_run(w, delay_rank, j);
        pthread_barrier_destroy(&j->ready);
    }
    agmm_world_destroy(w);
    free(a);
    free(b);
    free(c_ref);
    return ok;
}

void test_fused_waits_for_late_chunk(void)
{
    const int W = 3;
    static delay_job j;
    memset(&j, 0, sizeof j);
    j.m = 200, j.n = 264, j.k = 72, j.splits = 2, j.delay_chunk_step = 1, j.delay_ns = 50000000;
    if (!run_delay_job(&j, W, 5.0))
        return;
    for (int r = 0; r < W; r++) {
        agmm_check(j.status[r] == AGMM_SUCCESS && j.a_exact[r] && j.rel[r] <= 1e-2 && j.run_s[r] >= 0.05,
                   "ag_matmul/fused W=%d M=%lld N=%lld K=%lld splits=%d rank %d: chunk of rank %d copied 50 ms late: "
                   "gathered A %s, C rel err %.2e (<= 1e-2, NaN if a tile read early), run took %.1f ms (>= 50)%s%s",
                   W, (long long)j.m, (long long)j.n, (long long)j.k, j.splits, r, (r + 1) % W,
                   j.a_exact[r] ? "exact" : "DIFFERS", j.rel[r], 1e3 * j.run_s[r], j.status[r] ? ": " : "",
                   j.status[r] ? j.msg[r] : "");
    }
}

void test_fused_chunk_timeout(void)
{
    const int W = 2;
    static delay_job j;
    memset(&j, 0, sizeof j);
    j.m = 128, j.n = 128, j.k = 64, j.splits = 1, j.delay_chunk_step = 1, j.delay_ns = 1500000000ll;
    if (!run_delay_job(&j, W, 0.3))
        return;
    /* Every rank's GEMM waits for its peer's chunk, which lands 1.5 s late: the bound (0.3 s)
     * expires first and the error names the waiting rank and the chunk. */
    for (int r = 0; r < W; r++) {
        char want[32];
        snprintf(want, sizeof want, "chunk %d", (r + 1) % W);
        agmm_check(j.status[r] == AGMM_ERR_TIMEOUT && strstr(j.msg[r], want) != NULL && j.run_s[r] < 10.0,
                   "ag_matmul/fused W=%d rank %d: a chunk 1.2 s past the 0.3 s bound -> %s naming %s in %.2f s: \"%s\"",
                   W, r, agmm_status_str(j.status[r]), want, j.run_s[r], j.msg[r]);
    }
}

/* The engine refuses a tile config past its table through fused's hook: the status is the
 * engine's and agmm_last_error carries its message naming config=. Then a forced config (the
 * split tail, whose workspace and fix-up meet the chunk waits) runs right: fresh random inputs,
 * NaN-poisoned gathered A and C, the gathered A exact and C within 1e-2 of fp64. */
void test_fused_engine_refusal(void)
{
    const int W = 2;
    static delay_job j;
    memset(&j, 0, sizeof j);
    j.m = 1000, j.n = 264, j.k = 1032, j.splits = 2, j.delay_chunk_step = 1, j.delay_ns = 0;
    j.set_config = 1;
    j.bad_config = agmm_gemm_num_configs() + 7;
    j.good_config = agmm_gemm_config_find("128x256x64/s4/sk");
    if (j.good_config < 0) {
        agmm_check(0, "ag_matmul/fused: no config named 128x256x64/s4/sk in gemm_configs.h");
        return;
    }
    if (!run_delay_job(&j, W, 5.0))
        return;
    char want[32];
    snprintf(want, sizeof want, "config=%d", j.bad_config);
    for (int r = 0; r < W; r++) {
        agmm_check(j.refused[r] == AGMM_ERR_INVALID_ARG && strstr(j.refused_msg[r], want) != NULL,
                   "ag_matmul/fused W=%d rank %d: the engine refuses %s through the backend, %s naming it: \"%s\"",
                   W, r, want, agmm_status_str(j.refused[r]), j.refused_msg[r]);
        agmm_check(j.status[r] == AGMM_SUCCESS && strstr(j.engine[r], "128x256x64/s4/sk") && j.a_exact[r] &&
                       j.rel[r] <= 1e-2,
                   "ag_matmul/fused W=%d M=%lld N=%lld K=%lld splits=%d rank %d [%s]: forced config runs right: "
                   "gathered A %s, C rel err %.2e (<= 1e-2)%s%s",
                   W, (long long)j.m, (long long)j.n, (long long)j.k, j.splits, r, j.engine[r],
                   j.a_exact[r] ? "exact" : "DIFFERS", j.rel[r], j.status[r] ? ": " : "", j.status[r] ? j.msg[r] : "");
    }
}
