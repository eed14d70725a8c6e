/* Busy spells (agmm_ctx_busy_begin/end) in a world of threads: peers wait for a busy rank without
 * the timeout, a whole timeout starts when its spell ends, spells nest, and misuse is refused.
 * (Worlds of processes: tests/busy_process_test.sh, with agmm-bench and a kill.) */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "core/clock.h"
#include "cpu/cpu.h"
#include "cpu_tests.h"
#include "harness.h"
#include "world/world.h"

#define W 3
#define TIMEOUT_S 0.3

typedef struct {
    double busy_s;             /* rank 0: how long its spell lasts (inner spell too if nested) */
    double idle_s;             /* rank 0: how long it then stays away, not busy */
    int nested;                /* rank 0 opens two spells and ends the inner one at once */
    agmm_status st[W];
    double took_s[W];
    char msg[W][AGMM_ERROR_LEN];
} busy_job;

static double now_s(void) { return (double)agmm_mono_ns() * 1e-9; }

static void sleep_s(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

static agmm_status busy_rank(agmm_ctx *ctx, void *arg)
{
    busy_job *j = arg;
    const int rank = agmm_ctx_rank(ctx);
    const double t0 = now_s();
    if (rank == 0) {
        agmm_ctx_busy_begin(ctx, "a spell in the test");
        if (j->nested) {
            agmm_ctx_busy_begin(ctx, "an inner spell");
            agmm_ctx_busy_end(ctx);
        }
        sleep_s(j->busy_s);
        agmm_ctx_busy_end(ctx);
        sleep_s(j->idle_s);
    }
    j->st[rank] = agmm_host_barrier(ctx);
    j->took_s[rank] = now_s() - t0;
    snprintf(j->msg[rank], sizeof j->msg[rank], "%s", agmm_last_error(ctx));
    return AGMM_SUCCESS;
}

static void run_job(busy_job *j)
{
    agmm_world *w = NULL;
    char err[256] = "";
    agmm_world_config cfg = {.kind = AGMM_WORLD_CPU, .nranks = W, .timeout_s = TIMEOUT_S};
    if (agmm_world_create(&w, &cfg, err, sizeof err) != AGMM_SUCCESS) {
        agmm_check(0, "busy: world creation: %s", err);
        return;
    }
    agmm_world_run(w, busy_rank, j);
    agmm_world_destroy(w);
}

void test_busy_threads(void)
{
    /* Busy 4 x the timeout, then at once to the barrier: the peers wait it out. */
    busy_job a = {.busy_s = 4 * TIMEOUT_S};
    run_job(&a);
    agmm_check(a.st[0] == AGMM_SUCCESS && a.st[1] == AGMM_SUCCESS && a.st[2] == AGMM_SUCCESS &&
                   a.took_s[1] >= 0.9 * a.busy_s,
               "busy threads W=%d: rank 0 busy %.1f s (timeout %.1f s), then at the barrier: every rank passes it "
               "(ranks 1, 2 waited %.2f, %.2f s): %s",
               W, a.busy_s, TIMEOUT_S, a.took_s[1], a.took_s[2], a.msg[1]);

    /* Nested spells: the outer one holds the peers until it ends. */
    busy_job n = {.busy_s = 4 * TIMEOUT_S, .nested = 1};
    run_job(&n);
    agmm_check(n.st[1] == AGMM_SUCCESS && n.st[2] == AGMM_SUCCESS && n.took_s[1] >= 0.9 * n.busy_s,
               "busy threads: an inner spell ended at once leaves the outer one showing: ranks 1, 2 wait %.2f, %.2f s "
               "and pass: %s",
               n.took_s[1], n.took_s[2], n.msg[1]);

    /* Busy, then away without saying so: the bound restarts at the end of the spell. */
    busy_job b = {.busy_s = 2 * TIMEOUT_S, .idle_s = 5 * TIMEOUT_S};
    run_job(&b);
    const double lo = b.busy_s + TIMEOUT_S * 0.9, hi = b.busy_s + TIMEOUT_S + 0.5;
    int ok = 1;
    for (int r = 1; r < W; r++)
        ok &= b.st[r] == AGMM_ERR_TIMEOUT && strstr(b.msg[r], "rank 0 never arrived") && b.took_s[r] >= lo &&
              b.took_s[r] <= hi;
    agmm_check(ok,
               "busy threads: rank 0 busy %.1f s, then away %.1f s not busy: ranks 1, 2 time out naming it %.2f, "
               "%.2f s after the start (a whole timeout after the spell: %.2f..%.2f s): \"%s\"",
               b.busy_s, b.idle_s, b.took_s[1], b.took_s[2], lo, hi, b.msg[1]);
}

typedef struct {
    agmm_status st[W];
    char msg[AGMM_ERROR_LEN];
} unpaired_job;

static agmm_status unpaired_rank(agmm_ctx *ctx, void *arg)
{
    unpaired_job *j = arg;
    const int rank = agmm_ctx_rank(ctx);
    j->st[rank] = agmm_ctx_busy_end(ctx);
    if (rank == 0)
        snprintf(j->msg, sizeof j->msg, "%s", agmm_last_error(ctx));
    return AGMM_SUCCESS;
}

void test_busy_misuse(void)
{
    agmm_world *w = test_cpu_world(W, TIMEOUT_S);
    unpaired_job j;
    memset(&j, 0, sizeof j);
    if (w == NULL)
        return;
    agmm_world_run(w, unpaired_rank, &j);
    agmm_world_destroy(w);
    agmm_check(j.st[0] == AGMM_ERR_INVALID_ARG && strstr(j.msg, "without an agmm_ctx_busy_begin"),
               "busy: an end without a begin is refused: %s \"%s\"", agmm_status_str(j.st[0]), j.msg);
    agmm_check(agmm_ctx_busy_begin(NULL, "x") == AGMM_ERR_INVALID_ARG &&
                   agmm_ctx_busy_end(NULL) == AGMM_ERR_INVALID_ARG,
               "busy: a NULL context is refused (AGMM_ERR_INVALID_ARG)");
}

/* A spell left open ends with its context: rank 0 opens one and returns from its run (agmm_world_run
 * destroys the contexts); in the next run of the same world it stays away for a second, and its
 * peers' barrier must time out within the timeout, not wait for a spell nobody can end. */
typedef struct {
    int run;                   /* 0: leave a spell open; 1: stay away, then meet */
    agmm_status st[W];
    double took_s[W];
} left_open_job;

static agmm_status left_open_rank(agmm_ctx *ctx, void *arg)
{
    left_open_job *j = arg;
    const int rank = agmm_ctx_rank(ctx);
    if (j->run == 0) {
        if (rank == 0)
            agmm_ctx_busy_begin(ctx, "a spell its context does not end");
        return AGMM_SUCCESS;
    }
    const double t0 = now_s();
    if (rank == 0)
        sleep_s(1.0);
    j->st[rank] = agmm_host_barrier(ctx);
    j->took_s[rank] = now_s() - t0;
    return AGMM_SUCCESS;
}

void test_busy_left_open(void)
{
    agmm_world *w = test_cpu_world(W, TIMEOUT_S);
    if (w == NULL)
        return;
    left_open_job j;
    memset(&j, 0, sizeof j);
    agmm_world_run(w, left_open_rank, &j);
    j.run = 1;
    agmm_world_run(w, left_open_rank, &j);
    agmm_world_destroy(w);
    agmm_check(j.st[1] == AGMM_ERR_TIMEOUT && j.took_s[1] < 0.9,
               "busy: a spell left open when its context ends is over: in the next run a peer of the rank that "
               "stays away 1 s times out after %.2f s (timeout %.1f s): %s",
               j.took_s[1], TIMEOUT_S, agmm_status_str(j.st[1]));
}
