/* GPU tests of all_reduce_rmsnorm: every backend of the library's table that a world offers, at
 * W = 1 (a GPU world: nccl too) and in emulated worlds of 2, 3 and 4 ranks sharing this GPU (the
 * fused backends), the checks of tests/arn_check.h on every run: r' and y against the fp64
 * reference, and bit for bit against the host's emulation of the kernels' fp32 order (so the GPU
 * and the CPU world agree, and one_shot with two_shot), every rank equal, outputs poisoned first.
 *
 *   ar_norm_gpu       correctness: T = 1, < W, not divisible by W, 128; H = 8 to 8200 (rows a
 *                     thread holds in registers, and longer ones it re-reads); with and without
 *                     bias and residual; in place; x from the caller's symmetric memory.
 *   ar_norm_graph     two runs (two input slots, two sets of outputs) captured in one CUDA graph,
 *                     replayed 20 times with fresh inputs, both runs checked after every replay:
 *                     an epoch or flag frozen at capture fails it (wrong rows, NaN, or a timeout).
 *   ar_norm_timeout   in an emulated world of 3 with a 1 s bound, rank 2 never runs: ranks 0 and
 *                     1 get AGMM_ERR_TIMEOUT naming it from agmm_ctx_sync, and again next run. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "../arn_check.h"
#include "api/agmm_ext.h"
#include "gpu_tests.h"
#include "world/world.h"
#include "../harness.h"

#define MAX_BACKENDS 4
#define MAX_CASES 16
#define RUNS 2

/* ---- the rank's device memory for arn_check ---- */

static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}

static void cuda_release(void *p) { cudaFree(p); }

static int cuda_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess;
}

/* The backends of the op `w` runs, in table order. */
static int world_backends(const agmm_world *w, const char **out)
{
    int n = 0;
    for (int i = 0; agmm_backend_name(AGMM_OP_ALL_REDUCE_RMSNORM, i) != NULL && n < MAX_BACKENDS; i++)
        if (agmm_backend_available(w, AGMM_OP_ALL_REDUCE_RMSNORM, agmm_backend_name(AGMM_OP_ALL_REDUCE_RMSNORM, i),
                                   NULL, 0))
            out[n++] = agmm_backend_name(AGMM_OP_ALL_REDUCE_RMSNORM, i);
    return n;
}

static agmm_world *make_world(int nranks, double timeout_s)
{
    return gpu_test_world(nranks == 1 ? AGMM_WORLD_GPU : AGMM_WORLD_EMULATED, nranks, timeout_s);
}

/* ---- correctness ---- */

typedef struct {
    int nranks, ncases, nb;
    arn_case cases[MAX_CASES];
    const char *backends[MAX_BACKENDS];
    arn_result res[MAX_CASES][MAX_BACKENDS][AGMM_MAX_RANKS];
} arn_job;

static agmm_status correctness_rank(agmm_ctx *ctx, void *arg)
{
    arn_job *job = arg;
    const int rank = agmm_ctx_rank(ctx);
    cudaStream_t s = gpu_rank_stream(rank, 0);
    if (s == NULL)
        return AGMM_ERR_CUDA;
    const arn_dev dev = {cuda_alloc, cuda_release, cuda_copy, s};
    for (int c = 0; c < job->ncases; c++)
        for (int b = 0; b < job->nb; b++)
            arn_check_run(ctx, job->backends[b], &job->cases[c], &dev, RUNS,
                          0x9e3779b9ull * (uint64_t)(c + 1) + (uint64_t)job->nranks, &job->res[c][b][rank]);
    cudaStreamSynchronize(s);
    return AGMM_SUCCESS;
}

static int gpu_cases(int w, arn_case *out)
{
    int n = 0;
    out[n++] = (arn_case){1, 4096, 1e-6, 1, 1, 0, 0, 1};
    out[n++] = (arn_case){1, 8192, 1e-6, 0, 1, 1, 0, 0};
    out[n++] = (arn_case){3 * w + 1, 8192, 1e-5, 1, 1, 0, 0, 1};
    out[n++] = (arn_case){128, 4096, 1e-6, 1, 1, 1, 1, 0};
    out[n++] = (arn_case){7, 8200, 1e-6, 1, 1, 0, 0, 1};
    out[n++] = (arn_case){5, 8, 1e-2, 1, 0, 0, 0, 1};
    out[n++] = (arn_case){33, 2056, 1e-6, 0, 0, 0, 1, 1};
    out[n++] = (arn_case){300, 1024, 1e-6, 0, 1, 0, 0, 0};
    if (w > 1)
        out[n++] = (arn_case){w - 1, 264, 1e-5, 1, 1, 0, 0, 1};
    return n;
}

/* small: two cases only (the sanitizer's subset), a few rows each. */
static void correctness(int w, int small)
{
    agmm_world *world = make_world(w, 0);
    if (world == NULL)
        return;
    arn_job *job = calloc(1, sizeof *job);
    job->nranks = w;
    job->ncases = gpu_cases(w, job->cases);
    if (small) {
        job->cases[0] = (arn_case){2 * w + 1, 264, 1e-5, 1, 1, 0, 0, 1};
        job->cases[1] = (arn_case){1, 8200, 1e-6, 0, 1, 1, 1, 0};
        job->ncases = 2;
    }
    job->nb = world_backends(world, job->backends);
    agmm_check(job->nb == (w == 1 ? 3 : 2), "all_reduce_rmsnorm W=%d: %d backends run here (want %s)", w, job->nb,
               w == 1 ? "nccl, one_shot, two_shot" : "one_shot, two_shot: nccl needs a GPU per rank");
    agmm_status st = agmm_world_run(world, correctness_rank, job);
    agmm_world_destroy(world);
    for (int c = 0; c < job->ncases; c++) {
        char name[128];
        arn_case_name(&job->cases[c], name, sizeof name);
        int fused = -1;
        for (int b = 0; b < job->nb; b++) {
            const char *bk = job->backends[b];
            int ok = st == AGMM_SUCCESS, same = 1, like = 1;
            const char *msg = st == AGMM_SUCCESS ? "" : agmm_status_str(st);
            double r_err = 0, y_err = 0;
            for (int r = 0; r < w; r++) {
                const arn_result *rr = &job->res[c][b][r];
                if (rr->runs != RUNS && ok) {
                    ok = 0;
                    msg = rr->msg;
                }
                r_err = fmax(r_err, rr->r_err);
                y_err = fmax(y_err, rr->y_err);
                for (int k = 0; k < RUNS; k++)
                    same &= rr->hash[k] == job->res[c][b][0].hash[k];
            }
            if (strcmp(bk, "nccl") != 0) {
                fused = fused < 0 ? b : fused;
                for (int k = 0; k < RUNS; k++)
                    like &= job->res[c][b][0].hash[k] == job->res[c][fused][0].hash[k];
            }
            agmm_check(ok && same && like,
                       "all_reduce_rmsnorm/%s W=%d %s: %s on every rank (rel err r' %.1e, y %.1e); ranks %s%s (%d "
                       "runs)%s%s",
                       bk, w, name,
                       arn_expect_for(bk, 1, w) == ARN_EXPECT_REFERENCE ? "within tolerance of fp64"
                                                                        : "bitwise equal to the host's fp32 order",
                       r_err, y_err, same ? "bitwise equal" : "DIFFER",
                       fused >= 0 && b != fused ? like ? ", equal to one_shot" : ", NOT equal to one_shot" : "", RUNS,
                       msg[0] ? ": " : "", msg);
        }
    }
    free(job);
}

/* ---- CUDA graphs ---- */

#define SLOTS 2
#define REPLAYS 20

typedef struct {
    const char *backend;
    arn_case c;
    gpu_rank_results res;
} graph_job;

/* Every rank's ok, agreed (a host exchange: also the ranks' meeting). */
static int agree_ok(agmm_ctx *ctx, int ok)
{
    int32_t mine = ok, all[AGMM_MAX_RANKS];
    if (agmm_ext_exchange(ctx, &mine, sizeof mine, all) != AGMM_SUCCESS)
        return 0;
    for (int r = 0; r < agmm_ctx_info(ctx)->nranks; r++)
        ok &= all[r] != 0;
    return ok;
}

/* One slot's device buffers. */
typedef struct {
    void *y, *r_out, *gamma, *bias, *residual;
} slot_bufs;

static agmm_status graph_rank(agmm_ctx *ctx, void *arg)
{
    graph_job *j = arg;
    const int rank = agmm_ctx_rank(ctx), W = agmm_ctx_info(ctx)->nranks;
    const arn_case *c = &j->c;
    const size_t rows = (size_t)(c->tokens * c->hidden) * 2, row = (size_t)c->hidden * 2;
    const size_t stride = (rows + 255) / 256 * 256;
    j->res.ok[rank] = 1;
    cudaStream_t s = gpu_rank_stream(rank, 0);
    cudaGraphExec_t exec = NULL;
    arn_data d[SLOTS];
    slot_bufs b[SLOTS];
    memset(d, 0, sizeof d);
    memset(b, 0, sizeof b);
    int ok = s != NULL;
    for (int k = 0; k < SLOTS; k++)
        ok &= arn_data_init(&d[k], c, W, rank, arn_expect_for(j->backend, 1, W)) == 0;
    if (!ok)
        gpu_rank_fail(&j->res, rank, "stream or host memory");
    /* Collective: the plan and the slots' inputs, whatever failed. */
    agmm_all_reduce_rmsnorm_desc desc = {.tokens = c->tokens, .hidden = c->hidden, .eps = c->eps,
                                         .backend = j->backend};
    agmm_plan *plan = NULL;
    void *sym = NULL;
    if (agmm_plan_all_reduce_rmsnorm(&plan, ctx, &desc) != AGMM_SUCCESS)
        ok = gpu_rank_fail(&j->res, rank, "plan: %s", agmm_last_error(ctx));
    if (agmm_symmetric_alloc(ctx, SLOTS * stride, &sym) != AGMM_SUCCESS)
        ok = gpu_rank_fail(&j->res, rank, "agmm_symmetric_alloc: %s", agmm_last_error(ctx));
    unsigned char *poison = malloc(rows);
    for (int k = 0; k < SLOTS && ok; k++) {
        b[k].y = cuda_alloc(rows);
        b[k].gamma = cuda_alloc(row);
        b[k].bias = c->bias ? cuda_alloc(row) : NULL;
        b[k].residual = c->residual ? cuda_alloc(rows) : NULL;
        b[k].r_out = c->in_place ? b[k].residual : cuda_alloc(rows);
        if (!b[k].y || !b[k].gamma || (c->bias && !b[k].bias) || (c->residual && !b[k].residual) || !b[k].r_out ||
            !poison)
            ok = gpu_rank_fail(&j->res, rank, "device memory");
    }
    if (poison)
        memset(poison, 0xff, rows);
    /* Capture both runs: slot k reads its own x (io.input) and writes its own outputs. */
    if (agree_ok(ctx, ok)) {
        cudaGraph_t graph = NULL;
        cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        for (int k = 0; k < SLOTS && e == cudaSuccess && ok; k++) {
            agmm_all_reduce_rmsnorm_io io = {.y = b[k].y, .residual_out = b[k].r_out, .gamma = b[k].gamma,
                                             .bias = b[k].bias, .residual = b[k].residual,
                                             .input = (char *)sym + (size_t)k * stride};
            if (agmm_all_reduce_rmsnorm(plan, &io, s) != AGMM_SUCCESS)
                ok = gpu_rank_fail(&j->res, rank, "captured run %d: %s", k, agmm_last_error(ctx));
        }
        cudaError_t end = e == cudaSuccess ? cudaStreamEndCapture(s, &graph) : e;
        if (ok && end == cudaSuccess)
            end = cudaGraphInstantiate(&exec, graph, 0);
        if (graph)
            cudaGraphDestroy(graph);
        if (ok && end != cudaSuccess)
            ok = gpu_rank_fail(&j->res, rank, "capture: %s", cudaGetErrorString(end));
    } else {
        ok = 0;
    }
    /* Instantiation may synchronise the device: nobody replays before everyone has a graph. */
    ok = agree_ok(ctx, ok);
    for (int rep = 0; rep < REPLAYS && ok; rep++) {
        for (int k = 0; k < SLOTS && ok; k++) {
            arn_data_fill(&d[k], 0x5107ull + (uint64_t)rep * 977u + (uint64_t)k * 31u);
            if (cuda_copy((char *)sym + (size_t)k * stride, arn_data_mine(&d[k]), rows, s) ||
                cuda_copy(b[k].gamma, d[k].gamma, row, s) || (c->bias && cuda_copy(b[k].bias, d[k].bias, row, s)) ||
                (c->residual && cuda_copy(b[k].residual, d[k].residual, rows, s)) ||
                cuda_copy(b[k].y, poison, rows, s) || (!c->in_place && cuda_copy(b[k].r_out, poison, rows, s)))
                ok = gpu_rank_fail(&j->res, rank, "replay %d: upload", rep);
        }
        if (!agree_ok(ctx, ok)) {
            ok = gpu_rank_fail(&j->res, rank, "a peer failed first");
            break;
        }
        cudaError_t e = cudaGraphLaunch(exec, s);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s);
        agmm_status st = e == cudaSuccess ? agmm_ctx_sync(ctx) : AGMM_ERR_CUDA;
        if (st != AGMM_SUCCESS)
            ok = gpu_rank_fail(&j->res, rank, "replay %d: %s %s", rep, cudaGetErrorString(e), agmm_last_error(ctx));
        for (int k = 0; k < SLOTS && ok; k++) {
            char why[300];
            double r_err, y_err;
            if (cuda_copy(d[k].y_got, b[k].y, rows, s) || cuda_copy(d[k].r_got, b[k].r_out, rows, s))
                ok = gpu_rank_fail(&j->res, rank, "replay %d: download", rep);
            else if (arn_data_check(&d[k], &r_err, &y_err, why, sizeof why) != NULL)
                ok = gpu_rank_fail(&j->res, rank, "replay %d, run %d of the graph: %s", rep, k, why);
        }
        ok = agree_ok(ctx, ok);
    }
    if (s)
        cudaStreamSynchronize(s);
    if (exec)
        cudaGraphExecDestroy(exec);
    for (int k = 0; k < SLOTS; k++) {
        cudaFree(b[k].y);
        cudaFree(b[k].gamma);
        cudaFree(b[k].bias);
        cudaFree(b[k].residual);
        if (!c->in_place)
            cudaFree(b[k].r_out);
        arn_data_fini(&d[k]);
    }
    free(poison);
    agmm_symmetric_free(ctx, sym);
    agmm_plan_destroy(plan);
    if (!ok && j->res.msg[rank][0] == '\0')
        gpu_rank_fail(&j->res, rank, "a peer failed first");
    j->res.ok[rank] = ok;
    return AGMM_SUCCESS;
}

static void graphs(int w)
{
    agmm_world *world = make_world(w, 0);
    if (world == NULL)
        return;
    const char *backends[MAX_BACKENDS];
    const int nb = world_backends(world, backends);
    for (int bi = 0; bi < nb; bi++) {
        graph_job *j = calloc(1, sizeof *j);
        j->backend = backends[bi];
        j->c = (arn_case){2 * w + 1, 4096, 1e-6, 1, 1, 1, 1, 1};
        char name[128], what[300];
        snprintf(what, sizeof what, "all_reduce_rmsnorm/%s W=%d %s: %d runs captured in one graph, %d replays with "
                 "fresh inputs, every run bitwise right on every rank", backends[bi], w,
                 arn_case_name(&j->c, name, sizeof name), SLOTS, REPLAYS);
        gpu_report_job(agmm_world_run(world, graph_rank, j), &j->res, w, what);
        free(j);
    }
    agmm_world_destroy(world);
}

/* ---- a rank that never runs ---- */

typedef struct {
    int nranks;
    const char *backend;
    pthread_barrier_t bar;
    agmm_status plan_st[AGMM_MAX_RANKS], sync_st[AGMM_MAX_RANKS], next_st[AGMM_MAX_RANKS];
    double secs[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][512];
} timeout_job;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static agmm_status timeout_rank(agmm_ctx *ctx, void *arg)
{
    timeout_job *w = arg;
    const int rank = agmm_ctx_rank(ctx), absent = w->nranks - 1;
    agmm_all_reduce_rmsnorm_desc desc = {.tokens = 9, .hidden = 4096, .eps = 1e-6, .backend = w->backend};
    agmm_plan *plan = NULL;
    cudaStream_t s = gpu_rank_stream(rank, 0);
    void *buf = NULL;
    w->plan_st[rank] = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &desc);
    if (cudaMalloc(&buf, 3 * 9 * 4096 * 2) != cudaSuccess)
        w->plan_st[rank] = AGMM_ERR_CUDA;
    pthread_barrier_wait(&w->bar); /* every allocation is done before anyone spins */
    if (w->plan_st[rank] == AGMM_SUCCESS && rank != absent) {
        agmm_all_reduce_rmsnorm_io io = {.y = buf, .residual_out = (char *)buf + 9 * 4096 * 2,
                                         .gamma = (char *)buf + 2 * 9 * 4096 * 2};
        double t0 = now_s();
        agmm_status st = agmm_all_reduce_rmsnorm(plan, &io, s);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_sync(ctx);
        w->secs[rank] = now_s() - t0;
        w->sync_st[rank] = st;
        snprintf(w->msg[rank], sizeof w->msg[rank], "%s", agmm_last_error(ctx));
        w->next_st[rank] = agmm_all_reduce_rmsnorm(plan, &io, s);
    }
    /* The absent rank frees nothing until the others have given up on it. */
    pthread_barrier_wait(&w->bar);
    cudaStreamSynchronize(s);
    cudaFree(buf);
    agmm_plan_destroy(plan);
    return AGMM_SUCCESS;
}

static void timeout_case(const char *backend)
{
    const double timeout_s = 1.0;
    const int nranks = 3;
    agmm_world *world = make_world(nranks, timeout_s);
    if (world == NULL)
        return;
    timeout_job *w = calloc(1, sizeof *w);
    w->nranks = nranks;
    w->backend = backend;
    pthread_barrier_init(&w->bar, NULL, (unsigned)nranks);
    agmm_world_run(world, timeout_rank, w);
    pthread_barrier_destroy(&w->bar);
    agmm_world_destroy(world);
    for (int p = 0; p < nranks - 1; p++) {
        int ok = w->plan_st[p] == AGMM_SUCCESS && w->sync_st[p] == AGMM_ERR_TIMEOUT &&
                 strstr(w->msg[p], "waiting for rank 2") && w->secs[p] < 10 * timeout_s &&
                 w->next_st[p] == AGMM_ERR_TIMEOUT;
        agmm_check(ok, "all_reduce_rmsnorm/%s W=3 rank 2 never runs: rank %d gets %s after %.2f s (bound %.1f s), "
                   "next run %s: %s", backend, p, agmm_status_str(w->sync_st[p]), w->secs[p], timeout_s,
                   agmm_status_str(w->next_st[p]), w->msg[p]);
    }
    free(w);
}

void test_ar_norm_gpu(void)
{
    for (int w = 1; w <= 4; w++) {
        printf("== all_reduce_rmsnorm correctness, %s world of %d rank%s\n", w == 1 ? "GPU" : "emulated", w,
               w > 1 ? "s" : "");
        correctness(w, 0);
    }
}

void test_ar_norm_small(int nranks) { correctness(nranks, 1); }

void test_ar_norm_graph(void)
{
    const int worlds[] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        graphs(worlds[i]);
}

void test_ar_norm_timeout(void)
{
    timeout_case("one_shot");
    timeout_case("two_shot");
}
