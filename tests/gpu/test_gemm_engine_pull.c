/* GPU test of the GEMM engine's pull mode (the peer-shard A source, src/kernels/gemm/a_peers.cuh)
 * under every tile config and both B layouts: two ranks on one GPU, each its own plan and stream,
 * as the pull backend runs them, so every schedule (cooperative, ping-pong, clusters, split tail)
 * meets the ready waits, the gathered A stored from the ring's slots and the closing barrier. The
 * backend's tests (test_pull.c, test_ag_matmul.c) run only the policy's config.
 *
 * Shape: m = 333 rows per rank (each shard ends in a short row tile), n = 264 (a short column
 * tile), k = 1032 (17 K blocks, more than any ring holds, and a K tail of 8), on 8 CTAs per rank:
 * each CTA has several units, so both ping-pong consumers work and skip each other's K blocks.
 * Two runs per plan (the epoch advances), each with its own B and outputs poisoned with NaN: the
 * gathered A must equal the shards bit for bit on both ranks, C the fp64 reference within 1e-2
 * (relative Frobenius, every element; a NaN fails), and no wait may expire (5 s bound). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/numeric.h"
#include "gpu_tests.h"
#include "kernels/gemm/gemm_engine.h"
#include "../harness.h"

#define W 2
#define RUNS 2
#define CTAS 8 /* per rank: both grids resident at once, several units per CTA */
#define TOL 1e-2

static const int64_t k_m = 333, k_n = 264, k_k = 1032;

typedef struct {
    uint16_t *h_a;               /* the gathered A: W*m x k, rank r's shard is its rows [r*m, (r+1)*m) */
    uint16_t *h_bt[RUNS];        /* B^T per run (n x k); its transpose is the row-major B */
    double *ref[RUNS];           /* C per run, fp64 */
    uint16_t *h_out;             /* a download: C or the gathered A */
    void *d_shard[W], *d_gath[W], *d_c[W];
    void *d_b[RUNS][2];          /* per run: [0] column-major (B^T), [1] row-major */
    uint32_t *d_words[W];        /* rank r's signal words: ready, then a done slot per rank */
    uint32_t **d_table;          /* the signals table: d_words[r] at [r] */
    agmm_dev_error *h_err[W], *d_err[W];
    cudaStream_t stream[W];
} pull_env;

static int ok_cuda(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        agmm_check(0, "gemm_engine_pull: %s: %s", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

static void fill(uint16_t *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        float v = agmm_rng_uniform(&seed);
        x[i] = agmm_f32_to_bf16(v == 0.0f ? 0.5f : v);
    }
}

static int poison(void *d, size_t elems, uint16_t *h)
{
    for (size_t i = 0; i < elems; i++)
        h[i] = AGMM_POISON_BF16;
    return ok_cuda(cudaMemcpy(d, h, elems * 2, cudaMemcpyHostToDevice), "poison");
}

static int env_init(pull_env *e)
{
    const int64_t rows = W * k_m;
    memset(e, 0, sizeof *e);
    e->h_a = malloc((size_t)(rows * k_k) * 2);
    e->h_out = malloc((size_t)(rows * (k_k > k_n ? k_k : k_n)) * 2);
    uint16_t *h_b = malloc((size_t)(k_k * k_n) * 2);
    float *af = malloc((size_t)(rows * k_k) * sizeof(float)), *bf = malloc((size_t)(k_n * k_k) * sizeof(float));
    int ok = e->h_a && e->h_out && h_b && af && bf;
    if (ok) {
        fill(e->h_a, (size_t)(rows * k_k), 0x5eed);
        for (int64_t i = 0; i < rows * k_k; i++)
            af[i] = agmm_bf16_to_f32(e->h_a[i]);
    }
    for (int run = 0; ok && run < RUNS; run++) {
        e->h_bt[run] = malloc((size_t)(k_n * k_k) * 2);
        e->ref[run] = malloc((size_t)(rows * k_n) * sizeof(double));
        ok = e->h_bt[run] && e->ref[run];
        if (!ok)
            break;
        fill(e->h_bt[run], (size_t)(k_n * k_k), 0xb0 + run);
        for (int64_t kk = 0; kk < k_k; kk++) /* row-major B = the transpose of B^T */
            for (int64_t j = 0; j < k_n; j++)
                h_b[kk * k_n + j] = e->h_bt[run][j * k_k + kk];
        for (int64_t i = 0; i < k_n * k_k; i++)
            bf[i] = agmm_bf16_to_f32(e->h_bt[run][i]);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < k_n; j++) {
                double s = 0;
                for (int64_t kk = 0; kk < k_k; kk++)
                    s += (double)af[i * k_k + kk] * bf[j * k_k + kk];
                e->ref[run][i * k_n + j] = s;
            }
        ok = ok_cuda(cudaMalloc(&e->d_b[run][0], (size_t)(k_n * k_k) * 2), "cudaMalloc B^T") &&
             ok_cuda(cudaMalloc(&e->d_b[run][1], (size_t)(k_n * k_k) * 2), "cudaMalloc B") &&
             ok_cuda(cudaMemcpy(e->d_b[run][0], e->h_bt[run], (size_t)(k_n * k_k) * 2, cudaMemcpyHostToDevice),
                     "upload B^T") &&
             ok_cuda(cudaMemcpy(e->d_b[run][1], h_b, (size_t)(k_n * k_k) * 2, cudaMemcpyHostToDevice), "upload B");
    }
    free(h_b);
    free(af);
    free(bf);
    for (int r = 0; ok && r < W; r++) {
        ok = ok_cuda(cudaMalloc(&e->d_shard[r], (size_t)(k_m * k_k) * 2), "cudaMalloc shard") &&
             ok_cuda(cudaMemcpy(e->d_shard[r], e->h_a + r * k_m * k_k, (size_t)(k_m * k_k) * 2,
                                cudaMemcpyHostToDevice),
                     "upload shard") &&
             ok_cuda(cudaMalloc(&e->d_gath[r], (size_t)(rows * k_k) * 2), "cudaMalloc gathered A") &&
             ok_cuda(cudaMalloc(&e->d_c[r], (size_t)(rows * k_n) * 2), "cudaMalloc C") &&
             ok_cuda(cudaMalloc((void **)&e->d_words[r], (1 + W) * 4), "cudaMalloc signal words") &&
             ok_cuda(cudaHostAlloc((void **)&e->h_err[r], sizeof(agmm_dev_error), cudaHostAllocMapped),
                     "cudaHostAlloc dev_error") &&
             ok_cuda(cudaHostGetDevicePointer((void **)&e->d_err[r], e->h_err[r], 0), "dev_error pointer");
        if (ok && (e->stream[r] = gpu_rank_stream(r, 0)) == NULL)
            ok = agmm_check(0, "gemm_engine_pull: no stream for rank %d (gpu_rank_stream)", r);
    }
    return ok && ok_cuda(cudaMalloc((void **)&e->d_table, W * sizeof(uint32_t *)), "cudaMalloc signals table") &&
           ok_cuda(cudaMemcpy(e->d_table, e->d_words, W * sizeof(uint32_t *), cudaMemcpyHostToDevice),
                   "upload signals table");
}

static void env_free(pull_env *e)
{
    free(e->h_a);
    free(e->h_out);
    for (int run = 0; run < RUNS; run++) {
        free(e->h_bt[run]);
        free(e->ref[run]);
        cudaFree(e->d_b[run][0]);
        cudaFree(e->d_b[run][1]);
    }
    for (int r = 0; r < W; r++) {
        cudaFree(e->d_shard[r]);
        cudaFree(e->d_gath[r]);
        cudaFree(e->d_c[r]);
        cudaFree(e->d_words[r]);
        cudaFreeHost(e->h_err[r]);
        if (e->stream[r])
            cudaStreamSynchronize(e->stream[r]);
    }
    cudaFree(e->d_table);
}

/* Rank r's C or gathered A against the reference; returns the relative Frobenius error of C (NaN
 * on a NaN), or for the gathered A 0 when it is exact and 1 when not. */
static double check_rank(pull_env *e, int r, int run, int gathered)
{
    const int64_t rows = W * k_m, cols = gathered ? k_k : k_n;
    if (!ok_cuda(cudaMemcpy(e->h_out, gathered ? e->d_gath[r] : e->d_c[r], (size_t)(rows * cols) * 2,
                            cudaMemcpyDeviceToHost),
                 "download"))
        return NAN;
    if (gathered)
        return memcmp(e->h_out, e->h_a, (size_t)(rows * cols) * 2) ? 1.0 : 0.0;
    double num = 0, den = 0;
    for (int64_t i = 0; i < rows * cols; i++) {
        const double x = agmm_bf16_to_f32(e->h_out[i]), y = e->ref[run][i];
        if (isnan(x))
            return NAN;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return sqrt(num / den);
}

/* Both ranks' plans for config c and B layout lay, RUNS runs each; one check line. */
static void run_config(pull_env *e, int c, int lay)
{
    agmm_gemm_plan *plan[W] = {NULL, NULL};
    agmm_error err = {0};
    int ok = 1, exact = 1, clean = 1; /* ok: every call went through; clean: no NaN, no expired wait */
    double worst = 0;
    /* The signal words are zero at plan time (the plans' epochs start again at 0). */
    for (int r = 0; r < W; r++)
        ok = ok && ok_cuda(cudaMemset(e->d_words[r], 0, (1 + W) * 4), "clear signal words");
    /* The legacy stream's copies and sets do not order work on the ranks' non-blocking streams. */
    ok = ok && ok_cuda(cudaDeviceSynchronize(), "clear signal words");
    for (int r = 0; ok && r < W; r++) {
        agmm_gemm_desc d = {0};
        d.a = e->d_gath[r];
        d.a_local = e->d_shard[r];
        d.b = e->d_b[0][lay];
        d.c = e->d_c[r];
        d.b_layout = lay ? AGMM_LAYOUT_ROW_MAJOR : AGMM_LAYOUT_COL_MAJOR;
        d.m = k_m;
        d.n = k_n;
        d.k = k_k;
        d.nranks = W;
        d.rank = r;
        d.splits = 1;
        d.pull = 1;
        d.signals = (uint32_t *const *)e->d_table;
        d.dev_error = e->d_err[r];
        d.timeout_ns = 5000ull * 1000 * 1000;
        d.max_ctas = CTAS;
        d.config = c;
        memset(e->h_err[r], 0, sizeof *e->h_err[r]);
        ok = agmm_gemm_plan_create(&plan[r], &d, &err) == AGMM_SUCCESS &&
             agmm_gemm_plan_set_peers(plan[r], (const void *const *)e->d_shard, e->stream[r], &err) == AGMM_SUCCESS;
    }
    for (int run = 0; ok && run < RUNS; run++) {
        for (int r = 0; ok && r < W; r++)
            ok = agmm_gemm_plan_set_ptrs(plan[r], NULL, NULL, e->d_b[run][lay], NULL, &err) == AGMM_SUCCESS &&
                 poison(e->d_gath[r], (size_t)(W * k_m * k_k), e->h_out) &&
                 poison(e->d_c[r], (size_t)(W * k_m * k_n), e->h_out);
        ok = ok && ok_cuda(cudaDeviceSynchronize(), "poison");
        /* Both ranks' kernels run at once (2 x CTAS CTAs): each waits for the other's ready word and,
         * at its end, for the other's done slot (a rank whose peer never launched ends at the bound). */
        int launched = 0;
        while (ok && launched < W) {
            ok = agmm_gemm_run(plan[launched], 0, e->stream[launched], &err) == AGMM_SUCCESS;
            launched += ok;
        }
        for (int r = 0; r < launched; r++)
            ok = ok_cuda(cudaStreamSynchronize(e->stream[r]), "run") && ok;
        for (int r = 0; ok && r < W; r++) {
            const double rel = check_rank(e, r, run, 0);
            exact &= check_rank(e, r, run, 1) == 0.0;
            clean &= !isnan(rel) && e->h_err[r]->code == AGMM_DEV_OK;
            worst = isnan(rel) || rel > worst ? rel : worst;
        }
    }
    agmm_check(ok && exact && clean && worst <= TOL,
               "gemm_engine_pull W=%d m=%lld n=%lld k=%lld B-%s ctas<=%d [%s], %d runs: gathered A %s on both ranks, "
               "C rel=%.2e, no wait expired (records: %u, %u)%s%s",
               W, (long long)k_m, (long long)k_n, (long long)k_k, lay ? "row" : "col", CTAS,
               plan[0] ? agmm_gemm_plan_describe(plan[0]) : agmm_gemm_config_name(c), RUNS,
               exact ? "exact" : "WRONG", worst, e->h_err[0]->code, e->h_err[1]->code, err.msg[0] ? ": " : "",
               err.msg);
    for (int r = 0; r < W; r++)
        agmm_gemm_plan_destroy(plan[r]);
}

void test_gemm_engine_pull(void)
{
    int major = 0, sms = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (major != 9 || sms < W * CTAS) {
        agmm_skip("gemm_engine_pull: needs an sm_90 GPU with %d SMs (found sm_%d0, %d SMs)", W * CTAS, major, sms);
        return;
    }
    pull_env e;
    if (env_init(&e))
        for (int c = 0; c < agmm_gemm_num_configs(); c++)
            for (int lay = 0; lay < 2; lay++)
                if (agmm_gemm_config_takes(agmm_gemm_config_at(c), lay == AGMM_LAYOUT_ROW_MAJOR))
                    run_config(&e, c, lay); /* the others are refused: test_gemm_engine.c */
    env_free(&e);
}
