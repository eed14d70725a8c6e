/* GPU tests of the GEMM engine (src/kernels/gemm/gemm_engine.h): results against an fp64 CPU
 * reference on random bf16 data, outputs poisoned with NaN before every run, and the fused-path
 * hooks (local tiles read from the shard, a flag never raised times out within its bound, flags
 * raised before or during the run let it finish).
 *
 * Tolerance: relative Frobenius error <= 1e-2 over the checked rows (bf16 output rounding alone
 * gives ~2e-3), and not a single NaN anywhere in C. Small and odd shapes check every element;
 * the large benchmark shapes check 16 rows (first, last, the last row tile's, random ones)
 * against fp64 and every element for NaN. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "core/numeric.h"
#include "../harness.h"
#include "kernels/gemm/gemm_engine.h"

#define TOL 1e-2

/* Random pools shared by every case: a shape uses a prefix of each as its A, B. */
typedef struct {
    uint16_t *h_a, *h_b, *h_c;
    void *d_a, *d_b, *d_c;
    size_t a_elems, b_elems, c_elems;
} pools;

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        agmm_check(0, "gemm_engine: %s: %s", what, cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

static void fill_random(uint16_t *x, size_t n, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) {
        float v = agmm_rng_uniform(&st);
        if (v == 0.0f)
            v = 0.5f;
        x[i] = agmm_f32_to_bf16(v);
    }
}

static int pools_init(pools *p, size_t a_elems, size_t b_elems, size_t c_elems)
{
    memset(p, 0, sizeof *p);
    p->a_elems = a_elems;
    p->b_elems = b_elems;
    p->c_elems = c_elems;
    p->h_a = malloc(a_elems * 2);
    p->h_b = malloc(b_elems * 2);
    p->h_c = malloc(c_elems * 2);
    if (!p->h_a || !p->h_b || !p->h_c)
        return agmm_check(0, "gemm_engine: host allocation");
    fill_random(p->h_a, a_elems, 0x1234);
    fill_random(p->h_b, b_elems, 0x9876);
    if (!cuda_ok(cudaMalloc(&p->d_a, a_elems * 2), "cudaMalloc A") ||
        !cuda_ok(cudaMalloc(&p->d_b, b_elems * 2), "cudaMalloc B") ||
        !cuda_ok(cudaMalloc(&p->d_c, c_elems * 2), "cudaMalloc C"))
        return 0;
    return cuda_ok(cudaMemcpy(p->d_a, p->h_a, a_elems * 2, cudaMemcpyHostToDevice), "upload A") &&
           cuda_ok(cudaMemcpy(p->d_b, p->h_b, b_elems * 2, cudaMemcpyHostToDevice), "upload B");
}

static void pools_free(pools *p)
{
    free(p->h_a);
    free(p->h_b);
    free(p->h_c);
    cudaFree(p->d_a);
    cudaFree(p->d_b);
    cudaFree(p->d_c);
}

static int poison(void *d, size_t elems)
{
    /* 0x7fc1 as two equal bytes is not possible: write the pattern with a host buffer. */
    uint16_t *h = malloc(elems * 2);
    if (!h)
        return 0;
    for (size_t i = 0; i < elems; i++)
        h[i] = AGMM_POISON_BF16;
    int ok = cuda_ok(cudaMemcpy(d, h, elems * 2, cudaMemcpyHostToDevice), "poison C");
    free(h);
    return ok;
}

/* fp64 reference of row i of C = A * B. */
static void ref_row(const uint16_t *a, const uint16_t *b, agmm_layout lay, int64_t n, int64_t k, int64_t i, double *out)
{
    const uint16_t *ar = a + i * k;
    for (int64_t j = 0; j < n; j++)
        out[j] = 0;
    if (lay == AGMM_LAYOUT_COL_MAJOR) {
        for (int64_t j = 0; j < n; j++) {
            const uint16_t *bc = b + j * k;
            double s = 0;
            for (int64_t kk = 0; kk < k; kk++)
                s += (double)agmm_bf16_to_f32(ar[kk]) * agmm_bf16_to_f32(bc[kk]);
            out[j] = s;
        }
    } else {
        for (int64_t kk = 0; kk < k; kk++) {
            double av = agmm_bf16_to_f32(ar[kk]);
            const uint16_t *br = b + kk * n;
            for (int64_t j = 0; j < n; j++)
                out[j] += av * agmm_bf16_to_f32(br[j]);
        }
    }
}

/* Compares C (host copy) with the fp64 reference: all rows if rows <= full_rows, else a sample.
 * Returns the relative Frobenius error (NAN if any element of C is NaN, counted in *nans). */
static double check_c(const uint16_t *a, const uint16_t *b, agmm_layout lay, const uint16_t *c, int64_t rows,
                      int64_t n, int64_t k, int64_t full_rows, int64_t *nans)
{
    *nans = 0;
    for (int64_t i = 0; i < rows * n; i++)
        if (isnan(agmm_bf16_to_f32(c[i])))
            (*nans)++;
    double *ref = malloc((size_t)n * sizeof *ref);
    double num = 0, den = 0;
    uint64_t st = (uint64_t)(rows * 131 + n * 7 + k);
    int64_t nsample = rows <= full_rows ? rows : 16;
    for (int64_t s = 0; s < nsample; s++) {
        int64_t i;
        if (rows <= full_rows)
            i = s;
        else if (s == 0)
            i = 0;
        else if (s == 1)
            i = rows - 1;
        else if (s == 2)
            i = (rows - 1) / 128 * 128; /* first row of the last row tile */
        else
            i = (int64_t)(agmm_rng_next(&st) % (uint64_t)rows);
        ref_row(a, b, lay, n, k, i, ref);
        for (int64_t j = 0; j < n; j++) {
            double d = agmm_bf16_to_f32(c[i * n + j]) - ref[j];
            num += d * d;
            den += ref[j] * ref[j];
        }
    }
    free(ref);
    if (*nans)
        return NAN;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One plain GEMM rows x n x k on the pools' prefixes on at most max_ctas CTAs (0: every SM),
 * checked against fp64. */
/* runs: the plan's runs, each on a poisoned C and checked (what a run leaves behind, the split
 * tail's and stream-K's counters, must not change the next); must_say: what the plan's description
 * must contain (NULL: anything). */
static void run_plain_runs(pools *p, int64_t rows, int64_t n, int64_t k, agmm_layout lay, int config,
                           int64_t full_rows, int max_ctas, int runs, const char *must_say)
{
    const char *lname = lay == AGMM_LAYOUT_COL_MAJOR ? "col" : "row";
    agmm_gemm_desc d = {0};
    d.a = p->d_a;
    d.b = p->d_b;
    d.c = p->d_c;
    d.b_layout = lay;
    d.m = rows;
    d.n = n;
    d.k = k;
    d.nranks = 1;
    d.splits = 1;
    d.config = config;
    d.max_ctas = max_ctas;
    agmm_error err = {0};
    agmm_gemm_plan *plan = NULL;
    agmm_status st = agmm_gemm_plan_create(&plan, &d, &err);
    if (config >= 0 && !agmm_gemm_config_takes(agmm_gemm_config_at(config), lay == AGMM_LAYOUT_ROW_MAJOR)) {
        /* A width row-major B cannot come in (config.cuh): refused, naming the config. */
        agmm_check(st == AGMM_ERR_INVALID_ARG && plan == NULL && strstr(err.msg, agmm_gemm_config_name(config)) &&
                       strstr(err.msg, "column-major B only"),
                   "gemm_engine plain %lldx%lldx%lld B-%s config %s: refused (%s)", (long long)rows, (long long)n,
                   (long long)k, lname, agmm_gemm_config_name(config), err.msg);
        agmm_gemm_plan_destroy(plan);
        return;
    }
    if (st != AGMM_SUCCESS) {
        agmm_check(0, "gemm_engine plain %lldx%lldx%lld B-%s: plan: %s", (long long)rows, (long long)n, (long long)k,
                   lname, err.msg);
        return;
    }
    const char *desc = agmm_gemm_plan_describe(plan);
    for (int run = 0; run < runs; run++) {
        int ok = poison(p->d_c, (size_t)(rows * n));
        ok = ok && agmm_gemm_run(plan, 0, 0, &err) == AGMM_SUCCESS;
        ok = ok && cuda_ok(cudaDeviceSynchronize(), "gemm run");
        ok = ok && cuda_ok(cudaMemcpy(p->h_c, p->d_c, (size_t)(rows * n) * 2, cudaMemcpyDeviceToHost), "download C");
        int64_t nans = 0;
        double rel = ok ? check_c(p->h_a, p->h_b, lay, p->h_c, rows, n, k, full_rows, &nans) : NAN;
        agmm_check(ok && nans == 0 && rel <= TOL && (!must_say || strstr(desc, must_say)),
                   "gemm_engine plain %lldx%lldx%lld B-%s [%s] run %d of %d: rel=%.2e nans=%lld%s%s", (long long)rows,
                   (long long)n, (long long)k, lname, desc, run + 1, runs, rel, (long long)nans,
                   must_say ? "; the plan says " : "", must_say ? must_say : "");
    }
    agmm_gemm_plan_destroy(plan);
}

static void run_plain_ctas(pools *p, int64_t rows, int64_t n, int64_t k, agmm_layout lay, int config,
                           int64_t full_rows, int max_ctas)
{
    run_plain_runs(p, rows, n, k, lay, config, full_rows, max_ctas, 1, NULL);
}

static void run_plain(pools *p, int64_t rows, int64_t n, int64_t k, agmm_layout lay, int config, int64_t full_rows)
{
    run_plain_ctas(p, rows, n, k, lay, config, full_rows, 0);
}

/* Stream-K (a /stk config): runs shape sh = {rows, n, k, max_ctas (0: the GPU)} twice on one plan
 * in the first `layouts` B layouts where the policy's model (run here on the CPU) deals tiles,
 * and, with `many`, only where it cuts tiles into 3 or more pieces; the plan must say the model's
 * " stk=tiles/ctas" (the fix-up's counters are reset by each tile's last piece: the second run
 * checks it). Every row against fp64 up to ~2.2e9 multiply-adds, else 16 sampled rows; every
 * element for the poison's NaN. Returns 1 where it ran. */
static int run_stream_k(pools *p, int config, const int64_t sh[4], int sms, int layouts, int many)
{
    const agmm_gemm_config *tc = agmm_gemm_config_at(config);
    const int ctas = sh[3] ? (int)sh[3] : sms;
    agmm_stream_k plan;
    agmm_gemm_plan_stream_k(agmm_gemm_grid_tiles(config, sh[0], sh[1]), ctas, (int)((sh[2] + 63) / 64), tc->bm, tc->bn,
                            &plan);
    if (!plan.tiles || (many && plan.q >= plan.kb - 1))
        return 0;
    char says[48];
    snprintf(says, sizeof says, " stk=%d/%d", plan.tiles, ctas);
    const int64_t full_rows = sh[0] * sh[1] * sh[2] <= 2200000000 ? 1 << 20 : 64;
    for (int lay = 0; lay < layouts; lay++)
        run_plain_runs(p, sh[0], sh[1], sh[2], (agmm_layout)lay, config, full_rows, (int)sh[3], 2, says);
    return 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The fused-path hooks on one shape: W = 4 ranks of m = 1000 rows (short tiles at every chunk
 * end), splits = 2, seen from rank 1, with max_ctas SMs (a quarter: as emulated ranks get).
 * Case (a) runs every config; with k = 1032 on 30 CTAs the split-tail configs cut the last
 * tiles into K pieces (checked: the plan says so), so their fix-up meets the chunk waits and the
 * shard reads. all_cases: also (b)-(d). */
static void test_hooks(pools *p, int64_t k, int max_ctas, int all_cases)
{
    const int W = 4, rank = 1, splits = 2;
    const int64_t m = 1000, n = 264, rows = W * m;
    const uint32_t epoch = 7;  /* the value the flags must reach (fused raises 1) */
    const int nflags = W * splits; /* and one more word: the engine's count, zero between runs */
    uint16_t *h_gathered = malloc((size_t)(rows * k) * 2), *h_gathered_back = malloc((size_t)(rows * k) * 2);
    void *d_gathered = NULL, *d_flags = NULL;
    agmm_dev_error *h_err = NULL, *d_err = NULL;
    uint32_t *h_flags_mapped = NULL, *d_flags_mapped = NULL;
    if (!h_gathered || !h_gathered_back ||
        !cuda_ok(cudaMalloc(&d_gathered, (size_t)(rows * k) * 2), "cudaMalloc gathered") ||
        !cuda_ok(cudaMalloc(&d_flags, (nflags + 1) * 4), "cudaMalloc flags") ||
        !cuda_ok(cudaHostAlloc((void **)&h_err, sizeof *h_err, cudaHostAllocMapped), "cudaHostAlloc err") ||
        !cuda_ok(cudaHostGetDevicePointer((void **)&d_err, h_err, 0), "err device pointer") ||
        !cuda_ok(cudaHostAlloc((void **)&h_flags_mapped, (nflags + 1) * 4, cudaHostAllocMapped),
                 "cudaHostAlloc flags") ||
        !cuda_ok(cudaHostGetDevicePointer((void **)&d_flags_mapped, h_flags_mapped, 0), "flags device pointer"))
        goto out;

    /* The true gathered A is the pool's prefix; the device copy has rank 1's block poisoned, so
     * only a kernel that reads local tiles from the shard (the pool rows of block 1) is right. */
    memcpy(h_gathered, p->h_a, (size_t)(rows * k) * 2);
    for (int64_t i = rank * m * k; i < (rank + 1) * m * k; i++)
        h_gathered[i] = AGMM_POISON_BF16;
    if (!cuda_ok(cudaMemcpy(d_gathered, h_gathered, (size_t)(rows * k) * 2, cudaMemcpyHostToDevice), "upload"))
        goto out;
    const void *d_shard = (const uint16_t *)p->d_a + rank * m * k;

    agmm_gemm_desc d = {0};
    d.a = d_gathered;
    d.a_local = d_shard;
    d.b = p->d_b;
    d.c = p->d_c;
    d.b_layout = AGMM_LAYOUT_COL_MAJOR;
    d.m = m;
    d.n = n;
    d.k = k;
    d.nranks = W;
    d.rank = rank;
    d.splits = splits;
    d.chunk_flags = d_flags;
    d.dev_error = d_err;
    d.timeout_ns = 20 * 1000 * 1000;
    d.max_ctas = max_ctas;
    d.config = -1;
    d.copy_local = 1;

    for (int c = -1; c < agmm_gemm_num_configs(); c++) {
        /* (a) flags raised before launch, local tiles from the shard: right answer, no error; and
         * the shard copied into its poisoned block of the gathered A (copy_local), nothing else
         * of it touched. */
        d.config = c;
        agmm_error err = {0};
        agmm_gemm_plan *plan = NULL;
        if (agmm_gemm_plan_create(&plan, &d, &err) != AGMM_SUCCESS) {
            agmm_check(0, "gemm_engine hooks plan: %s", err.msg);
            goto out;
        }
        uint32_t flags[17] = {0}, after[17];
        for (int i = 0; i < nflags; i++)
            flags[i] = epoch + (uint32_t)(i % 3); /* >= epoch: ready (some ahead) */
        memset(h_err, 0, sizeof *h_err);
        int ok = cuda_ok(cudaMemcpy(d_flags, flags, (nflags + 1) * 4, cudaMemcpyHostToDevice), "flags") &&
                 cuda_ok(cudaMemcpy(d_gathered, h_gathered, (size_t)(rows * k) * 2, cudaMemcpyHostToDevice),
                         "re-poison") &&
                 poison(p->d_c, (size_t)(rows * n)) && agmm_gemm_run(plan, epoch, 0, &err) == AGMM_SUCCESS &&
                 cuda_ok(cudaDeviceSynchronize(), "run") &&
                 cuda_ok(cudaMemcpy(p->h_c, p->d_c, (size_t)(rows * n) * 2, cudaMemcpyDeviceToHost), "download") &&
                 cuda_ok(cudaMemcpy(after, d_flags, (nflags + 1) * 4, cudaMemcpyDeviceToHost), "flags back") &&
                 cuda_ok(cudaMemcpy(h_gathered_back, d_gathered, (size_t)(rows * k) * 2, cudaMemcpyDeviceToHost),
                         "gathered back");
        int reset = 1;
        for (int i = 0; ok && i <= nflags; i++)
            reset &= after[i] == 0;
        const int copied = ok && memcmp(h_gathered_back, p->h_a, (size_t)(rows * k) * 2) == 0;
        int64_t nans = 0;
        double rel = ok ? check_c(p->h_a, p->h_b, d.b_layout, p->h_c, rows, n, k, rows, &nans) : NAN;
        const char *desc = agmm_gemm_plan_describe(plan);
        const int split_expected = k > 1000 && strstr(agmm_gemm_config_name(c), "/sk");
        agmm_check(ok && nans == 0 && rel <= TOL && h_err->code == AGMM_DEV_OK && reset && copied &&
                       (!split_expected || (strstr(desc, "split=") && !strstr(desc, "split=0x"))),
                   "gemm_engine hooks W=%d rank=%d m=%lld k=%lld splits=%d [%s]: local tiles from the shard, flags "
                   "raised before launch: rel=%.2e nans=%lld err=%u, flags and count back to 0 after the run: %s, "
                   "the shard copied into its block of the gathered A and nothing else written there: %s",
                   W, rank, (long long)m, (long long)k, splits, desc, rel, (long long)nans, h_err->code,
                   reset ? "yes" : "NO", copied ? "yes" : "NO");
        agmm_gemm_plan_destroy(plan);
    }
    if (!all_cases)
        goto out;

    {
        /* (b) no shard: every tile reads the gathered buffer, here with block 1 intact. */
        d.config = -1;
        d.a = p->d_a;
        d.a_local = NULL;
        d.copy_local = 0;
        agmm_error err = {0};
        agmm_gemm_plan *plan = NULL;
        uint32_t flags[17] = {0};
        for (int i = 0; i < nflags; i++)
            flags[i] = epoch;
        memset(h_err, 0, sizeof *h_err);
        int ok = agmm_gemm_plan_create(&plan, &d, &err) == AGMM_SUCCESS &&
                 cuda_ok(cudaMemcpy(d_flags, flags, (nflags + 1) * 4, cudaMemcpyHostToDevice), "flags") &&
                 poison(p->d_c, (size_t)(rows * n)) && agmm_gemm_run(plan, epoch, 0, &err) == AGMM_SUCCESS &&
                 cuda_ok(cudaDeviceSynchronize(), "run") &&
                 cuda_ok(cudaMemcpy(p->h_c, p->d_c, (size_t)(rows * n) * 2, cudaMemcpyDeviceToHost), "download");
        int64_t nans = 0;
        double rel = ok ? check_c(p->h_a, p->h_b, d.b_layout, p->h_c, rows, n, k, rows, &nans) : NAN;
        agmm_check(ok && nans == 0 && rel <= TOL && h_err->code == AGMM_DEV_OK,
                   "gemm_engine hooks W=%d: no shard, every tile from the gathered A: rel=%.2e nans=%lld %s", W, rel,
                   (long long)nans, err.msg);
        agmm_gemm_plan_destroy(plan);
    }

    {
        /* (c) chunk 5 (rank 2, split 1) never raised: the run ends within the bound, with the
         * timeout recorded naming rank 1 waiting for chunk 5 of peer 2. */
        d.a = d_gathered;
        d.a_local = d_shard;
        agmm_error err = {0};
        agmm_gemm_plan *plan = NULL;
        uint32_t flags[17] = {0};
        for (int i = 0; i < nflags; i++)
            flags[i] = i == 5 ? epoch - 1 : epoch;
        memset(h_err, 0, sizeof *h_err);
        int ok = agmm_gemm_plan_create(&plan, &d, &err) == AGMM_SUCCESS &&
                 cuda_ok(cudaMemcpy(d_flags, flags, (nflags + 1) * 4, cudaMemcpyHostToDevice), "flags");
        double t0 = now_s();
        ok = ok && agmm_gemm_run(plan, epoch, 0, &err) == AGMM_SUCCESS && cuda_ok(cudaDeviceSynchronize(), "run");
        double dt = now_s() - t0;
        agmm_check(ok && h_err->code == AGMM_DEV_TIMEOUT && h_err->chunk == 5 && h_err->peer == 2 &&
                       h_err->rank == rank && h_err->wait == AGMM_WAIT_CHUNK && h_err->epoch == epoch &&
                       h_err->seen == epoch - 1 && dt < 2.0,
                   "gemm_engine hooks: a flag never raised times out (bound 20 ms) in %.3f s: code=%u rank=%d "
                   "peer=%d chunk=%d epoch=%u seen=%u",
                   dt, h_err->code, h_err->rank, h_err->peer, h_err->chunk, h_err->epoch, h_err->seen);
        agmm_gemm_plan_destroy(plan);
    }

    {
        /* (d) chunk 6 raised by the host 50 ms after launch (host-mapped flags): the kernel
         * waits for it, then finishes with the right answer and no error. */
        agmm_error err = {0};
        agmm_gemm_plan *plan = NULL;
        d.chunk_flags = d_flags_mapped;
        d.timeout_ns = 5000ull * 1000 * 1000;
        for (int i = 0; i <= nflags; i++)
            h_flags_mapped[i] = i == nflags ? 0 : i == 6 ? epoch - 1 : epoch;
        memset(h_err, 0, sizeof *h_err);
        int ok = agmm_gemm_plan_create(&plan, &d, &err) == AGMM_SUCCESS &&
                 poison(p->d_c, (size_t)(rows * n)) && agmm_gemm_run(plan, epoch, 0, &err) == AGMM_SUCCESS;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        int still_running = cudaStreamQuery(0) == cudaErrorNotReady;
        atomic_thread_fence(memory_order_seq_cst);
        ((volatile uint32_t *)h_flags_mapped)[6] = epoch;
        atomic_thread_fence(memory_order_seq_cst);
        ok = ok && cuda_ok(cudaDeviceSynchronize(), "run") &&
             cuda_ok(cudaMemcpy(p->h_c, p->d_c, (size_t)(rows * n) * 2, cudaMemcpyDeviceToHost), "download");
        int64_t nans = 0;
        double rel = ok ? check_c(p->h_a, p->h_b, d.b_layout, p->h_c, rows, n, k, rows, &nans) : NAN;
        agmm_check(ok && still_running && nans == 0 && rel <= TOL && h_err->code == AGMM_DEV_OK,
                   "gemm_engine hooks: chunk 6 raised 50 ms after launch: waited=%d rel=%.2e nans=%lld err=%u",
                   still_running, rel, (long long)nans, h_err->code);
        agmm_gemm_plan_destroy(plan);
    }

out:
    free(h_gathered);
    free(h_gathered_back);
    cudaFree(d_gathered);
    cudaFree(d_flags);
    cudaFreeHost(h_err);
    cudaFreeHost(h_flags_mapped);
}

/* A plan of d is made, and its run refuses, naming `operand`, and launches nothing. */
static void run_refuses(const agmm_gemm_desc *d, const char *operand, const char *what)
{
    agmm_error err = {0};
    agmm_gemm_plan *plan = NULL;
    char want[64];
    snprintf(want, sizeof want, "operand %s is not set", operand);
    if (agmm_gemm_plan_create(&plan, d, &err) == AGMM_SUCCESS) {
        agmm_status st = agmm_gemm_run(plan, 0, 0, &err);
        agmm_check(st == AGMM_ERR_INVALID_ARG && strstr(err.msg, want) && cudaDeviceSynchronize() == cudaSuccess,
                   "gemm_engine run %s refuses, naming %s: \"%s\"", what, operand, err.msg);
    } else {
        agmm_check(0, "gemm_engine plan %s: %s", what, err.msg);
    }
    agmm_gemm_plan_destroy(plan);
}

/* The engine refuses bad arguments with a message naming the argument, at plan creation and at
 * a run whose operand is missing. */
static void test_bad_args(pools *p)
{
    agmm_gemm_desc d = {0};
    d.a = p->d_a;
    d.b = p->d_b;
    d.c = p->d_c;
    d.m = 64;
    d.n = 64;
    d.k = 100;
    d.nranks = 1;
    d.splits = 1;
    d.config = -1;
    agmm_error err = {0};
    agmm_gemm_plan *plan = NULL;
    agmm_status st = agmm_gemm_plan_create(&plan, &d, &err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && plan == NULL && strstr(err.msg, "K=100"),
               "gemm_engine rejects K=100 (not a multiple of 8): \"%s\"", err.msg);
    d.k = 64;
    d.n = 100;
    d.b_layout = AGMM_LAYOUT_ROW_MAJOR;
    agmm_error_clear(&err);
    st = agmm_gemm_plan_create(&plan, &d, &err);
    agmm_check(st == AGMM_ERR_UNSUPPORTED && plan == NULL && strstr(err.msg, "N=100"),
               "gemm_engine rejects row-major B with N=100: \"%s\"", err.msg);
    d.n = 64;
    d.b_layout = AGMM_LAYOUT_COL_MAJOR;
    d.config = agmm_gemm_num_configs();
    agmm_error_clear(&err);
    st = agmm_gemm_plan_create(&plan, &d, &err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && plan == NULL && strstr(err.msg, "config="),
               "gemm_engine rejects config %d (past the table): \"%s\"", d.config, err.msg);
    /* Chunk flags without a bound: the engine has no default timeout. */
    d.config = -1;
    d.chunk_flags = (uint32_t *)p->d_c;
    d.dev_error = (agmm_dev_error *)p->d_c;
    agmm_error_clear(&err);
    st = agmm_gemm_plan_create(&plan, &d, &err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && plan == NULL && strstr(err.msg, "timeout_ns=0"),
               "gemm_engine rejects chunk flags with timeout_ns = 0: \"%s\"", err.msg);
    d.chunk_flags = NULL;
    d.dev_error = NULL;
    /* 2^30 rows by 2^21 columns: 2^36 tiles of 128x256, past what the device decode divides. */
    d.m = (int64_t)1 << 30;
    d.n = (int64_t)1 << 21;
    d.config = 0;
    agmm_error_clear(&err);
    st = agmm_gemm_plan_create(&plan, &d, &err);
    agmm_check(st == AGMM_ERR_UNSUPPORTED && plan == NULL && strstr(err.msg, "68719476736 tiles"),
               "gemm_engine rejects a schedule of 2^36 tiles: \"%s\"", err.msg);
    d.m = 64;
    d.n = 64;
    d.config = -1;
    d.c = (char *)p->d_c + 2;
    agmm_error_clear(&err);
    st = agmm_gemm_plan_create(&plan, &d, &err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && plan == NULL && strstr(err.msg, "c=0x"),
               "gemm_engine rejects a C 2 bytes off 16-byte alignment: \"%s\"", err.msg);
    /* A plan made without C: its run refuses, naming the operand, and launches nothing. */
    d.c = NULL;
    run_refuses(&d, "c", "without C");
    /* copy_local: only in the chunk-flag mode (pull mode stores the gathered A itself), and a run
     * needs the shard it copies. */
    d.c = p->d_c;
    d.copy_local = 1;
    d.pull = 1;
    agmm_error_clear(&err);
    st = agmm_gemm_plan_create(&plan, &d, &err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && plan == NULL && strstr(err.msg, "copy_local"),
               "gemm_engine rejects copy_local in pull mode: \"%s\"", err.msg);
    d.pull = 0;
    agmm_error_clear(&err);
    st = agmm_gemm_plan_create(&plan, &d, &err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && plan == NULL && strstr(err.msg, "copy_local"),
               "gemm_engine rejects copy_local in a plain GEMM: \"%s\"", err.msg);
    d.chunk_flags = (uint32_t *)p->d_c;
    d.dev_error = (agmm_dev_error *)p->d_c;
    d.timeout_ns = 1000000;
    run_refuses(&d, "a_local", "with copy_local and no shard");
}

/* For compute-sanitizer: every tile config (each one kernel) on one small shape with M, N and K
 * tails, both B layouts, on the whole GPU and on 3 CTAs (3 units each: the ping-pong consumers
 * alternate). The fused path's waits and reset run in the sanitizer's fused cases. */
void test_gemm_engine_small(void)
{
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (major != 9) {
        agmm_skip("gemm_engine: needs an sm_90 GPU (found sm_%d0)", major);
        return;
    }
    pools p;
    if (pools_init(&p, (size_t)300 * 136, (size_t)136 * 264, (size_t)300 * 264))
        for (int c = 0; c < agmm_gemm_num_configs(); c++)
            for (int lay = 0; lay < 2; lay++) {
                run_plain(&p, 300, 264, 136, (agmm_layout)lay, c, 1 << 20);
                run_plain_ctas(&p, 300, 264, 136, (agmm_layout)lay, c, 1 << 20, 3);
            }
    pools_free(&p);
}

void test_gemm_engine(void)
{
    int ndev = 0, major = 0, sms = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        agmm_skip("gemm_engine: no GPU");
        return;
    }
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (major != 9) {
        agmm_skip("gemm_engine: needs an sm_90 GPU (found sm_%d0)", major);
        return;
    }
    const char *quick = getenv("AGMM_GEMM_QUICK"); /* set: odd shapes and hooks only */
    const int64_t max_rows = quick ? 4096 : 32768, max_nk = quick ? 2048 : 8192;
    pools p;
    if (!pools_init(&p, (size_t)(max_rows * max_nk), (size_t)(max_nk * max_nk), (size_t)(max_rows * max_nk)))
        goto out;

    test_bad_args(&p);

    /* Odd shapes, every element against fp64, both layouts, the policy's pick. */
    static const int64_t ms[] = {1, 127, 1000}, ns[] = {8, 264}, ks[] = {8, 72};
    for (int lay = 0; lay < 2; lay++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 2; j++)
                for (int l = 0; l < 2; l++)
                    run_plain(&p, ms[i], ns[j], ks[l], (agmm_layout)lay, -1, 1 << 20);
    /* Every tile config on shapes with M, N and K tails (K = 1032: a 64-wide block of 8); the
     * split-tail configs split the last two (17 and 8 K blocks on 21 and 64 tiles). On a grid of
     * 5 or 7 CTAs every CTA has 2 to 10 units, so both ping-pong consumers work, and
     * skip each other's units: of 2 K blocks (several units in the ring at once) and of 17 (more
     * than the ring holds: the case the order barrier of ring.cuh makes safe). N = 100 (column-major
     * B only): rows of C not 16-byte aligned, so epi_store stores element by element. */
    for (int c = 0; c < agmm_gemm_num_configs(); c++)
        for (int lay = 0; lay < 2; lay++) {
            run_plain(&p, 1000, 264, 72, (agmm_layout)lay, c, 1 << 20);
            if ((agmm_layout)lay == AGMM_LAYOUT_COL_MAJOR)
                run_plain(&p, 1000, 100, 72, (agmm_layout)lay, c, 1 << 20);
            run_plain(&p, 777, 520, 1032, (agmm_layout)lay, c, 1 << 20);
            run_plain(&p, 2048, 1000, 512, (agmm_layout)lay, c, 64);
            run_plain_ctas(&p, 1000, 264, 72, (agmm_layout)lay, c, 1 << 20, 5);
            run_plain_ctas(&p, 1000, 264, 1032, (agmm_layout)lay, c, 1 << 20, 7);
        }

    /* Stream-K: per /stk config, the first two of these shapes and budgets whose plan deals tiles,
     * both layouts; and 1000 x 1000 x 2056 on the whole GPU, column-major B, where the plan cuts
     * tiles into 3 or more pieces (a CTA's range shorter than a tile: q < K blocks - 1). */
    static const int64_t stk_shapes[][4] = {{1000, 264, 2056, 11}, {1000, 1000, 1032, 30}, {1000, 520, 2056, 11},
                                            {1000, 1000, 4104, 7},  {1000, 1504, 2056, 30}};
    static const int64_t stk_many[4] = {1000, 1000, 2056, 0};
    int many_pieces = 0;
    for (int c = 0; c < agmm_gemm_num_configs(); c++) {
        if (agmm_gemm_config_at(c)->sk != 2)
            continue;
        int dealt = 0;
        for (int i = 0; dealt < 2 && i < (int)(sizeof stk_shapes / sizeof stk_shapes[0]); i++)
            dealt += run_stream_k(&p, c, stk_shapes[i], sms, 2, 0);
        agmm_check(dealt == 2, "gemm_engine %s: stream-K dealt on %d of the test's shapes (2 wanted)",
                   agmm_gemm_config_name(c), dealt);
        many_pieces += run_stream_k(&p, c, stk_many, sms, 1, 1);
    }
    agmm_check(many_pieces >= 1, "gemm_engine: a stream-K plan cut tiles into 3 or more pieces in %d configs (1 wanted)",
               many_pieces);

    test_hooks(&p, 200, sms / 4, 1);
    test_hooks(&p, 1032, 30, 0);

    if (!quick) {
        /* The benchmarked shapes: the seed's gathered GEMMs at W = 8 (rows = 8M, N = K = M),
         * column-major B as the seed, row-major B on some; LLaMA-70B TP shapes. */
        for (int64_t m = 256; m <= 4096; m += 128) {
            run_plain(&p, 8 * m, m, m, AGMM_LAYOUT_COL_MAJOR, -1, 0);
            if (m % 1024 == 0 || m == 640)
                run_plain(&p, 8 * m, m, m, AGMM_LAYOUT_ROW_MAJOR, -1, 0);
        }
        run_plain(&p, 8192, 3584, 8192, AGMM_LAYOUT_COL_MAJOR, -1, 0);
        run_plain(&p, 8192, 8192, 3584, AGMM_LAYOUT_COL_MAJOR, -1, 0);
        run_plain(&p, 8192, 3584, 8192, AGMM_LAYOUT_ROW_MAJOR, -1, 0);
    }
out:
    pools_free(&p);
}
