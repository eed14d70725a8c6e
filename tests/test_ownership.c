/* Ownership of symmetric memory (src/symm/symm_impl.h): no rank frees what a peer may still
 * touch, whatever happened to the meetings before.
 *   - a late rank: its peers time out in a run's barrier, destroy their plans and contexts and
 *     leave; the late rank then runs (its barrier raises flags in every peer's signal pad and its
 *     copies read their shards), gets AGMM_ERR_TIMEOUT naming them, and destroys its own. Under
 *     AddressSanitizer (CI) a pad or shard freed by its owner would be a use-after-free report;
 *     the memory must outlive its owner until the last rank lets go.
 *   - a failed setup step on one rank is the same failure on every rank (agmm_host_agree), and
 *     an unusable world refuses every later collective at once, with the first reason. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "cpu/cpu.h"
#include "cpu_tests.h"
#include "harness.h"

#define LATE_TIMEOUT_S 0.2
#define LATE_RANK 2

typedef struct {
    const char *backend;
    agmm_status status[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][AGMM_ERROR_LEN];
    double late_s;             /* how long the late rank's run took */
} late_job;

static agmm_status late_rank(agmm_ctx *ctx, void *arg)
{
    late_job *job = arg;
    int rank = agmm_ctx_rank(ctx);
    const int64_t m = 16, n = 16, k = 16, rows = 3 * m;
    agmm_plan *plan = NULL;
    agmm_ag_matmul_desc d = {.m = m, .n = n, .k = k, .backend = job->backend};
    agmm_status st = agmm_plan_ag_matmul(&plan, ctx, &d);
    uint16_t *a = calloc((size_t)(rows * k), 2), *b = calloc((size_t)(k * n), 2), *c = calloc((size_t)(rows * n), 2);
    if (st == AGMM_SUCCESS && rank == LATE_RANK) {
        /* Long enough for the others to time out, destroy everything and return. */
        struct timespec t = {0, (long)(3 * LATE_TIMEOUT_S * 1e9)};
        nanosleep(&t, NULL);
    }
    if (st == AGMM_SUCCESS) {
        agmm_ag_matmul_io io = {.b = b, .a_gathered = a, .c = c};
        int64_t t0 = agmm_cpu_now_ns();
        st = agmm_ag_matmul(plan, &io, NULL);
        if (rank == LATE_RANK)
            job->late_s = (double)(agmm_cpu_now_ns() - t0) * 1e-9;
    }
    job->status[rank] = st;
    snprintf(job->msg[rank], sizeof job->msg[rank], "%s", agmm_last_error(ctx));
    /* No meeting before destroying: the others leave while the late rank sleeps. */
    agmm_plan_destroy(plan);
    free(a), free(b), free(c);
    return AGMM_SUCCESS;
}

void test_ownership_late_rank(void)
{
    static const char *const backends[] = {"nccl", "ce", "fused"};
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++) {
        late_job *job = calloc(1, sizeof *job);
        job->backend = backends[i];
        agmm_world *world = test_cpu_world(3, LATE_TIMEOUT_S);
        if (world) {
            agmm_world_run(world, late_rank, job);
            agmm_world_destroy(world);
        }
        int ok = world != NULL && job->status[LATE_RANK] == AGMM_ERR_TIMEOUT &&
                 strstr(job->msg[LATE_RANK], "never arrived") != NULL && job->late_s < LATE_TIMEOUT_S + 1.0;
        for (int r = 0; r < 3; r++)
            ok &= r == LATE_RANK || job->status[r] == AGMM_ERR_TIMEOUT;
        agmm_check(ok,
                   "ag_matmul/%s W=3: rank %d runs after its peers timed out and destroyed their plans and contexts: "
                   "it gets %s after %.2f s, touching no freed memory: \"%s\"",
                   backends[i], LATE_RANK, agmm_status_str(job->status[LATE_RANK]), job->late_s,
                   job->msg[LATE_RANK]);
        free(job);
    }
}

/* ---- agreement and an unusable world ---- */

typedef struct {
    agmm_status agreed[AGMM_MAX_RANKS], after[AGMM_MAX_RANKS], late[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][AGMM_ERROR_LEN], after_msg[AGMM_MAX_RANKS][AGMM_ERROR_LEN];
    double late_s;
} agree_job;

#include "api/agmm_ext.h"
#include "world/world.h"

static agmm_status agree_rank(agmm_ctx *ctx, void *arg)
{
    agree_job *job = arg;
    int rank = agmm_ctx_rank(ctx);
    /* A set-up step that fails on rank 1 only (as an allocation would where memory ran out): all
     * must fail alike, naming rank 1, and stay in step. */
    agmm_status mine = rank == 1 ? AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank 1: a step of its own failed")
                                 : AGMM_SUCCESS;
    job->agreed[rank] = agmm_host_agree(ctx, mine);
    snprintf(job->msg[rank], sizeof job->msg[rank], "%s", agmm_last_error(ctx));
    int32_t me = rank, all[AGMM_MAX_RANKS];
    job->after[rank] = agmm_ext_exchange(ctx, &me, sizeof me, all);
    for (int r = 0; r < 3 && job->after[rank] == AGMM_SUCCESS; r++)
        if (all[r] != r)
            job->after[rank] = AGMM_ERR_INTERNAL;
    /* Then rank 2 comes late to a barrier: the others time out, and from then on the world
     * refuses at once, rank 2 included, with the first reason. */
    if (rank == 2) {
        struct timespec t = {0, (long)(3 * LATE_TIMEOUT_S * 1e9)};
        nanosleep(&t, NULL);
    }
    int64_t t0 = agmm_cpu_now_ns();
    job->late[rank] = agmm_ext_barrier(ctx);
    if (rank == 2)
        job->late_s = (double)(agmm_cpu_now_ns() - t0) * 1e-9;
    snprintf(job->after_msg[rank], sizeof job->after_msg[rank], "%s", agmm_last_error(ctx));
    return AGMM_SUCCESS;
}

void test_ownership_agreement(void)
{
    agree_job *job = calloc(1, sizeof *job);
    agmm_world *world = test_cpu_world(3, LATE_TIMEOUT_S);
    if (world) {
        agmm_world_run(world, agree_rank, job);
        agmm_world_destroy(world);
    }
    int ok = world != NULL;
    for (int r = 0; r < 3; r++)
        ok &= job->agreed[r] == AGMM_ERR_NO_MEMORY && (r == 1 || strstr(job->msg[r], "rank 1 failed") != NULL) &&
              job->after[r] == AGMM_SUCCESS;
    agmm_check(ok,
               "W=3, a set-up step fails on rank 1 only: every rank gets %s/%s/%s (\"%s\"), and the ranks stay in "
               "step (an exchange after it: %s)",
               agmm_status_str(job->agreed[0]), agmm_status_str(job->agreed[1]), agmm_status_str(job->agreed[2]),
               job->msg[0], agmm_status_str(job->after[0]));
    ok = world != NULL && job->late[2] != AGMM_SUCCESS && job->late_s < 0.1 &&
         strstr(job->after_msg[2], "unusable") != NULL;
    for (int r = 0; r < 2; r++)
        ok &= job->late[r] == AGMM_ERR_TIMEOUT;
    agmm_check(ok,
               "W=3, rank 2 comes late to a barrier: ranks 0 and 1 time out (%s), and rank 2's barrier is refused at "
               "once (%.3f s): \"%s\"",
               agmm_status_str(job->late[0]), job->late_s, job->after_msg[2]);
    free(job);
}
