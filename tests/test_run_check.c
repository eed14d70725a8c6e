/* The run check (AGMM_CHECK_RUNS=1, src/api/run_check.c) in a world of threads. Ranks that run
 * the same plan on the same input get exact sums; a rank that runs another plan, reads io.input at
 * another offset or in another buffer, or whose own check refuses its io, fails every rank with
 * the same status, naming it, and a correct run right after is exact on every rank (the ranks
 * stayed in step). With the check, each run makes exactly one host collective; without it, none
 * (the check is what costs, and only when asked for); an `auto` plan measures its candidates
 * without it and is checked itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "cpu_tests.h"
#include "harness.h"
#include "world/world.h"

#define W 3
#define N 257
#define OFF 1088 /* io.input's offset in the caller's buffer: 16-byte aligned, past N floats */

typedef enum { RC_AGREE, RC_OTHER_PLAN, RC_RANK0, RC_OFFSET, RC_BUFFER, RC_REFUSED, RC_COUNT } rc_case;

static const char *const rc_what[RC_COUNT] = {
    "every rank runs plan 1 on io.input at the same offset of the same buffer",
    "rank 1 runs plan 2, the others plan 1",
    "rank 0 runs plan 2, the others plan 1",
    "rank 2's io.input is at offset 0, the others' at the agreed offset",
    "rank 1's io.input is in another symmetric buffer",
    "rank 1's io.out is NULL (its own check refuses the call)",
};

typedef struct {
    rc_case c;
    int use_auto;                 /* plan 1 is "auto", measured (AGMM_TUNE=1) */
    const char *names[2];         /* plan 1's and plan 2's all_reduce backends (rank 0's) */
    agmm_status st[W], after[W];
    char msg[W][AGMM_ERROR_LEN];
    int exact[W], after_exact[W];
    uint32_t collectives[W];      /* host collectives of the correct run after the case */
    uint32_t plan_collectives[W]; /* host collectives of plan 1's creation; auto: less those of
                                     making a plan of the backend it chose (what measuring took) */
    char chose[16];               /* plan 1's backend (rank 0's) */
} rc_job;

/* rank r's vector: small integers, so every sum is exact in fp32 */
static float value(int r, int i) { return (float)(r * 1000 + i % 97 - 48); }

static int sums_exact(const float *out)
{
    for (int i = 0; i < N; i++) {
        float want = 0;
        for (int r = 0; r < W; r++)
            want += value(r, i);
        if (out[i] != want)
            return 0;
    }
    return 1;
}

static void put(float *x, int rank)
{
    for (int i = 0; i < N; i++)
        x[i] = value(rank, i);
}

static void poison(float *x)
{
    for (int i = 0; i < N; i++)
        x[i] = NAN;
}

static agmm_status rc_rank(agmm_ctx *ctx, void *arg)
{
    rc_job *job = arg;
    const int rank = agmm_ctx_rank(ctx);
    void *sym = NULL, *other = NULL;
    agmm_plan *plan[2] = {NULL, NULL};
    float out[N];
    /* Two plans: the first two all_reduce backends this world runs (every rank finds the same). */
    const char *names[2] = {NULL, NULL};
    for (int b = 0, n = 0; n < 2 && agmm_backend_name(AGMM_OP_ALL_REDUCE, b) != NULL; b++)
        if (agmm_backend_available(agmm_ctx_world(ctx), AGMM_OP_ALL_REDUCE, agmm_backend_name(AGMM_OP_ALL_REDUCE, b),
                                   NULL, 0))
            names[n++] = agmm_backend_name(AGMM_OP_ALL_REDUCE, b);
    if (rank == 0)
        memcpy(job->names, names, sizeof names);
    agmm_status st = names[1] ? agmm_symmetric_alloc(ctx, OFF + N * 4, &sym) : AGMM_ERR_UNSUPPORTED;
    if (st == AGMM_SUCCESS)
        st = agmm_symmetric_alloc(ctx, OFF + N * 4, &other);
    for (int p = 0; p < 2 && st == AGMM_SUCCESS; p++) {
        const uint32_t at = agmm_ctx_host_seq(ctx);
        agmm_all_reduce_desc d = {.n = N, .dtype = AGMM_DTYPE_F32, .backend = p == 0 && job->use_auto ? "auto" : names[p]};
        st = agmm_plan_all_reduce(&plan[p], ctx, &d);
        if (p == 0)
            job->plan_collectives[rank] = agmm_ctx_host_seq(ctx) - at;
        if (p == 0 && job->use_auto && st == AGMM_SUCCESS) {
            /* Backends differ in the collectives of their own creation, and auto's choice follows
             * the times: take away those of the chosen backend's creation. */
            agmm_plan *direct = NULL;
            d.backend = agmm_plan_backend(plan[0]);
            const uint32_t at_direct = agmm_ctx_host_seq(ctx);
            st = agmm_plan_all_reduce(&direct, ctx, &d);
            job->plan_collectives[rank] -= agmm_ctx_host_seq(ctx) - at_direct;
            agmm_plan_destroy(direct);
            if (rank == 0)
                snprintf(job->chose, sizeof job->chose, "%s", d.backend);
        }
    }
    if (st != AGMM_SUCCESS) {
        snprintf(job->msg[rank], sizeof job->msg[rank], "set-up: %s", agmm_last_error(ctx));
        job->st[rank] = st;
        goto done;
    }
    /* The agreed input at OFF of `sym`; everything else a wrong read could take is NaN. */
    poison((float *)sym);
    put((float *)((char *)sym + OFF), rank);
    poison((float *)other);
    put((float *)((char *)other + OFF), rank);
    for (int p = 0; p < 2; p++)
        poison(agmm_plan_input(plan[p]));

    agmm_all_reduce_io io = {.out = out, .input = (char *)sym + OFF};
    agmm_plan *mine = plan[0];
    if ((job->c == RC_OTHER_PLAN && rank == 1) || (job->c == RC_RANK0 && rank == 0))
        mine = plan[1];
    if (job->c == RC_OFFSET && rank == 2)
        io.input = sym;
    if (job->c == RC_BUFFER && rank == 1)
        io.input = (char *)other + OFF;
    if (job->c == RC_REFUSED && rank == 1)
        io.out = NULL;
    poison(out);
    job->st[rank] = agmm_all_reduce(mine, &io, NULL);
    snprintf(job->msg[rank], sizeof job->msg[rank], "%s", agmm_last_error(ctx));
    job->exact[rank] = job->st[rank] == AGMM_SUCCESS && sums_exact(out);

    /* A correct run right after, counting its host collectives. */
    agmm_all_reduce_io good = {.out = out, .input = (char *)sym + OFF};
    poison(out);
    const uint32_t before = agmm_ctx_host_seq(ctx);
    job->after[rank] = agmm_all_reduce(plan[0], &good, NULL);
    job->collectives[rank] = agmm_ctx_host_seq(ctx) - before;
    job->after_exact[rank] = job->after[rank] == AGMM_SUCCESS && sums_exact(out);
done:
    agmm_plan_destroy(plan[1]);
    agmm_plan_destroy(plan[0]);
    agmm_symmetric_free(ctx, other);
    agmm_symmetric_free(ctx, sym);
    return AGMM_SUCCESS;
}

/* Runs case c with AGMM_CHECK_RUNS at `check` ("1", or NULL: unset) while the plans are made. */
static rc_job *run_case(rc_case c, const char *check, int use_auto)
{
    rc_job *job = calloc(1, sizeof *job);
    job->c = c;
    job->use_auto = use_auto;
    if (use_auto) { /* measured, one timed run per candidate, nothing cached between the cases */
        setenv("AGMM_TUNE", "1", 1);
        setenv("AGMM_TUNE_RUNS", "1", 1);
        setenv("AGMM_TUNE_CACHE", "", 1);
    }
    if (check)
        setenv("AGMM_CHECK_RUNS", check, 1);
    else
        unsetenv("AGMM_CHECK_RUNS");
    agmm_world *world = test_cpu_world(W, 2.0);
    if (world) {
        agmm_world_run(world, rc_rank, job);
        agmm_world_destroy(world);
    }
    unsetenv("AGMM_CHECK_RUNS");
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_RUNS");
    unsetenv("AGMM_TUNE_CACHE");
    return job;
}

/* Every rank stayed in step: the correct run after the case is exact everywhere, with `per_run`
 * host collectives. */
static int in_step(const rc_job *job, uint32_t per_run)
{
    int ok = 1;
    for (int r = 0; r < W; r++)
        ok &= job->after_exact[r] && job->collectives[r] == per_run;
    return ok;
}

void test_run_check(void)
{
    for (rc_case c = 0; c < RC_COUNT; c++) {
        rc_job *job = run_case(c, "1", 0);
        int ok = 1, same = 1;
        const int culprit = c == RC_OFFSET ? 2 : 1; /* the rank the message names beside rank 0 */
        char needle[64];
        snprintf(needle, sizeof needle, "rank %d runs all_reduce/", culprit);
        for (int r = 0; r < W; r++) {
            if (c == RC_AGREE) {
                ok &= job->st[r] == AGMM_SUCCESS && job->exact[r];
                continue;
            }
            ok &= job->st[r] == AGMM_ERR_INVALID_ARG;
            if (c == RC_REFUSED) {
                /* rank 1 keeps its own message; the others quote it */
                const char *detail = strstr(job->msg[1], "io->out");
                ok &= detail != NULL &&
                      (r == 1 || (strstr(job->msg[r], "run check: rank 1 refused its call: ") && strstr(job->msg[r], detail)));
            } else {
                ok &= strstr(job->msg[r], needle) != NULL && strstr(job->msg[r], "run check: rank 0 runs ") != NULL;
                same &= strcmp(job->msg[r], job->msg[0]) == 0;
            }
        }
        if (c == RC_OTHER_PLAN || c == RC_RANK0)
            ok &= job->names[1] && strstr(job->msg[0], job->names[0]) && strstr(job->msg[0], job->names[1]);
        if (c == RC_OTHER_PLAN || c == RC_BUFFER)
            ok &= strstr(job->msg[0], "(rank 1 differs from rank 0)") != NULL;
        if (c == RC_RANK0) /* the odd one is rank 0: the message says the others agree */
            ok &= strstr(job->msg[0], "(ranks 1 and 2 differ from rank 0)") != NULL;
        if (c == RC_OFFSET)
            ok &= strstr(job->msg[0], "at byte 0 of") && strstr(job->msg[0], "at byte 1088 of") &&
                  strstr(job->msg[0], "(rank 2 differs from rank 0)");
        if (c == RC_BUFFER) {
            /* the same offset in two different buffers */
            static const char at[] = "at byte 1088 of agmm_symmetric_alloc buffer ";
            const char *a = strstr(job->msg[0], at);
            const char *b = a ? strstr(a + 1, at) : NULL;
            ok &= a && b && atoi(a + strlen(at)) == 1 && atoi(b + strlen(at)) == 2;
        }
        agmm_check(ok && same, "run check, %d ranks: %s: %s on every rank%s (rank 0: \"%s\"; rank %d: \"%s\")", W,
                   rc_what[c], c == RC_AGREE ? "exact sums" : "AGMM_ERR_INVALID_ARG naming the rank",
                   c == RC_AGREE || c == RC_REFUSED ? "" : ", the same message", job->msg[0], culprit,
                   job->msg[culprit]);
        agmm_check(in_step(job, 1),
                   "run check, %d ranks: after \"%s\", a correct run is exact on every rank and makes one host "
                   "collective (%u, %u, %u)",
                   W, rc_what[c], job->collectives[0], job->collectives[1], job->collectives[2]);
        free(job);
    }

    /* auto, measuring its candidates (which it runs without the check: they run in lockstep anyway,
     * and the check's exchange would add to the times it compares): the plan is made, and its runs
     * are checked. */
    rc_job *job = run_case(RC_AGREE, "1", 1), *unchecked = run_case(RC_AGREE, NULL, 1);
    int ok = in_step(job, 1) && in_step(unchecked, 0);
    for (int r = 0; r < W; r++)
        ok &= job->st[r] == AGMM_SUCCESS && job->exact[r] && job->plan_collectives[r] == unchecked->plan_collectives[r];
    agmm_check(ok, "run check with auto (AGMM_TUNE=1): the plan (%s; without the check %s) measures its candidates "
               "with as many host collectives as without the check (%u and %u: their runs are not checked), and its "
               "runs are exact and make one host collective each (%u, %u, %u; rank 0: \"%s\")",
               job->chose, unchecked->chose, job->plan_collectives[0], unchecked->plan_collectives[0],
               job->collectives[0], job->collectives[1], job->collectives[2], job->msg[0]);
    free(unchecked);
    free(job);

    /* Off (the default): no host collective per run. */
    job = run_case(RC_AGREE, NULL, 0);
    ok = in_step(job, 0);
    for (int r = 0; r < W; r++)
        ok &= job->st[r] == AGMM_SUCCESS && job->exact[r];
    agmm_check(ok, "run check off (AGMM_CHECK_RUNS unset): runs are exact and make no host collective (%u, %u, %u)",
               job->collectives[0], job->collectives[1], job->collectives[2]);
    free(job);
}
