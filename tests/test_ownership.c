/* Ownership of symmetric memory (src/symm/symm_impl.h): no rank frees what a peer may still
 * touch, whatever happened to the meetings before.
 *   - a late rank, issue 16's use-after-free exactly: its peers time out in a run's barrier,
 *     destroy their plans and contexts and leave; the late rank then runs: its barrier raises
 *     flags in every peer's signal pad (agmm_cpu_flag_raise), its copies read their shards (the
 *     memcpy of the nccl stand-in, ce's copy threads, all_reduce's loads), and it gets
 *     AGMM_ERR_TIMEOUT naming them, then destroys its own. Once long after the peers left, and
 *     once just as they give up (its accesses then meet their destroys). Under AddressSanitizer
 *     a pad or shard freed by its owner is a use-after-free report, under ThreadSanitizer a free
 *     racing those accesses (CI runs both): memory must outlive its owner until the last rank
 *     lets go. Without a sanitizer the statuses are checked: a rank either failed with
 *     AGMM_ERR_TIMEOUT or succeeded with the exact result.
 *   - a failed setup step on one rank is the same failure on every rank (agmm_host_agree), and
 *     an unusable world refuses every later collective at once, with the first reason. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "core/clock.h"
#include "core/numeric.h"
#include "cpu/cpu.h"
#include "cpu_tests.h"
#include "harness.h"

#define LATE_TIMEOUT_S 0.2
#define LATE_RANK 2
#define LATE_W 3

typedef struct {
    int all_reduce;
    const char *backend;
    double late_by_s;          /* how long the late rank waits before its run */
    agmm_status status[LATE_W];
    int exact[LATE_W];
    char msg[LATE_W][AGMM_ERROR_LEN];
    double late_s;             /* how long the late rank's run took */
} late_job;

enum { LATE_M = 16, LATE_N = 16, LATE_K = 16, LATE_AR_N = 100 };

/* Inputs: small integers, the same on every rank that asks (r: whose). */
static float late_value(int r, int i) { return (float)((r * 7 + i) % 11 - 5); }

static agmm_status late_run(agmm_plan *plan, const late_job *job, int rank, int *exact)
{
    agmm_status st;
    *exact = 0;
    if (job->all_reduce) {
        float out[LATE_AR_N];
        for (int i = 0; i < LATE_AR_N; i++)
            ((float *)agmm_plan_input(plan))[i] = late_value(rank, i), out[i] = -1e30f;
        agmm_all_reduce_io io = {.out = out};
        st = agmm_all_reduce(plan, &io, NULL);
        *exact = st == AGMM_SUCCESS;
        for (int i = 0; *exact && i < LATE_AR_N; i++)
            *exact = out[i] == late_value(0, i) + late_value(1, i) + late_value(2, i);
        return st;
    }
    /* B = 0: C is exactly 0, the gathered A exactly every rank's shard. */
    enum { ROWS = LATE_W * LATE_M };
    uint16_t a[ROWS * LATE_K], b[LATE_K * LATE_N] = {0}, c[ROWS * LATE_N];
    for (int i = 0; i < LATE_M * LATE_K; i++)
        ((uint16_t *)agmm_plan_input(plan))[i] = agmm_f32_to_bf16(late_value(rank, i));
    test_poison_bf16(a, ROWS * LATE_K);
    test_poison_bf16(c, ROWS * LATE_N);
    agmm_ag_matmul_io io = {.b = b, .a_gathered = a, .c = c};
    st = agmm_ag_matmul(plan, &io, NULL);
    *exact = st == AGMM_SUCCESS;
    for (int i = 0; *exact && i < ROWS * LATE_K; i++)
        *exact = a[i] == agmm_f32_to_bf16(late_value(i / (LATE_M * LATE_K), i % (LATE_M * LATE_K)));
    for (int i = 0; *exact && i < ROWS * LATE_N; i++)
        *exact = c[i] == 0 || c[i] == 0x8000;
    return st;
}

static agmm_status late_rank(agmm_ctx *ctx, void *arg)
{
    late_job *job = arg;
    int rank = agmm_ctx_rank(ctx);
    agmm_plan *plan = NULL;
    agmm_status st;
    if (job->all_reduce) {
        agmm_all_reduce_desc d = {.n = LATE_AR_N, .dtype = AGMM_DTYPE_F32, .backend = job->backend};
        st = agmm_plan_all_reduce(&plan, ctx, &d);
    } else {
        agmm_ag_matmul_desc d = {.m = LATE_M, .n = LATE_N, .k = LATE_K, .backend = job->backend};
        st = agmm_plan_ag_matmul(&plan, ctx, &d);
    }
    if (st == AGMM_SUCCESS && rank == LATE_RANK) {
        struct timespec t = {(time_t)job->late_by_s, (long)((job->late_by_s - (double)(time_t)job->late_by_s) * 1e9)};
        nanosleep(&t, NULL);
    }
    if (st == AGMM_SUCCESS) {
        int64_t t0 = agmm_mono_ns();
        st = late_run(plan, job, rank, &job->exact[rank]);
        if (rank == LATE_RANK)
            job->late_s = (double)(agmm_mono_ns() - t0) * 1e-9;
    }
    job->status[rank] = st;
    snprintf(job->msg[rank], sizeof job->msg[rank], "%s", agmm_last_error(ctx));
    /* No meeting before destroying: the others leave while the late rank sleeps (agmm_world_run
     * destroys each rank's context as soon as its function returns). */
    agmm_plan_destroy(plan);
    return AGMM_SUCCESS;
}

void test_ownership_late_rank(void)
{
    static const struct {
        int all_reduce;
        const char *backend;
    } cases[] = {{0, "nccl"}, {0, "ce"}, {0, "fused"}, {1, "nccl"}, {1, "one_shot"}, {1, "two_shot"}};
    /* Long after the peers left (3 x the timeout), as they give up (the timeout + 1 ms), and on
     * time (the control: every result exact). */
    static const double late_by[] = {3 * LATE_TIMEOUT_S, LATE_TIMEOUT_S + 0.001, 0};
    static const char *const when[] = {"long after", "just as"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (size_t l = 0; l < sizeof late_by / sizeof *late_by; l++) {
            late_job *job = calloc(1, sizeof *job);
            job->all_reduce = cases[i].all_reduce;
            job->backend = cases[i].backend;
            job->late_by_s = late_by[l];
            agmm_world *world = test_cpu_world(LATE_W, LATE_TIMEOUT_S);
            if (world) {
                agmm_world_run(world, late_rank, job);
                agmm_world_destroy(world);
            }
            /* Every rank either timed out or passed with the exact result (as they give up, the late
             * rank may still meet a peer in time); long after, every run timed out, the late rank's
             * naming the peers it waited for; on time, every run passed. */
            const agmm_status must[] = {AGMM_ERR_TIMEOUT, AGMM_SUCCESS, AGMM_SUCCESS};
            int ok = world != NULL && job->late_s < LATE_TIMEOUT_S + 1.0;
            for (int r = 0; r < LATE_W; r++)
                ok &= (l == 1 || job->status[r] == must[l]) &&
                      (job->status[r] == AGMM_ERR_TIMEOUT || (job->status[r] == AGMM_SUCCESS && job->exact[r]));
            if (job->status[LATE_RANK] == AGMM_ERR_TIMEOUT)
                ok &= strstr(job->msg[LATE_RANK], "never arrived") != NULL;
            const char *op = job->all_reduce ? "all_reduce" : "ag_matmul";
            if (l == 2)
                agmm_check(ok, "%s/%s W=3, no rank late (the control): every run passes, results exact (%s, %s, %s)",
                           op, job->backend, agmm_status_str(job->status[0]), agmm_status_str(job->status[1]),
                           agmm_status_str(job->status[2]));
            else
                agmm_check(ok,
                           "%s/%s W=3: rank %d runs %.3f s late, %s its peers timed out and destroyed their plans "
                           "and contexts: it gets %s after %.2f s (peers: %s, %s), touching no freed memory: \"%s\"",
                           op, job->backend, LATE_RANK, job->late_by_s, when[l],
                           agmm_status_str(job->status[LATE_RANK]), job->late_s, agmm_status_str(job->status[0]),
                           agmm_status_str(job->status[1]), job->msg[LATE_RANK]);
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
    int64_t t0 = agmm_mono_ns();
    job->late[rank] = agmm_ext_barrier(ctx);
    if (rank == 2)
        job->late_s = (double)(agmm_mono_ns() - t0) * 1e-9;
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
