/* The protocols of the CPU world's backends: the fused GEMM waits for exactly the chunk each
 * tile reads (proved with a delayed copy and per-chunk timestamps), and every wait is bounded:
 * a rank that never runs, or a chunk that never lands, gives AGMM_ERR_TIMEOUT naming the rank,
 * the peer and the chunk, within the world's timeout, never a hang. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/clock.h"
#include "backends/ag_matmul_fused.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"

#define RUNS 3

/* ---- the fused GEMM waits for its chunks (delay hook) ---- */

enum { WAIT_W = 3, WAIT_SPLITS = 2 };
#define WAIT_DELAY_US 100000

typedef struct {
    agmm_status status;
    char msg[AGMM_ERROR_LEN];
    int runs, c_bad;
    int waited_bad;          /* a chunk's first tile started before its copy finished */
    int local_bad;           /* a local tile ended after the delayed copy (it waited) */
    int delayed_chunk;
    int64_t delayed_lag_ns;  /* the delayed chunk: its first tile start - its copy's end (min) */
    int64_t local_margin_ns; /* the delayed copy's end - the last local tile's end (min) */
} wait_result;

static agmm_status wait_rank(agmm_ctx *ctx, void *arg)
{
    wait_result *res = (wait_result *)arg + agmm_ctx_rank(ctx);
    int rank = agmm_ctx_rank(ctx);
    const int64_t m = 96, n = 160, k = 64, rows = WAIT_W * m;
    agmm_plan *plan = NULL;
    agmm_ag_matmul_desc d = {.m = m, .n = n, .k = k, .backend = "fused", .splits = WAIT_SPLITS};
    res->status = agmm_plan_ag_matmul(&plan, ctx, &d);
    if (res->status != AGMM_SUCCESS) {
        snprintf(res->msg, sizeof res->msg, "%s", agmm_last_error(ctx));
        return AGMM_SUCCESS;
    }
    /* The second chunk of the next rank: its copy is the second in the queue, so the copy of
     * the first lands at once and everything queued after the delayed one lands late too. */
    res->delayed_chunk = ((rank + 1) % WAIT_W) * WAIT_SPLITS + 1;
    res->delayed_lag_ns = res->local_margin_ns = INT64_MAX;
    res->status = agmm_fused_set_copy_delay(plan, res->delayed_chunk, (int64_t)WAIT_DELAY_US * 1000);
    if (res->status != AGMM_SUCCESS) {
        snprintf(res->msg, sizeof res->msg, "agmm_fused_set_copy_delay: %s", agmm_last_error(ctx));
        agmm_plan_destroy(plan);
        return AGMM_SUCCESS;
    }

    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(rows * k)), *b = malloc(sizeof(uint16_t) * (size_t)(k * n));
    uint16_t *a_out = malloc(sizeof(uint16_t) * (size_t)(rows * k)), *c = malloc(sizeof(uint16_t) * (size_t)(rows * n));
    uint16_t *ref16 = malloc(sizeof(uint16_t) * (size_t)(rows * n));
    for (int run = 0; run < RUNS; run++) {
        for (int r = 0; r < WAIT_W; r++)
            test_fill_bf16(a + r * m * k, m * k, test_seed_of(77, r, run, 1), 2);
        test_fill_bf16(b, k * n, test_seed_of(77, rank, run, 2), 2);
        agmm_ref_gemm_bf16(a, b, AGMM_LAYOUT_COL_MAJOR, rows, n, k, NULL, ref16);
        memcpy(agmm_plan_input(plan), a + rank * m * k, sizeof(uint16_t) * (size_t)(m * k));
        test_poison_bf16(a_out, rows * k);
        test_poison_bf16(c, rows * n);
        agmm_ag_matmul_io io = {.b = b, .a_gathered = a_out, .c = c};
        agmm_status st = agmm_ag_matmul(plan, &io, NULL);
        if (st != AGMM_SUCCESS) {
            res->status = st;
            snprintf(res->msg, sizeof res->msg, "run %d: %s", run, agmm_last_error(ctx));
            break;
        }
        res->runs++;
        res->c_bad += agmm_ref_first_mismatch(c, ref16, rows * n, 2) >= 0 ||
                      agmm_ref_first_mismatch(a_out, a, rows * k, 2) >= 0;
        agmm_fused_times delayed = {0};
        if (agmm_fused_chunk_times(plan, res->delayed_chunk, &delayed) != AGMM_SUCCESS) {
            res->status = AGMM_ERR_INTERNAL;
            snprintf(res->msg, sizeof res->msg, "agmm_fused_chunk_times(chunk %d) failed", res->delayed_chunk);
            break;
        }
        for (int ch = 0; ch < WAIT_W * WAIT_SPLITS; ch++) {
            agmm_fused_times t = {0};
            if (agmm_fused_chunk_times(plan, ch, &t) != AGMM_SUCCESS) {
                res->waited_bad++;
                continue;
            }
            if (ch / WAIT_SPLITS == rank) {
                int64_t margin = delayed.copy_done_ns - t.last_tile_ns;
                res->local_bad += margin <= 0;
                if (margin < res->local_margin_ns)
                    res->local_margin_ns = margin;
            } else {
                res->waited_bad += t.tiles == 0 || t.first_tile_ns < t.copy_done_ns;
            }
        }
        if (delayed.first_tile_ns - delayed.copy_done_ns < res->delayed_lag_ns)
            res->delayed_lag_ns = delayed.first_tile_ns - delayed.copy_done_ns;
    }
    agmm_plan_destroy(plan);
    free(a), free(b), free(a_out), free(c), free(ref16);
    return AGMM_SUCCESS;
}

void test_cpu_fused_waits(void)
{
    agmm_world *world = test_cpu_world(WAIT_W, 0);
    if (world == NULL)
        return;
    wait_result res[WAIT_W] = {0};
    agmm_world_run(world, wait_rank, res);
    agmm_world_destroy(world);
    int ok = 1, c_bad = 0, waited_bad = 0, local_bad = 0;
    int64_t lag = INT64_MAX, margin = INT64_MAX;
    const char *msg = "";
    for (int r = 0; r < WAIT_W; r++) {
        if (res[r].status != AGMM_SUCCESS || res[r].runs != RUNS)
            ok = 0, msg = res[r].msg;
        c_bad += res[r].c_bad, waited_bad += res[r].waited_bad, local_bad += res[r].local_bad;
        if (res[r].delayed_lag_ns < lag)
            lag = res[r].delayed_lag_ns;
        if (res[r].local_margin_ns < margin)
            margin = res[r].local_margin_ns;
    }
    agmm_check(ok && c_bad == 0,
               "ag_matmul/fused W=3 M=96 N=160 K=64 splits=2, chunk rank+1/split 1 copied %d ms late: C and gathered A "
               "exact (%d runs x 3 ranks)%s%s",
               WAIT_DELAY_US / 1000, RUNS, msg[0] ? ": " : "", msg);
    agmm_check(ok && waited_bad == 0 && lag >= 0,
               "ag_matmul/fused: every peer chunk's first tile started after its copy landed (delayed chunk: %.3f ms "
               "after, at least)",
               (double)lag * 1e-6);
    agmm_check(ok && local_bad == 0 && margin > 0,
               "ag_matmul/fused: local tiles did not wait: all done %.1f ms before the delayed copy landed (at least)",
               (double)margin * 1e-6);
}

/* ---- timeouts: a missing rank, a chunk that never lands ---- */

#define TIMEOUT_S 0.3

typedef struct {
    const char *backend;
    int all_reduce;
    int nranks;
    int first_missing;             /* ranks first_missing.. never call run */
    pthread_barrier_t done;        /* ranks meet here after the run, before destroying */
    agmm_status status[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][AGMM_ERROR_LEN];
    double elapsed_s[AGMM_MAX_RANKS];
} timeout_job;

static double now_s(void) { return (double)agmm_mono_ns() * 1e-9; }

static agmm_status timeout_rank(agmm_ctx *ctx, void *arg)
{
    timeout_job *job = arg;
    int rank = agmm_ctx_rank(ctx);
    const int64_t m = 16, n = 16, k = 16, rows = job->nranks * m;
    agmm_plan *plan = NULL;
    agmm_status st;
    if (job->all_reduce) {
        agmm_all_reduce_desc d = {.n = 100, .dtype = AGMM_DTYPE_F32, .backend = job->backend};
        st = agmm_plan_all_reduce(&plan, ctx, &d);
    } else {
        agmm_ag_matmul_desc d = {.m = m, .n = n, .k = k, .backend = job->backend, .splits = 2};
        st = agmm_plan_ag_matmul(&plan, ctx, &d);
    }
    uint16_t *a = calloc((size_t)(rows * k), 2), *b = calloc((size_t)(k * n), 2), *c = calloc((size_t)(rows * n), 2);
    float out[100];
    if (st == AGMM_SUCCESS && rank < job->first_missing) {
        agmm_ag_matmul_io mm_io = {.b = b, .a_gathered = a, .c = c};
        agmm_all_reduce_io ar_io = {.out = out};
        double t0 = now_s();
        st = job->all_reduce ? agmm_all_reduce(plan, &ar_io, NULL) : agmm_ag_matmul(plan, &mm_io, NULL);
        job->elapsed_s[rank] = now_s() - t0;
    }
    job->status[rank] = st;
    snprintf(job->msg[rank], sizeof job->msg[rank], "%s", agmm_last_error(ctx));
    /* Plan destroy is collective: the missing ranks come back for it once the others gave up. */
    pthread_barrier_wait(&job->done);
    agmm_plan_destroy(plan);
    free(a), free(b), free(c);
    return AGMM_SUCCESS;
}

void test_cpu_timeout_missing_rank(void)
{
    static const struct {
        const char *backend;
        int all_reduce, nranks, first_missing;
        const char *names; /* what the message of ranks that ran must say */
    } cases[] = {
        {"nccl", 0, 3, 2, "rank 2 never arrived"},
        {"ce", 0, 3, 2, "rank 2 never arrived"},
        {"fused", 0, 3, 2, "rank 2 never arrived"},
        {"nccl", 1, 3, 2, "rank 2 never arrived"},
        {"one_shot", 1, 3, 2, "rank 2 never arrived"},
        {"two_shot", 1, 3, 2, "rank 2 never arrived"},
        {"two_shot", 1, 5, 3, "rank 3 never arrived (its slot reads 0); missing too: rank 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        timeout_job *job = calloc(1, sizeof *job);
        job->backend = cases[i].backend;
        job->all_reduce = cases[i].all_reduce;
        job->nranks = cases[i].nranks;
        job->first_missing = cases[i].first_missing;
        pthread_barrier_init(&job->done, NULL, (unsigned)job->nranks);
        agmm_world *world = test_cpu_world(job->nranks, TIMEOUT_S);
        if (world) {
            agmm_world_run(world, timeout_rank, job);
            agmm_world_destroy(world);
        }
        pthread_barrier_destroy(&job->done);
        int ok = world != NULL;
        double worst = 0;
        for (int r = 0; r < job->nranks; r++) {
            if (r >= job->first_missing) {
                ok &= job->status[r] == AGMM_SUCCESS;
                continue;
            }
            ok &= job->status[r] == AGMM_ERR_TIMEOUT && strstr(job->msg[r], cases[i].names) != NULL;
            if (job->elapsed_s[r] > worst)
                worst = job->elapsed_s[r];
            ok &= job->elapsed_s[r] >= TIMEOUT_S * 0.9;
        }
        agmm_check(ok && worst < TIMEOUT_S + 1.0,
                   "%s/%s W=%d, ranks %d..%d never run: the others get %s after %.2f s at most (timeout %.1f s): \"%s\"",
                   cases[i].all_reduce ? "all_reduce" : "ag_matmul", cases[i].backend, job->nranks,
                   job->first_missing, job->nranks - 1, agmm_status_str(job->status[0]), worst, TIMEOUT_S,
                   job->msg[0]);
        free(job);
    }
}

typedef struct {
    pthread_barrier_t done;
    agmm_status status[2];
    char msg[2][AGMM_ERROR_LEN];
    double elapsed_s[2];
} chunk_job;

#define CHUNK_TIMEOUT_S 0.2
#define CHUNK_DELAY_US 600000

static agmm_status chunk_rank(agmm_ctx *ctx, void *arg)
{
    chunk_job *job = arg;
    int rank = agmm_ctx_rank(ctx);
    const int64_t m = 16, n = 16, k = 16;
    agmm_plan *plan = NULL;
    agmm_ag_matmul_desc d = {.m = m, .n = n, .k = k, .backend = "fused", .splits = 2};
    agmm_status st = agmm_plan_ag_matmul(&plan, ctx, &d);
    uint16_t *a = calloc((size_t)(2 * m * k), 2), *b = calloc((size_t)(k * n), 2), *c = calloc((size_t)(2 * m * n), 2);
    /* Rank 0's copy of chunk 3 (rank 1's second split) takes longer than the timeout. */
    if (st == AGMM_SUCCESS && rank == 0)
        st = agmm_fused_set_copy_delay(plan, 3, (int64_t)CHUNK_DELAY_US * 1000);
    if (st == AGMM_SUCCESS) {
        agmm_ag_matmul_io io = {.b = b, .a_gathered = a, .c = c};
        double t0 = now_s();
        st = agmm_ag_matmul(plan, &io, NULL);
        job->elapsed_s[rank] = now_s() - t0;
    }
    job->status[rank] = st;
    snprintf(job->msg[rank], sizeof job->msg[rank], "%s", agmm_last_error(ctx));
    pthread_barrier_wait(&job->done);
    agmm_plan_destroy(plan);
    free(a), free(b), free(c);
    return AGMM_SUCCESS;
}

void test_cpu_timeout_chunk(void)
{
    chunk_job *job = calloc(1, sizeof *job);
    pthread_barrier_init(&job->done, NULL, 2);
    agmm_world *world = test_cpu_world(2, CHUNK_TIMEOUT_S);
    if (world) {
        agmm_world_run(world, chunk_rank, job);
        agmm_world_destroy(world);
    }
    pthread_barrier_destroy(&job->done);
    agmm_check(world && job->status[0] == AGMM_ERR_TIMEOUT && strstr(job->msg[0], "rank 0") != NULL &&
                   strstr(job->msg[0], "chunk 3") != NULL && job->elapsed_s[0] < CHUNK_DELAY_US * 1e-6 + 1.0,
               "ag_matmul/fused W=2: rank 0's chunk 3 lands %.1f s late: %s after %.2f s (timeout %.1f s, then the "
               "copy drained): \"%s\"",
               CHUNK_DELAY_US * 1e-6, agmm_status_str(job->status[0]), job->elapsed_s[0], CHUNK_TIMEOUT_S, job->msg[0]);
    agmm_check(world && job->status[1] == AGMM_ERR_TIMEOUT && strstr(job->msg[1], "rank 0 never arrived") != NULL &&
                   job->elapsed_s[1] < CHUNK_TIMEOUT_S + 1.0,
               "ag_matmul/fused W=2: rank 1 then gets %s at its closing barrier after %.2f s: \"%s\"",
               agmm_status_str(job->status[1]), job->elapsed_s[1], job->msg[1]);
    free(job);
}
