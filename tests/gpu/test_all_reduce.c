/* GPU tests of the symmetric-memory all-reduce backends (one_shot, two_shot: every all_reduce
 * backend of the library's table that an emulated world offers), in emulated worlds of 1 to 8
 * ranks sharing this GPU: every rank's kernel runs concurrently on its own stream and the kernels
 * meet in their barriers, as on NVLink, with one GPU's memory standing in for it.
 *
 * Correctness: every case (backend x dtype x n, with n odd, n < W and n = 1 among them) runs three
 * times on one plan with fresh random inputs each time: out of place (output poisoned with NaN),
 * in place (out == agmm_plan_input), and out of place into an output misaligned by one element.
 * Each rank compares its output bit for bit with the host's sum in the same fixed order (fp32,
 * acc = x_0, acc += x_1, ..., x_{W-1}, rounded once), so all ranks also agree with each other.
 * The runs of a plan follow each other with no host synchronisation between ranks, which checks
 * that a rank may rewrite its input as soon as its own previous run has completed.
 *
 * Timeout: in a world with a short timeout one rank never runs; the others must get
 * AGMM_ERR_TIMEOUT from agmm_ctx_sync naming that rank, and again from their next run.
 *
 * Timing (AGMM_AR_TIME=8 or AGMM_AR_TIME=2,4,8: the world sizes): the seed's sizes and powers of
 * two up to 256 MB, median of per-call CUDA event times on rank 0 (no L2 flush), emulated: W
 * ranks on one GPU, so "NVLink" is this GPU's memory and the numbers are no NVLink figures. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "agmm.h"
#include "core/numeric.h"
#include "gpu_tests.h"
#include "../harness.h"

enum { MODE_OUT = 0, MODE_IN_PLACE, MODE_MISALIGNED, NMODES };
static const char *const mode_name[NMODES] = {"out of place", "in place", "out of place, out misaligned by 1 element"};

typedef struct {
    const char *backend;
    agmm_dtype dtype;
    int64_t n;
} ar_case;

typedef struct {
    agmm_status st[AGMM_MAX_RANKS];
    int64_t bad[AGMM_MAX_RANKS];        /* elements that differ from the host sum */
    int64_t first_bad[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][200];
} ar_result;

typedef struct {
    int nranks;
    pthread_barrier_t bar;
    const ar_case *cases;
    int ncases;
    ar_result *res;                     /* ncases * NMODES */
} ar_world;

static size_t elem_bytes(agmm_dtype dt) { return dt == AGMM_DTYPE_F32 ? 4 : 2; }

static uint64_t input_seed(int c, int mode, int rank)
{
    uint64_t s = 0x5eed0000ull + (uint64_t)c * 1000003ull + (uint64_t)mode * 7919ull + (uint64_t)rank * 104729ull;
    return agmm_rng_next(&s);
}

static void gen_input(void *dst, agmm_dtype dt, int64_t n, uint64_t seed)
{
    uint64_t st = seed;
    if (dt == AGMM_DTYPE_F32) {
        float *x = dst;
        for (int64_t i = 0; i < n; i++)
            x[i] = agmm_rng_uniform(&st);
    } else {
        uint16_t *x = dst;
        for (int64_t i = 0; i < n; i++)
            x[i] = agmm_f32_to_bf16(agmm_rng_uniform(&st));
    }
}

static float elem_f32(const void *x, agmm_dtype dt, int64_t i)
{
    return dt == AGMM_DTYPE_F32 ? ((const float *)x)[i] : agmm_bf16_to_f32(((const uint16_t *)x)[i]);
}

/* The expected result: fp32, ranks in order, rounded once; written as dtype into `expect`. */
static void host_sum(int c, int mode, int nranks, agmm_dtype dt, int64_t n, float *acc, void *tmp, void *expect)
{
    for (int p = 0; p < nranks; p++) {
        gen_input(tmp, dt, n, input_seed(c, mode, p));
        for (int64_t i = 0; i < n; i++) {
            float f = elem_f32(tmp, dt, i);
            acc[i] = p == 0 ? f : acc[i] + f;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        if (dt == AGMM_DTYPE_F32)
            ((float *)expect)[i] = acc[i];
        else
            ((uint16_t *)expect)[i] = agmm_f32_to_bf16(acc[i]);
    }
}

static void note(ar_result *r, int rank, agmm_status st, const char *fmt, const char *detail)
{
    r->st[rank] = st;
    snprintf(r->msg[rank], sizeof r->msg[rank], fmt, detail);
}

static agmm_status correctness_rank(agmm_ctx *ctx, void *arg)
{
    ar_world *w = arg;
    const int rank = agmm_ctx_rank(ctx);
    cudaStream_t s = gpu_rank_stream(rank, 0);
    if (s == NULL)
        return AGMM_ERR_CUDA;
    for (int c = 0; c < w->ncases; c++) {
        const ar_case *k = &w->cases[c];
        ar_result *res = &w->res[c * NMODES];
        const size_t es = elem_bytes(k->dtype), bytes = (size_t)k->n * es;
        agmm_all_reduce_desc desc = {.n = k->n, .dtype = k->dtype, .backend = k->backend};
        agmm_plan *plan = NULL;
        agmm_status st = agmm_plan_all_reduce(&plan, ctx, &desc);
        void *d_out = NULL;
        unsigned char *h_in = malloc(bytes), *h_out = malloc(bytes), *h_exp = malloc(bytes), *tmp = malloc(bytes);
        float *acc = malloc((size_t)k->n * sizeof(float));
        if (st == AGMM_SUCCESS && (!h_in || !h_out || !h_exp || !tmp || !acc))
            st = AGMM_ERR_NO_MEMORY;
        if (st == AGMM_SUCCESS && cudaMalloc(&d_out, bytes + 16) != cudaSuccess)
            st = AGMM_ERR_CUDA;
        for (int mode = 0; mode < NMODES; mode++) {
            ar_result *r = &res[mode];
            r->bad[rank] = -1;
            if (st != AGMM_SUCCESS) {
                note(r, rank, st, "plan or set-up failed: %s", agmm_last_error(ctx));
                pthread_barrier_wait(&w->bar);
                continue;
            }
            void *in = agmm_plan_input(plan);
            void *out = mode == MODE_IN_PLACE ? in : mode == MODE_OUT ? d_out : (unsigned char *)d_out + es;
            gen_input(h_in, k->dtype, k->n, input_seed(c, mode, rank));
            /* Stream-ordered after this rank's previous run only: no host meeting of the ranks. */
            cudaError_t ce = cudaMemcpyAsync(in, h_in, bytes, cudaMemcpyHostToDevice, s);
            if (ce == cudaSuccess && mode != MODE_IN_PLACE)
                ce = cudaMemsetAsync(out, 0xff, bytes, s); /* NaN in bf16 and fp32 */
            agmm_status rs = ce == cudaSuccess ? AGMM_SUCCESS : AGMM_ERR_CUDA;
            agmm_all_reduce_io io = {.out = out};
            if (rs == AGMM_SUCCESS)
                rs = agmm_all_reduce(plan, &io, s);
            if (rs == AGMM_SUCCESS)
                rs = agmm_ctx_sync(ctx);
            if (rs == AGMM_SUCCESS && (cudaMemcpyAsync(h_out, out, bytes, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                                       cudaStreamSynchronize(s) != cudaSuccess))
                rs = AGMM_ERR_CUDA;
            if (rs != AGMM_SUCCESS) {
                note(r, rank, rs, "%s", ce != cudaSuccess ? cudaGetErrorString(ce) : agmm_last_error(ctx));
            } else {
                host_sum(c, mode, w->nranks, k->dtype, k->n, acc, tmp, h_exp);
                int64_t bad = 0, first = -1;
                if (memcmp(h_out, h_exp, bytes) != 0) {
                    for (int64_t i = 0; i < k->n; i++) {
                        if (memcmp(h_out + (size_t)i * es, h_exp + (size_t)i * es, es) != 0) {
                            if (first < 0)
                                first = i;
                            bad++;
                        }
                    }
                }
                r->st[rank] = AGMM_SUCCESS;
                r->bad[rank] = bad;
                r->first_bad[rank] = first;
                if (bad)
                    snprintf(r->msg[rank], sizeof r->msg[rank], "element %lld: got %g, expected %g", (long long)first,
                             (double)elem_f32(h_out, k->dtype, first), (double)elem_f32(h_exp, k->dtype, first));
            }
            /* Host meeting after the check, so no device wait ever spans a peer's host work. */
            pthread_barrier_wait(&w->bar);
        }
        cudaFree(d_out);
        agmm_plan_destroy(plan);
        free(h_in);
        free(h_out);
        free(h_exp);
        free(tmp);
        free(acc);
    }
    cudaStreamSynchronize(s);
    return AGMM_SUCCESS;
}

static void report_case(int nranks, const ar_case *k, int mode, const ar_result *r)
{
    int ok = 1, wrong = 0;
    const char *why = "";
    for (int p = 0; p < nranks; p++) {
        if (r->st[p] != AGMM_SUCCESS || r->bad[p] != 0) {
            if (ok)
                why = r->msg[p];
            ok = 0;
            wrong = p;
        }
    }
    if (ok)
        agmm_check(1, "all_reduce/%s W=%d %s n=%lld %s: all %d ranks bitwise equal to the host fp32 rank-order sum",
                   k->backend, nranks, k->dtype == AGMM_DTYPE_F32 ? "fp32" : "bf16",
                   (long long)k->n, mode_name[mode], nranks);
    else
        agmm_check(0, "all_reduce/%s W=%d %s n=%lld %s: rank %d: %s (%s; %lld elements differ)",
                   k->backend, nranks, k->dtype == AGMM_DTYPE_F32 ? "fp32" : "bf16",
                   (long long)k->n, mode_name[mode], wrong, agmm_status_str(r->st[wrong]), why,
                   (long long)r->bad[wrong]);
}

static agmm_world *emulated_world(int nranks, double timeout_s)
{
    agmm_world *world = NULL;
    char err[512] = "";
    agmm_world_config cfg = {.kind = AGMM_WORLD_EMULATED, .nranks = nranks, .timeout_s = timeout_s};
    agmm_status st = agmm_world_create(&world, &cfg, err, sizeof err);
    if (st != AGMM_SUCCESS) {
        agmm_check(0, "all_reduce: emulated world of %d ranks: %s (%s)", nranks, agmm_status_str(st), err);
        return NULL;
    }
    return world;
}

static void test_correctness(int nranks, const int64_t *ns, int nns)
{
    const agmm_dtype dtypes[] = {AGMM_DTYPE_BF16, AGMM_DTYPE_F32};
    agmm_world *world = emulated_world(nranks, 5.0);
    if (world == NULL)
        return;
    int nbackends = 0, ncases = 0;
    while (agmm_backend_name(AGMM_OP_ALL_REDUCE, nbackends) != NULL)
        nbackends++;
    ar_case *cases = calloc((size_t)(nns * 2 * nbackends), sizeof *cases);
    ar_result *res = calloc((size_t)(nns * 2 * nbackends * NMODES), sizeof *res);
    if (cases == NULL || res == NULL) {
        agmm_check(0, "all_reduce: host allocation");
        free(cases);
        free(res);
        agmm_world_destroy(world);
        return;
    }
    for (int b = 0; b < nbackends; b++) {
        const char *name = agmm_backend_name(AGMM_OP_ALL_REDUCE, b);
        if (!agmm_backend_available(world, AGMM_OP_ALL_REDUCE, name, NULL, 0))
            continue; /* needs NCCL: ranks share the GPU (test_ag_matmul.c checks that it says so) */
        for (int d = 0; d < 2; d++)
            for (int i = 0; i < nns; i++)
                cases[ncases++] = (ar_case){name, dtypes[d], ns[i]};
    }
    ar_world w = {.nranks = nranks, .cases = cases, .ncases = ncases, .res = res};
    pthread_barrier_init(&w.bar, NULL, (unsigned)nranks);
    agmm_status st = agmm_world_run(world, correctness_rank, &w);
    pthread_barrier_destroy(&w.bar);
    if (st != AGMM_SUCCESS)
        agmm_check(0, "all_reduce W=%d: a rank failed to start: %s", nranks, agmm_status_str(st));
    else
        for (int c = 0; c < ncases; c++)
            for (int m = 0; m < NMODES; m++)
                report_case(nranks, &cases[c], m, &res[c * NMODES + m]);
    agmm_world_destroy(world);
    free(cases);
    free(res);
}

/* ---- A rank that never arrives ---- */

typedef struct {
    int nranks;
    const char *backend;
    pthread_barrier_t bar;
    agmm_status plan_st[AGMM_MAX_RANKS], sync_st[AGMM_MAX_RANKS], next_st[AGMM_MAX_RANKS];
    double secs[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][512];
} timeout_world;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static agmm_status timeout_rank(agmm_ctx *ctx, void *arg)
{
    timeout_world *w = arg;
    const int rank = agmm_ctx_rank(ctx), absent = w->nranks - 1;
    agmm_all_reduce_desc desc = {.n = 4093, .dtype = AGMM_DTYPE_BF16, .backend = w->backend};
    agmm_plan *plan = NULL;
    cudaStream_t s = gpu_rank_stream(rank, 0);
    w->plan_st[rank] = agmm_plan_all_reduce(&plan, ctx, &desc);
    if (w->plan_st[rank] == AGMM_SUCCESS && rank != absent) {
        agmm_all_reduce_io io = {.out = agmm_plan_input(plan)};
        cudaMemsetAsync(io.out, 0x3f, 4093 * 2, s);
        double t0 = now_s();
        agmm_status st = agmm_all_reduce(plan, &io, s);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_sync(ctx);
        w->secs[rank] = now_s() - t0;
        w->sync_st[rank] = st;
        snprintf(w->msg[rank], sizeof w->msg[rank], "%s", agmm_last_error(ctx));
        w->next_st[rank] = agmm_all_reduce(plan, &io, s);
    }
    /* The absent rank frees nothing until the others have given up on it. */
    pthread_barrier_wait(&w->bar);
    agmm_plan_destroy(plan);
    cudaStreamSynchronize(s);
    return AGMM_SUCCESS;
}

static void test_timeout(int nranks, const char *backend)
{
    const double timeout_s = 1.0;
    agmm_world *world = emulated_world(nranks, timeout_s);
    if (world == NULL)
        return;
    timeout_world *w = calloc(1, sizeof *w);
    w->nranks = nranks;
    w->backend = backend;
    pthread_barrier_init(&w->bar, NULL, (unsigned)nranks);
    agmm_world_run(world, timeout_rank, w);
    pthread_barrier_destroy(&w->bar);
    agmm_world_destroy(world);
    char want[64];
    snprintf(want, sizeof want, "waiting for rank %d", nranks - 1);
    for (int p = 0; p < nranks - 1; p++) {
        int ok = w->plan_st[p] == AGMM_SUCCESS && w->sync_st[p] == AGMM_ERR_TIMEOUT && strstr(w->msg[p], want) &&
                 w->secs[p] < 10 * timeout_s && w->next_st[p] == AGMM_ERR_TIMEOUT;
        agmm_check(ok,
                   "all_reduce/%s W=%d rank %d never runs: rank %d gets %s after %.2f s (bound %.1f s), next run %s: %s",
                   backend, nranks, nranks - 1, p, agmm_status_str(w->sync_st[p]), w->secs[p],
                   timeout_s, agmm_status_str(w->next_st[p]), w->msg[p]);
    }
    free(w);
}

/* ---- Timing (emulated) ---- */

#define POOL_ELEMS (1 << 20)
#define ROT (7919)
#define WARMUP 10
#define ITERS 50
#define SAMPLES 4096

typedef struct {
    const char *backend;
    int64_t n;
    int in_place;
    float median_us, mean_us;
    int64_t checked, bad;
    agmm_status st;
    char msg[200];
} time_row;

typedef struct {
    int nranks;
    agmm_dtype dtype;
    pthread_barrier_t bar;
    uint16_t *pool;      /* POOL_ELEMS random bf16; rank p's element i is pool[(i + p*ROT) % POOL_ELEMS] */
    time_row *rows;
    int nrows;
} time_world;

static void print_header(int nranks)
{
    printf("\nall_reduce timing, EMULATED: %d ranks share one GPU (its memory stands in for NVLink), bf16,\n"
           "median of %d per-call CUDA event times on rank 0 after %d warm-ups, no L2 flush.\n"
           "algbw = bytes/t, busbw = algbw * 2(W-1)/W (nccl-tests); hbm = bytes every rank's kernel moves\n"
           "through the one GPU's memory / t (one_shot W(W+1) x bytes, two_shot 3W x bytes).\n",
           nranks, ITERS, WARMUP);
    printf("%-9s %-7s %10s %10s %10s %10s %9s %9s %8s %s\n", "backend", "place", "n", "bytes", "median_us",
           "mean_us", "algbw", "busbw", "hbm", "check");
    fflush(stdout);
}

/* One table row, printed by rank 0 as soon as it is measured (a row that hangs shows where). */
static void print_row(int nranks, const time_row *row)
{
    if (row->st != AGMM_SUCCESS) {
        printf("%-9s %-7s %10lld FAILED: %s\n", row->backend, row->in_place ? "in" : "out",
               (long long)row->n, row->msg);
        fflush(stdout);
        return;
    }
    double bytes = (double)row->n * 2, t = row->median_us * 1e-6;
    double alg = bytes / t / 1e9, bus = alg * 2.0 * (nranks - 1) / nranks;
    double moved = strcmp(row->backend, "one_shot") == 0 ? (double)nranks * (nranks + 1) * bytes
                                                         : (double)nranks * 3.0 * bytes;
    char check[48];
    if (row->in_place)
        snprintf(check, sizeof check, "-");
    else
        snprintf(check, sizeof check, "%lld/%lld exact", (long long)(row->checked - row->bad),
                 (long long)row->checked);
    printf("%-9s %-7s %10lld %10.0f %10.2f %10.2f %9.1f %9.1f %8.1f %s\n", row->backend,
           row->in_place ? "in" : "out", (long long)row->n, bytes, row->median_us, row->mean_us, alg, bus,
           moved / t / 1e9, check);
    fflush(stdout);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Fills a device input with rank p's pattern: one copy of the rotated pool, then doublings. */
static cudaError_t fill_input(void *dev, int64_t n, const uint16_t *rot, cudaStream_t s)
{
    int64_t have = n < POOL_ELEMS ? n : POOL_ELEMS;
    cudaError_t ce = cudaMemcpyAsync(dev, rot, (size_t)have * 2, cudaMemcpyHostToDevice, s);
    while (ce == cudaSuccess && have < n) {
        int64_t more = n - have < have ? n - have : have;
        ce = cudaMemcpyAsync((uint16_t *)dev + have, dev, (size_t)more * 2, cudaMemcpyDeviceToDevice, s);
        have += more;
    }
    return ce;
}

static agmm_status time_rank(agmm_ctx *ctx, void *arg)
{
    time_world *w = arg;
    const int rank = agmm_ctx_rank(ctx), W = w->nranks;
    const int warmup = WARMUP, iters = ITERS;
    cudaStream_t s = gpu_rank_stream(rank, 0);
    cudaEvent_t ev[2 * ITERS + 2];
    uint16_t *got = malloc((SAMPLES + 1) * sizeof *got);
    for (int i = 0; i < 2 * iters + 2; i++)
        cudaEventCreate(&ev[i]);
    uint16_t *rot = malloc(POOL_ELEMS * 2);
    for (int i = 0; i < POOL_ELEMS; i++)
        rot[i] = w->pool[((int64_t)i + (int64_t)rank * ROT) % POOL_ELEMS];
    for (int r = 0; r < w->nrows; r++) {
        time_row *row = &w->rows[r];
        agmm_all_reduce_desc desc = {.n = row->n, .dtype = AGMM_DTYPE_BF16, .backend = row->backend};
        agmm_plan *plan = NULL;
        void *d_out = NULL;
        agmm_status st = agmm_plan_all_reduce(&plan, ctx, &desc);
        if (st == AGMM_SUCCESS && cudaMalloc(&d_out, (size_t)row->n * 2) != cudaSuccess)
            st = AGMM_ERR_CUDA;
        if (st == AGMM_SUCCESS && fill_input(agmm_plan_input(plan), row->n, rot, s) != cudaSuccess)
            st = AGMM_ERR_CUDA;
        agmm_all_reduce_io io = {.out = row->in_place ? agmm_plan_input(plan) : d_out};
        /* One untimed run, checked on rank 0 at up to 4096 elements (out of place only: in place
         * the input changes every run). */
        if (st == AGMM_SUCCESS)
            st = agmm_all_reduce(plan, &io, s);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_sync(ctx);
        if (st == AGMM_SUCCESS && rank == 0 && !row->in_place) {
            /* Elements k*step (a strided 2-D copy) and the last one. */
            const int64_t step = (row->n + SAMPLES - 1) / SAMPLES; /* count <= SAMPLES */
            const int64_t count = (row->n + step - 1) / step;
            if (cudaMemcpy2DAsync(got, 2, d_out, (size_t)step * 2, 2, (size_t)count, cudaMemcpyDeviceToHost, s) !=
                    cudaSuccess ||
                cudaMemcpyAsync(got + count, (uint16_t *)d_out + row->n - 1, 2, cudaMemcpyDeviceToHost, s) !=
                    cudaSuccess ||
                cudaStreamSynchronize(s) != cudaSuccess)
                st = AGMM_ERR_CUDA;
            for (int64_t k = 0; st == AGMM_SUCCESS && k <= count; k++) {
                const int64_t idx = k < count ? k * step : row->n - 1;
                float acc = 0.0f;
                for (int p = 0; p < W; p++) {
                    float f = agmm_bf16_to_f32(w->pool[(idx + (int64_t)p * ROT) % POOL_ELEMS]);
                    acc = p == 0 ? f : acc + f;
                }
                row->checked++;
                row->bad += got[k] != agmm_f32_to_bf16(acc);
            }
        }
        for (int i = 0; st == AGMM_SUCCESS && i < warmup; i++)
            st = agmm_all_reduce(plan, &io, s);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_sync(ctx);
        pthread_barrier_wait(&w->bar);
        if (rank == 0)
            cudaEventRecord(ev[2 * iters], s);
        for (int i = 0; st == AGMM_SUCCESS && i < iters; i++) {
            if (rank == 0)
                cudaEventRecord(ev[2 * i], s);
            st = agmm_all_reduce(plan, &io, s);
            if (rank == 0)
                cudaEventRecord(ev[2 * i + 1], s);
        }
        if (rank == 0)
            cudaEventRecord(ev[2 * iters + 1], s);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_sync(ctx);
        if (rank == 0) {
            row->st = st;
            if (st != AGMM_SUCCESS) {
                snprintf(row->msg, sizeof row->msg, "%s", agmm_last_error(ctx));
            } else {
                float t[ITERS], total = 0;
                cudaStreamSynchronize(s);
                for (int i = 0; i < iters; i++)
                    cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]);
                cudaEventElapsedTime(&total, ev[2 * iters], ev[2 * iters + 1]);
                qsort(t, (size_t)iters, sizeof t[0], cmp_float);
                row->median_us = 1000.0f * (t[iters / 2 - 1] + t[iters / 2]) / 2;
                row->mean_us = 1000.0f * total / (float)iters;
            }
            print_row(W, row);
        }
        pthread_barrier_wait(&w->bar);
        cudaFree(d_out);
        agmm_plan_destroy(plan);
    }
    free(rot);
    free(got);
    for (int i = 0; i < 2 * iters + 2; i++)
        cudaEventDestroy(ev[i]);
    cudaStreamSynchronize(s);
    return AGMM_SUCCESS;
}

static void time_world_size(int nranks)
{
    static const int64_t seed_sizes[] = {4093, 4096, 5000, 8192, 8193, 16384, 16380, 16387};
    int64_t sizes[64];
    int nsizes = 0;
    for (size_t i = 0; i < sizeof seed_sizes / sizeof seed_sizes[0]; i++)
        sizes[nsizes++] = seed_sizes[i];
    for (int e = 15; e <= 27; e++) /* 2^15 ... 2^20 (the seed), then up to 2^27 bf16 = 256 MB */
        sizes[nsizes++] = (int64_t)1 << e;
    const char *const backends[] = {"one_shot", "two_shot"};
    time_world w = {.nranks = nranks, .dtype = AGMM_DTYPE_BF16};
    w.rows = calloc((size_t)nsizes * 4, sizeof *w.rows);
    w.pool = malloc(POOL_ELEMS * 2);
    uint64_t st = 0xabcdef;
    for (int i = 0; i < POOL_ELEMS; i++)
        w.pool[i] = agmm_f32_to_bf16(agmm_rng_uniform(&st));
    for (int i = 0; i < nsizes; i++)
        for (int ip = 0; ip < 2; ip++)
            for (int b = 0; b < 2; b++)
                w.rows[w.nrows++] = (time_row){.backend = backends[b], .n = sizes[i], .in_place = ip};
    /* A short bound: a failed run must not eat the device call (waits queued behind it end at once). */
    agmm_world *world = emulated_world(nranks, 2.0);
    if (world) {
        print_header(nranks);
        pthread_barrier_init(&w.bar, NULL, (unsigned)nranks);
        agmm_world_run(world, time_rank, &w);
        pthread_barrier_destroy(&w.bar);
        agmm_world_destroy(world);
        for (int r = 0; r < w.nrows; r++) {
            const time_row *row = &w.rows[r];
            if (row->st != AGMM_SUCCESS || row->bad)
                agmm_check(0, "all_reduce timing %s W=%d n=%lld %s: %s, %lld of %lld sampled elements differ",
                           row->backend, nranks, (long long)row->n,
                           row->in_place ? "in place" : "out of place", agmm_status_str(row->st),
                           (long long)row->bad, (long long)row->checked);
        }
    }
    free(w.rows);
    free(w.pool);
}

void test_all_reduce_gpu(void)
{
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        agmm_skip("all_reduce GPU tests: no GPU (%s)", ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return;
    }
    /* n = 1, n < W, odd sizes around vector (8 bf16 / 4 fp32) and block boundaries, the seed's. */
    static const int64_t small[] = {1, 2, 3, 5, 7, 8, 9, 17, 4093, 4096, 5000, 8193, 16380, 16387, 65537};
    const int nsmall = (int)(sizeof small / sizeof small[0]);
    /* Larger: many vectors per thread; one_shot in place goes through its staging buffer. */
    static const int64_t big8[] = {1048583};
    static const int64_t big2[] = {1048583, 4194311};
    static const int64_t big4[] = {8388611};
    int64_t ns[32];
    const int worlds[] = {1, 2, 3, 4, 5, 8};
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
        int W = worlds[i], nns = 0;
        for (int j = 0; j < nsmall; j++)
            ns[nns++] = small[j];
        const int64_t *big = W == 8 ? big8 : W == 2 ? big2 : W == 4 ? big4 : big8;
        int nbig = W == 2 ? 2 : 1;
        for (int j = 0; j < nbig; j++)
            ns[nns++] = big[j];
        printf("== all_reduce correctness, emulated world of %d rank%s\n", W, W > 1 ? "s" : "");
        test_correctness(W, ns, nns);
    }
    printf("== all_reduce timeout: one rank never runs\n");
    test_timeout(3, "one_shot");
    test_timeout(3, "two_shot");

    const char *t = getenv("AGMM_AR_TIME");
    if (t && *t) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", t);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            int W = atoi(tok);
            if (W >= 1 && W <= AGMM_MAX_RANKS)
                time_world_size(W);
        }
    }
}
