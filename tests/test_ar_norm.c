/* all_reduce_rmsnorm in the CPU world: every backend of the table the CPU world runs, W = 1..8
 * threads, T divisible by W and not (T < W too), with and without bias and residual, residual
 * updated in place, x read from the caller's symmetric memory; the descriptor's and the io's
 * checks; a rank that never runs; auto, static and measured; AGMM_FAULT at the run point. The checks themselves (fp64 reference, the kernels' fp32
 * order bit for bit, poisoned outputs) are arn_check.c's; here every rank must also give the
 * same bits, and one_shot and two_shot the same bits as each other. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "api/tune.h"
#include "arn_check.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/rmsnorm.h"
#include "cpu_tests.h"
#include "harness.h"

#define RUNS 2
#define MAX_CASES 16
#define MAX_BACKENDS 4

/* ---- the epilogue's arithmetic (core/rmsnorm.c) ---- */

void test_arn_numerics(void)
{
    /* A row of H = 8 * 256 * 2 + 24: lanes 0..2 hold three vectors, the others two. */
    const int64_t h = 8 * 256 * 2 + 24;
    uint16_t *r = malloc((size_t)h * 2);
    uint64_t seed = 0x7a11;
    double exact = 0.0;
    for (int64_t i = 0; i < h; i++) {
        r[i] = agmm_f32_to_bf16(4.0f * agmm_rng_uniform(&seed));
        exact += (double)agmm_bf16_to_f32(r[i]) * agmm_bf16_to_f32(r[i]);
    }
    const float ss = agmm_rmsnorm_sumsq(r, h);
    const double rel = fabs(ss - exact) / exact;
    agmm_check(rel < 1e-5, "rmsnorm: fp32 sum of squares of %lld values in the kernels' order: %.9g vs fp64 %.9g "
               "(rel %.1e < 1e-5)", (long long)h, (double)ss, exact, rel);
    /* Ones: ss = H exactly, rstd = 1 / sqrt(1 + eps). */
    for (int64_t i = 0; i < h; i++)
        r[i] = agmm_f32_to_bf16(1.0f);
    const float rstd = agmm_rmsnorm_rstd(agmm_rmsnorm_sumsq(r, h), h, 0.25f);
    agmm_check(agmm_rmsnorm_sumsq(r, h) == (float)h && rstd == 1.0f / sqrtf(1.25f),
               "rmsnorm: a row of ones sums to H=%lld exactly, rstd = 1/sqrt(1 + eps) = %.9g", (long long)h,
               (double)rstd);
    free(r);
}

/* ---- every CPU backend, W = 1..8 ---- */

typedef struct {
    int nranks, ncases, nb;
    arn_case cases[MAX_CASES];
    const char *backends[MAX_BACKENDS];
    arn_result res[MAX_CASES][MAX_BACKENDS][AGMM_MAX_RANKS];
} arn_job;

static agmm_status arn_rank(agmm_ctx *ctx, void *arg)
{
    arn_job *job = arg;
    const int rank = agmm_ctx_rank(ctx);
    for (int c = 0; c < job->ncases; c++)
        for (int b = 0; b < job->nb; b++)
            arn_check_run(ctx, job->backends[b], &job->cases[c], &arn_dev_host, RUNS,
                          0xa77e0000ull + (uint64_t)(c * 131 + job->nranks), &job->res[c][b][rank]);
    return AGMM_SUCCESS;
}

/* The cases at W ranks: T = 1, W - 1 (< W: ranks without rows in two_shot), 3W + 1 (not divisible),
 * 4W (divisible); H from one vector to rows whose lanes hold different numbers of vectors. */
static int arn_cases(int w, arn_case *out)
{
    int n = 0;
    const double eps = 1e-5;
    out[n++] = (arn_case){1, 8, eps, 1, 1, 0, 0, 1};
    out[n++] = (arn_case){3 * w + 1, 264, eps, 1, 1, 0, 0, 1};
    out[n++] = (arn_case){4 * w, 2056, 1e-6, 0, 0, 0, 0, 1};
    out[n++] = (arn_case){3 * w + 1, 72, eps, 1, 0, 0, 0, 1};
    out[n++] = (arn_case){5, 264, eps, 0, 1, 1, 0, 1};
    out[n++] = (arn_case){7, 4104, 1e-6, 1, 1, 1, 1, 0};
    out[n++] = (arn_case){2 * w + 3, 1024, 1e-2, 1, 1, 0, 1, 0};
    if (w > 1)
        out[n++] = (arn_case){w - 1, 16, eps, 0, 1, 0, 0, 1};
    return n;
}

static void run_world(int w)
{
    arn_job *job = calloc(1, sizeof *job);
    job->nranks = w;
    job->ncases = arn_cases(w, job->cases);
    agmm_world *world = test_cpu_world(w, 0);
    if (world == NULL) {
        free(job);
        return;
    }
    for (int i = 0; agmm_backend_name(AGMM_OP_ALL_REDUCE_RMSNORM, i) != NULL && job->nb < MAX_BACKENDS; i++)
        if (agmm_backend_available(world, AGMM_OP_ALL_REDUCE_RMSNORM, agmm_backend_name(AGMM_OP_ALL_REDUCE_RMSNORM, i),
                                   NULL, 0))
            job->backends[job->nb++] = agmm_backend_name(AGMM_OP_ALL_REDUCE_RMSNORM, i);
    agmm_check(job->nb == 3, "all_reduce_rmsnorm: the CPU world runs %d backends of the table (want nccl, one_shot, "
               "two_shot)", job->nb);
    agmm_status st = agmm_world_run(world, arn_rank, job);
    agmm_world_destroy(world);
    int fused = -1; /* the first fused backend: the others must equal it */
    for (int c = 0; c < job->ncases; c++) {
        char name[128];
        arn_case_name(&job->cases[c], name, sizeof name);
        for (int b = 0; b < job->nb; b++) {
            const char *bk = job->backends[b];
            int ok = st == AGMM_SUCCESS, same = 1, like_fused = 1;
            const char *msg = "";
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
                if (fused < 0)
                    fused = b;
                for (int k = 0; k < RUNS; k++)
                    like_fused &= job->res[c][b][0].hash[k] == job->res[c][fused][0].hash[k];
            }
            agmm_check(ok && same && like_fused,
                       "all_reduce_rmsnorm/%s W=%d %s: right on every rank (rel err r' %.1e, y %.1e), ranks %s%s "
                       "(%d runs)%s%s",
                       bk, w, name, r_err, y_err, same ? "bitwise equal" : "DIFFER",
                       strcmp(bk, "nccl") != 0 && b != fused ? like_fused ? ", bitwise equal to the first fused backend"
                                                                          : ", NOT equal to the first fused backend"
                                                             : "",
                       RUNS, msg[0] ? ": " : "", msg);
        }
    }
    free(job);
}

void test_arn_cpu_backends(void)
{
    for (int w = 1; w <= 8; w++)
        run_world(w);
}

/* ---- bad descriptors and io ---- */

typedef struct {
    const char *what;
    agmm_all_reduce_rmsnorm_desc d;
    agmm_status want;
    const char *says;          /* in the message */
} desc_case;

typedef struct {
    int nio;
    agmm_status st[16];
    char msg[16][AGMM_ERROR_LEN];
    agmm_status plan_st;
    char plan_msg[AGMM_ERROR_LEN];
    agmm_status wrong_op_st;
    char wrong_op_msg[AGMM_ERROR_LEN];
} io_job;

static agmm_status io_rank(agmm_ctx *ctx, void *arg)
{
    io_job *job = arg;
    agmm_all_reduce_rmsnorm_desc d = {.tokens = 4, .hidden = 16, .eps = 1e-6, .backend = "one_shot"};
    agmm_plan *plan = NULL, *ar = NULL;
    job->plan_st = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &d);
    snprintf(job->plan_msg, sizeof job->plan_msg, "%s", agmm_last_error(ctx));
    if (job->plan_st != AGMM_SUCCESS)
        return AGMM_SUCCESS;
    /* Buffers two rows' worth apart, so that each overlap below touches one other buffer only. */
    enum { ROWS = 4 * 16 };
    static uint16_t buf[8 * ROWS];
    for (int i = 0; i < 8 * ROWS; i++)
        buf[i] = agmm_f32_to_bf16(1.0f);
    uint16_t *y = buf, *r_out = buf + 2 * ROWS, *gamma = buf + 4 * ROWS, *res = buf + 6 * ROWS;
    uint16_t *in = agmm_plan_input(plan);
    for (int i = 0; i < ROWS; i++)
        in[i] = agmm_f32_to_bf16(1.0f);
    const agmm_all_reduce_rmsnorm_io good = {.y = y, .residual_out = r_out, .gamma = gamma, .residual = res};
    agmm_all_reduce_rmsnorm_io ios[16];
    int n = 0;
    ios[n++] = good;                                          /* 0: right */
    ios[n] = good, ios[n++].residual_out = res;               /* 1: in place: right */
    ios[n] = good, ios[n++].y = NULL;                         /* 2 */
    ios[n] = good, ios[n++].gamma = NULL;                     /* 3 */
    ios[n] = good, ios[n++].y = (char *)y + 1;                /* 4: misaligned */
    ios[n] = good, ios[n++].y = in + 8;                       /* 5: y over the input */
    ios[n] = good, ios[n++].residual_out = res + 8;           /* 6: overlapping residual, not equal */
    ios[n] = good, ios[n++].y = r_out + 8;                    /* 7: y over residual_out */
    ios[n] = good, ios[n++].reserved[1] = y;                  /* 8: reserved */
    ios[n] = good, ios[n++].bias = y;                         /* 9: y over bias */
    job->nio = n;
    for (int i = 0; i < n; i++) {
        job->st[i] = agmm_all_reduce_rmsnorm(plan, &ios[i], NULL);
        snprintf(job->msg[i], sizeof job->msg[i], "%s", agmm_last_error(ctx));
    }
    agmm_all_reduce_desc ad = {.n = 8, .dtype = AGMM_DTYPE_BF16, .backend = "one_shot"};
    if (agmm_plan_all_reduce(&ar, ctx, &ad) == AGMM_SUCCESS) {
        job->wrong_op_st = agmm_all_reduce_rmsnorm(ar, &good, NULL);
        snprintf(job->wrong_op_msg, sizeof job->wrong_op_msg, "%s", agmm_last_error(ctx));
    }
    agmm_plan_destroy(ar);
    agmm_plan_destroy(plan);
    return AGMM_SUCCESS;
}

typedef struct {
    const desc_case *cases;
    int n;
    agmm_status st[2][32];              /* per rank */
    char msg[2][32][AGMM_ERROR_LEN];
} desc_job;

static agmm_status desc_rank(agmm_ctx *ctx, void *arg)
{
    desc_job *job = arg;
    const int rank = agmm_ctx_rank(ctx);
    for (int i = 0; i < job->n; i++) {
        agmm_plan *plan = NULL;
        job->st[rank][i] = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &job->cases[i].d);
        snprintf(job->msg[rank][i], sizeof job->msg[rank][i], "%s", agmm_last_error(ctx));
        agmm_plan_destroy(plan);
    }
    return AGMM_SUCCESS;
}

void test_arn_validate(void)
{
    static const desc_case cases[] = {
        {"H not a multiple of 8", {.tokens = 4, .hidden = 100, .eps = 1e-6, .backend = "nccl"}, AGMM_ERR_INVALID_ARG,
         "hidden=100 is not a multiple of 8"},
        {"H = 4", {.tokens = 4, .hidden = 4, .eps = 1e-6, .backend = "nccl"}, AGMM_ERR_INVALID_ARG, "hidden=4"},
        {"H = 0", {.tokens = 4, .hidden = 0, .eps = 1e-6, .backend = "nccl"}, AGMM_ERR_INVALID_ARG, "hidden=0"},
        {"T = 0", {.tokens = 0, .hidden = 8, .eps = 1e-6, .backend = "nccl"}, AGMM_ERR_INVALID_ARG, "tokens=0"},
        {"eps = 0", {.tokens = 4, .hidden = 8, .eps = 0, .backend = "nccl"}, AGMM_ERR_INVALID_ARG, "eps=0: must be > 0"},
        {"eps < 0", {.tokens = 4, .hidden = 8, .eps = -1e-6, .backend = "nccl"}, AGMM_ERR_INVALID_ARG, "eps=-1e-06"},
        {"eps NaN", {.tokens = 4, .hidden = 8, .eps = NAN, .backend = "nccl"}, AGMM_ERR_INVALID_ARG, "eps=nan"},
        {"eps inf", {.tokens = 4, .hidden = 8, .eps = INFINITY, .backend = "nccl"}, AGMM_ERR_INVALID_ARG, "eps=inf"},
        {"eps 0 in fp32", {.tokens = 4, .hidden = 8, .eps = 1e-50, .backend = "nccl"}, AGMM_ERR_INVALID_ARG,
         "stay so as fp32"},
        {"eps inf in fp32", {.tokens = 4, .hidden = 8, .eps = 1e39, .backend = "nccl"}, AGMM_ERR_INVALID_ARG,
         "eps=1e+39"},
        {"T x H past 2^40", {.tokens = (int64_t)1 << 30, .hidden = 1 << 12, .eps = 1e-6, .backend = "nccl"},
         AGMM_ERR_INVALID_ARG, "exceeds 2^40"},
        {"reserved", {.tokens = 4, .hidden = 8, .eps = 1e-6, .backend = "nccl", .reserved = {0, 1}},
         AGMM_ERR_INVALID_ARG, "reserved tail"},
        {"unknown backend", {.tokens = 4, .hidden = 8, .eps = 1e-6, .backend = "ce"}, AGMM_ERR_INVALID_ARG,
         "all_reduce_rmsnorm takes auto, nccl, one_shot or two_shot"},
    };
    static desc_job dj;
    dj = (desc_job){.cases = cases, .n = (int)(sizeof cases / sizeof cases[0])};
    agmm_world *world = test_cpu_world(2, 0);
    if (world == NULL)
        return;
    agmm_world_run(world, desc_rank, &dj);
    for (int i = 0; i < dj.n; i++)
        agmm_check(dj.st[0][i] == cases[i].want && strstr(dj.msg[0][i], cases[i].says) != NULL &&
                       dj.st[1][i] == cases[i].want && strstr(dj.msg[1][i], cases[i].says) != NULL,
                   "all_reduce_rmsnorm desc, %s: %s on both ranks (want %s) \"%s\"", cases[i].what,
                   agmm_status_str(dj.st[0][i]), agmm_status_str(cases[i].want), dj.msg[0][i]);
    agmm_world_destroy(world);

    io_job *job = calloc(1, sizeof *job);
    world = test_cpu_world(1, 0);
    if (world == NULL) {
        free(job);
        return;
    }
    agmm_world_run(world, io_rank, job);
    agmm_world_destroy(world);
    static const struct {
        agmm_status want;
        const char *says;
        const char *what;
    } want[] = {
        {AGMM_SUCCESS, "", "a right io"},
        {AGMM_SUCCESS, "", "residual_out == residual (in place)"},
        {AGMM_ERR_INVALID_ARG, "needs io->y, io->residual_out and io->gamma", "y NULL"},
        {AGMM_ERR_INVALID_ARG, "needs io->y, io->residual_out and io->gamma", "gamma NULL"},
        {AGMM_ERR_INVALID_ARG, "must be 2-byte aligned", "y misaligned"},
        {AGMM_ERR_INVALID_ARG, "overlaps the run's input", "y over the input"},
        {AGMM_ERR_INVALID_ARG, "without equalling it", "residual_out overlapping residual"},
        {AGMM_ERR_INVALID_ARG, "overlaps io->residual_out", "y over residual_out"},
        {AGMM_ERR_INVALID_ARG, "reserved tail", "a reserved pointer set"},
        {AGMM_ERR_INVALID_ARG, "overlaps io->bias", "y over bias"},
    };
    agmm_check(job->plan_st == AGMM_SUCCESS && job->nio == (int)(sizeof want / sizeof want[0]),
               "all_reduce_rmsnorm io checks: a plan (%s) and %d io cases", job->plan_msg, job->nio);
    for (int i = 0; i < job->nio && i < (int)(sizeof want / sizeof want[0]); i++)
        agmm_check(job->st[i] == want[i].want && strstr(job->msg[i], want[i].says) != NULL,
                   "all_reduce_rmsnorm io, %s: %s (want %s) \"%s\"", want[i].what, agmm_status_str(job->st[i]),
                   agmm_status_str(want[i].want), job->msg[i]);
    agmm_check(job->wrong_op_st == AGMM_ERR_INVALID_ARG && strstr(job->wrong_op_msg, "plan is for all_reduce"),
               "agmm_all_reduce_rmsnorm on an all_reduce plan: %s \"%s\"", agmm_status_str(job->wrong_op_st),
               job->wrong_op_msg);
    free(job);
}

/* ---- a rank that never runs ---- */

#define TIMEOUT_S 0.3

typedef struct {
    const char *backend;
    int nranks;
    pthread_barrier_t done;
    agmm_status st[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][AGMM_ERROR_LEN];
    double secs[AGMM_MAX_RANKS];
} gone_job;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static agmm_status gone_rank(agmm_ctx *ctx, void *arg)
{
    gone_job *job = arg;
    const int rank = agmm_ctx_rank(ctx);
    agmm_all_reduce_rmsnorm_desc d = {.tokens = 5, .hidden = 16, .eps = 1e-6, .backend = job->backend};
    agmm_plan *plan = NULL;
    static uint16_t bufs[AGMM_MAX_RANKS][3][5 * 16];
    job->st[rank] = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &d);
    if (job->st[rank] == AGMM_SUCCESS && rank != job->nranks - 1) {
        agmm_all_reduce_rmsnorm_io io = {.y = bufs[rank][0], .residual_out = bufs[rank][1], .gamma = bufs[rank][2]};
        const double t0 = now_s();
        job->st[rank] = agmm_all_reduce_rmsnorm(plan, &io, NULL);
        job->secs[rank] = now_s() - t0;
        snprintf(job->msg[rank], sizeof job->msg[rank], "%s", agmm_last_error(ctx));
    }
    /* The absent rank frees nothing until the others have given up on it. */
    pthread_barrier_wait(&job->done);
    agmm_plan_destroy(plan);
    return AGMM_SUCCESS;
}

void test_arn_timeout(void)
{
    static const char *const backends[] = {"nccl", "one_shot", "two_shot"};
    for (int b = 0; b < 3; b++) {
        gone_job *job = calloc(1, sizeof *job);
        job->backend = backends[b];
        job->nranks = 3;
        pthread_barrier_init(&job->done, NULL, 3);
        agmm_world *world = test_cpu_world(3, TIMEOUT_S);
        if (world) {
            agmm_world_run(world, gone_rank, job);
            agmm_world_destroy(world);
        }
        pthread_barrier_destroy(&job->done);
        int ok = world != NULL;
        double worst = 0;
        for (int r = 0; r < 2; r++) {
            ok &= job->st[r] == AGMM_ERR_TIMEOUT && strstr(job->msg[r], "rank 2 never arrived") != NULL;
            worst = fmax(worst, job->secs[r]);
        }
        agmm_check(ok && worst < TIMEOUT_S + 1.0,
                   "all_reduce_rmsnorm/%s W=3, rank 2 never runs: ranks 0 and 1 get %s after %.2f s at most "
                   "(timeout %.1f s): \"%s\"",
                   backends[b], agmm_status_str(job->st[0]), worst, TIMEOUT_S, job->msg[0]);
        free(job);
    }
}

/* ---- auto ---- */

typedef struct {
    agmm_status st[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][AGMM_ERROR_LEN];
    const char *backend[AGMM_MAX_RANKS];
    agmm_tune_result last[AGMM_MAX_RANKS];
    arn_result res[AGMM_MAX_RANKS];
} auto_job;

static agmm_status auto_rank(agmm_ctx *ctx, void *arg)
{
    auto_job *j = arg;
    const int rank = agmm_ctx_rank(ctx);
    agmm_all_reduce_rmsnorm_desc d = {.tokens = 9, .hidden = 264, .eps = 1e-6};
    agmm_plan *plan = NULL;
    j->st[rank] = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &d);
    snprintf(j->msg[rank], sizeof j->msg[rank], "%s", agmm_last_error(ctx));
    j->backend[rank] = agmm_plan_backend(plan);
    j->last[rank] = *agmm_tune_last(ctx);
    agmm_plan_destroy(plan);
    /* The choice runs right, planned again through auto (rank 0's memory now). */
    const arn_case c = {9, 264, 1e-6, 1, 1, 0, 0, 1};
    arn_check_run(ctx, "auto", &c, &arn_dev_host, 1, 0x4a70, &j->res[rank]);
    return AGMM_SUCCESS;
}

void test_arn_auto(void)
{
    for (int measured = 0; measured < 2; measured++) {
        if (measured) {
            setenv("AGMM_TUNE", "1", 1);
            setenv("AGMM_TUNE_CACHE", "", 1); /* no file: measure every time */
        }
        auto_job *j = calloc(1, sizeof *j);
        agmm_world *world = test_cpu_world(3, 0);
        if (world) {
            agmm_world_run(world, auto_rank, j);
            agmm_world_destroy(world);
        }
        int ok = world != NULL;
        for (int r = 0; r < 3; r++)
            ok &= j->st[r] == AGMM_SUCCESS && j->backend[r] && strcmp(j->backend[r], j->backend[0]) == 0 &&
                  j->res[r].runs == 1;
        const agmm_tune_result *t = &j->last[0];
        if (measured)
            ok &= t->how == AGMM_TUNE_MEASURED && t->ncand == 3 && t->choice && t->cand_us[0] >= 0 &&
                  t->cand_us[1] >= 0 && t->cand_us[2] >= 0;
        else
            ok &= t->how == AGMM_TUNE_STATIC && strcmp(j->backend[0], "one_shot") == 0;
        agmm_check(ok,
                   "all_reduce_rmsnorm auto W=3 T=9 H=264, %s: every rank takes %s (%s %.0f/%.0f/%.0f us), and its "
                   "run is right%s%s%s",
                   measured ? "AGMM_TUNE=1 measures nccl, one_shot, two_shot" : "CPU default: the static rule",
                   j->backend[0] ? j->backend[0] : "(none)", t->how == AGMM_TUNE_MEASURED ? "measured" : "static",
                   t->cand_us[0], t->cand_us[1], t->cand_us[2], j->msg[0][0] || j->res[0].msg[0] ? ": " : "",
                   j->msg[0], j->res[0].msg);
        free(j);
    }
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_CACHE");
}

/* ---- faults (AGMM_FAULT at the run point) ---- */

typedef struct {
    const char *backend;
    int exit_fault;            /* 1: rank 1 exits at its run; 0: it is delayed 20 ms */
    pthread_barrier_t done;
    arn_result res[3];
    agmm_status st[3];
    char msg[3][AGMM_ERROR_LEN];
} fault_job;

static agmm_status fault_rank(agmm_ctx *ctx, void *arg)
{
    fault_job *j = arg;
    const int rank = agmm_ctx_rank(ctx);
    const arn_case c = {7, 264, 1e-6, 1, 1, 0, 0, 1};
    if (!j->exit_fault) {
        arn_check_run(ctx, j->backend, &c, &arn_dev_host, 2, 0xfa17, &j->res[rank]);
        return AGMM_SUCCESS;
    }
    agmm_all_reduce_rmsnorm_desc d = {.tokens = 7, .hidden = 264, .eps = 1e-6, .backend = j->backend};
    agmm_plan *plan = NULL;
    static uint16_t bufs[3][3][7 * 264];
    j->st[rank] = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &d);
    if (j->st[rank] == AGMM_SUCCESS) {
        agmm_all_reduce_rmsnorm_io io = {.y = bufs[rank][0], .residual_out = bufs[rank][1], .gamma = bufs[rank][2]};
        j->st[rank] = agmm_all_reduce_rmsnorm(plan, &io, NULL);
    }
    snprintf(j->msg[rank], sizeof j->msg[rank], "%s", agmm_last_error(ctx));
    pthread_barrier_wait(&j->done); /* nobody frees while a peer is still in the faulted run */
    agmm_plan_destroy(plan);
    return AGMM_SUCCESS;
}

void test_arn_faults(void)
{
    static const char *const backends[] = {"nccl", "one_shot", "two_shot"};
    for (int e = 0; e < 2; e++)
        for (int b = 0; b < 3; b++) {
            fault_job *j = calloc(1, sizeof *j);
            j->backend = backends[b];
            j->exit_fault = e;
            pthread_barrier_init(&j->done, NULL, 3);
            setenv("AGMM_FAULT", e ? "rank=1,at=run,action=exit" : "rank=1,at=run,action=delay,ms=20", 1);
            agmm_world *world = test_cpu_world(3, e ? TIMEOUT_S : 0);
            if (world) {
                agmm_world_run(world, fault_rank, j);
                agmm_world_destroy(world);
            }
            unsetenv("AGMM_FAULT");
            pthread_barrier_destroy(&j->done);
            if (!e) {
                int ok = world != NULL;
                for (int r = 0; r < 3; r++)
                    ok &= j->res[r].runs == 2;
                agmm_check(ok, "all_reduce_rmsnorm/%s W=3, rank 1 delayed 20 ms at every run: every result right "
                           "(2 runs)%s%s", backends[b], j->res[0].msg[0] ? ": " : "", j->res[0].msg);
            } else {
                int ok = world != NULL && j->st[1] == AGMM_ERR_INTERNAL && strstr(j->msg[1], "injected fault");
                for (int r = 0; r < 3; r += 2)
                    ok &= j->st[r] == AGMM_ERR_TIMEOUT && strstr(j->msg[r], "rank 1 never arrived") != NULL;
                agmm_check(ok, "all_reduce_rmsnorm/%s W=3, rank 1 exits at its run: rank 1 %s, ranks 0 and 2 %s "
                           "(\"%s\")", backends[b], agmm_status_str(j->st[1]), agmm_status_str(j->st[0]), j->msg[0]);
            }
            free(j);
        }
}
