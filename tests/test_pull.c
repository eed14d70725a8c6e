/* The `pull` backend's protocol in the CPU world: its correctness sweep is in
 * test_cpu_backends.c with every other backend (W = 1..8, odd M and N, K an odd multiple of 8,
 * splits); here are the waits that make it right.
 *   late ready    a rank writes its next shard 30 ms after its peers start the run: they must
 *                 wait for its ready flag, or they read its previous shard (wrong C)
 *   slow reader   a rank reads 30 ms late (the delay hook) while its peers overwrite their
 *                 shards with NaN as soon as their run returns: the closing barrier must hold
 *                 them, or the slow rank reads NaN
 *   timeouts      a rank that never runs: the ready wait ends in AGMM_ERR_TIMEOUT naming it; a
 *                 rank that reads 1 s late: the closing barrier does, naming it
 * Every run has fresh small-integer inputs, so C and the gathered A compare exactly. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "core/clock.h"
#include "backends/ag_matmul_pull.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"

#define M 37
#define N 72
#define K 24
#define RUNS 3
#define MAX_W 4

typedef struct {
    int nranks;
    int late_rank;           /* sleeps late_ms before writing its shard of runs 1.. (-1: none) */
    int slow_rank;           /* reads delay_ms late through the hook (-1: none) */
    int idle_rank;           /* plans but never runs (-1: none) */
    int late_ms, delay_ms;
    int poison_after;        /* every rank but slow_rank writes NaN over its shard after each run */
    atomic_int finished;     /* ranks done running: plans are destroyed (collective, freeing what
                              * peers read) only once every rank is, even after a timeout */
    uint16_t *a[RUNS], *b;   /* the shards of every rank, per run; B */
    uint16_t *ref[RUNS];     /* reference C per run, rounded to bf16 */
    agmm_status status[MAX_W];
    char msg[MAX_W][AGMM_ERROR_LEN];
    int bad[MAX_W];          /* runs whose C or gathered A differed */
    double run_ms[MAX_W][RUNS];
    int64_t start_ns[MAX_W][RUNS], end_ns[MAX_W][RUNS]; /* each run, its late sleep included */
} pull_job;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static agmm_status pull_rank(agmm_ctx *ctx, void *arg)
{
    pull_job *j = arg;
    int rank = agmm_ctx_rank(ctx), W = j->nranks;
    size_t shard = (size_t)M * K;
    agmm_plan *plan = NULL;
    uint16_t *ag = malloc((size_t)W * shard * 2), *c = malloc((size_t)W * M * N * 2);
    agmm_ag_matmul_desc d = {.m = M, .n = N, .k = K, .splits = 2, .backend = "pull"};
    agmm_status st = agmm_plan_ag_matmul(&plan, ctx, &d);
    if (st == AGMM_SUCCESS && rank == j->slow_rank)
        st = agmm_pull_set_delay(plan, (int64_t)j->delay_ms * 1000000);
    for (int run = 0; st == AGMM_SUCCESS && run < RUNS && rank != j->idle_rank; run++) {
        j->start_ns[rank][run] = agmm_mono_ns();
        if (rank == j->late_rank && run > 0)
            sleep_ms(j->late_ms);
        memcpy(agmm_plan_input(plan), j->a[run] + rank * shard, shard * 2);
        test_poison_bf16(ag, (int64_t)(W * shard));
        test_poison_bf16(c, (int64_t)W * M * N);
        agmm_ag_matmul_io io = {.b = j->b, .a_gathered = ag, .c = c};
        int64_t t0 = agmm_mono_ns();
        st = agmm_ag_matmul(plan, &io, NULL);
        j->end_ns[rank][run] = agmm_mono_ns();
        j->run_ms[rank][run] = (double)(j->end_ns[rank][run] - t0) * 1e-6;
        if (st != AGMM_SUCCESS)
            break;
        /* At once: a peer that had not finished reading this shard would now read NaN. */
        if (j->poison_after && rank != j->slow_rank)
            test_poison_bf16(agmm_plan_input(plan), (int64_t)shard);
        j->bad[rank] += agmm_ref_first_mismatch(c, j->ref[run], (int64_t)W * M * N, 2) >= 0 ||
                        agmm_ref_first_mismatch(ag, j->a[run], (int64_t)(W * shard), 2) >= 0;
    }
    j->status[rank] = st;
    snprintf(j->msg[rank], sizeof j->msg[rank], "%s", agmm_last_error(ctx));
    atomic_fetch_add(&j->finished, 1);
    for (int waited = 0; atomic_load(&j->finished) < W && waited < 20000; waited++)
        sleep_ms(1);
    agmm_plan_destroy(plan);
    free(ag);
    free(c);
    return AGMM_SUCCESS;
}

/* Runs the job in a CPU world of W ranks with fresh inputs; 0 if it could not. */
static int run_job(pull_job *j, int W, double timeout_s, uint64_t seed)
{
    size_t shard = (size_t)M * K;
    int ok = 1;
    j->nranks = W;
    j->b = malloc((size_t)K * N * 2);
    double *ref = malloc(sizeof(double) * (size_t)W * M * N);
    ok = j->b && ref;
    for (int run = 0; ok && run < RUNS; run++) {
        j->a[run] = malloc((size_t)W * shard * 2);
        j->ref[run] = malloc((size_t)W * M * N * 2);
        ok = j->a[run] && j->ref[run];
        if (ok) {
            test_fill_bf16(j->a[run], (int64_t)(W * shard), test_seed_of(seed, 0, run, 1), 2);
            if (run == 0)
                test_fill_bf16(j->b, K * N, test_seed_of(seed, 0, 0, 2), 2);
            ok = agmm_ref_gemm_bf16(j->a[run], j->b, AGMM_LAYOUT_COL_MAJOR, (int64_t)W * M, N, K, ref, j->ref[run]) ==
                 AGMM_SUCCESS;
        }
    }
    agmm_world *world = ok ? test_cpu_world(W, timeout_s) : NULL;
    ok = world != NULL;
    if (ok)
        agmm_world_run(world, pull_rank, j);
    agmm_world_destroy(world);
    free(ref);
    return ok;
}

static void job_free(pull_job *j)
{
    free(j->b);
    for (int run = 0; run < RUNS; run++)
        free(j->a[run]), free(j->ref[run]);
}

static pull_job job_init(void)
{
    return (pull_job){.late_rank = -1, .slow_rank = -1, .idle_rank = -1};
}

/* One line per rank: right in every run, and the others' run `run` ended >= 25 ms after rank
 * `who`'s began (they waited for it, 30 ms late; measured from its start, not theirs, so that a
 * rank scheduled late into the run does not seem to have waited less). */
static void report(const pull_job *j, int who, int run, const char *what)
{
    for (int r = 0; r < j->nranks; r++) {
        const double after_ms = (double)(j->end_ns[r][run] - j->start_ns[who][run]) * 1e-6;
        agmm_check(j->status[r] == AGMM_SUCCESS && j->bad[r] == 0 && (r == who || after_ms >= 25.0),
                   "ag_matmul/pull W=%d M=%d N=%d K=%d rank %d: %s: C and gathered A exact in %d runs (bad %d), run %d "
                   "ended %.1f ms after rank %d's began (>= 25 on the others)%s%s",
                   j->nranks, M, N, K, r, what, RUNS, j->bad[r], run, after_ms, who, j->status[r] ? ": " : "",
                   j->status[r] ? j->msg[r] : "");
    }
}

void test_pull_late_ready(void)
{
    pull_job j = job_init();
    j.late_rank = 1;
    j.late_ms = 30;
    if (run_job(&j, 3, 0, 71))
        report(&j, 1, 1, "rank 1 writes its shard 30 ms late; the others wait for its ready flag");
    job_free(&j);
}

void test_pull_slow_reader(void)
{
    pull_job j = job_init();
    j.slow_rank = 2;
    j.delay_ms = 30;
    j.poison_after = 1;
    if (run_job(&j, 3, 0, 72))
        report(&j, 2, 0, "rank 2 reads 30 ms late, the others write NaN over their shards as soon as a run returns; "
                         "the closing barrier holds them");
    job_free(&j);
}

void test_pull_timeouts(void)
{
    pull_job j = job_init();
    j.idle_rank = 1;
    if (run_job(&j, 2, 0.2, 73))
        agmm_check(j.status[0] == AGMM_ERR_TIMEOUT && strstr(j.msg[0], "rank 1's ready flag") != NULL &&
                       j.run_ms[0][0] < 5000,
                   "ag_matmul/pull W=2: rank 1 never runs: rank 0 -> %s in %.0f ms naming rank 1's ready flag: \"%s\"",
                   agmm_status_str(j.status[0]), j.run_ms[0][0], j.msg[0]);
    job_free(&j);

    j = job_init();
    j.slow_rank = 1;
    j.delay_ms = 1000;
    if (run_job(&j, 2, 0.2, 74))
        agmm_check(j.status[0] == AGMM_ERR_TIMEOUT && strstr(j.msg[0], "closing barrier") != NULL &&
                       strstr(j.msg[0], "rank 1 never arrived") != NULL,
                   "ag_matmul/pull W=2: rank 1 reads 1 s late, bound 0.2 s: rank 0's closing barrier -> %s naming "
                   "rank 1: \"%s\"",
                   agmm_status_str(j.status[0]), j.msg[0]);
    job_free(&j);
}
