/* The `fused` row-parallel matmuls' protocol in the CPU world, for matmul_reduce_scatter and
 * matmul_all_reduce alike: their correctness sweep is in test_matmul_reduce.c with every other
 * backend (W = 1..8, odd shapes, both layouts); here are the waits that make it right
 * (src/backends/matmul_reduce_fused.c).
 *   late writer   a rank's GEMM starts 30 ms late in every run: its peers must wait for its tile
 *                 flags, or they sum its slot before it is written (zeros in run 1, the previous
 *                 run's partial later: a frozen epoch would take run 1's flags for run 2's)
 *   slow owner    a rank's last sum of every run starts 30 ms late while its peers run back to back:
 *                 they must wait for its done word before writing its slots, or it sums their next
 *                 partials
 *   timeouts      a rank that never runs: its peer's tile wait ends in AGMM_ERR_TIMEOUT naming it;
 *                 a rank whose last sum is 1 s late (bound 0.2 s): its peer's next run's slot wait
 *                 does
 * The reduce-scatter's M = 70 rows in 32-row CPU tiles over W = 3 (R = 24): tiles straddle blocks,
 * so the deferred sums take part. Every run has fresh small-integer inputs, so the output compares exactly. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "core/clock.h"
#include "backends/matmul_reduce_fused.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"

/* The shapes, [0] reduce-scatter, [1] all-reduce: the reduce-scatter's 3 x 2 CPU tiles straddle its
 * blocks; the all-reduce's is one tile, so that a rank's first tile of a run is the one it sums last
 * in the run before: there, and only there, the done word is all that stands between a fast peer's
 * next stores and a slow owner's last sum (with more tiles a peer waits at its first sum for the
 * owner's next run). */
static const int64_t shape_m[2] = {70, 30}, shape_n[2] = {72, 56};
#define K 24
#define RUNS 3
#define MAX_W 4

typedef struct {
    agmm_op op;
    int64_t m, n;            /* the shape of op (above) */
    int nranks;
    int late_rank;           /* its GEMM starts late_ms late (-1: none) */
    int slow_rank;           /* its last sum of a run starts slow_ms late (-1: none) */
    int idle_rank;           /* plans but never runs (-1: none) */
    int late_ms, slow_ms;
    atomic_int finished;     /* ranks done running: plans are destroyed (collective, freeing what
                              * peers read) only once every rank is, even after a timeout */
    uint16_t *a[RUNS][MAX_W], *b[RUNS][MAX_W];
    uint16_t *ref[RUNS];     /* S rounded to bf16, per run */
    agmm_status status[MAX_W];
    char msg[MAX_W][AGMM_ERROR_LEN];
    int bad[MAX_W];          /* runs whose rows differed */
    double run_ms[MAX_W][RUNS];
    int64_t start_ns[MAX_W][RUNS], end_ns[MAX_W][RUNS]; /* each run's call, on the monotonic clock */
} fused_job;

static agmm_status fused_rank(agmm_ctx *ctx, void *arg)
{
    fused_job *j = arg;
    const int rank = agmm_ctx_rank(ctx), W = j->nranks, all = j->op == AGMM_OP_MATMUL_ALL_REDUCE;
    int64_t row0 = 0, rows = all ? j->m : agmm_matmul_reduce_scatter_rows(j->m, W, rank, &row0);
    agmm_plan *plan = NULL;
    uint16_t *out = malloc((size_t)(rows > 0 ? rows : 1) * j->n * 2);
    agmm_matmul_reduce_scatter_desc d = {.m = j->m, .n = j->n, .k = K, .backend = "fused"};
    agmm_matmul_all_reduce_desc ad = {.m = j->m, .n = j->n, .k = K, .backend = "fused"};
    agmm_status st =
        all ? agmm_plan_matmul_all_reduce(&plan, ctx, &ad) : agmm_plan_matmul_reduce_scatter(&plan, ctx, &d);
    if (st == AGMM_SUCCESS && (rank == j->late_rank || rank == j->slow_rank))
        st = agmm_mr_fused_set_delay(plan, rank == j->late_rank ? (int64_t)j->late_ms * 1000000 : 0,
                                     rank == j->slow_rank ? (int64_t)j->slow_ms * 1000000 : 0);
    for (int run = 0; st == AGMM_SUCCESS && run < RUNS && rank != j->idle_rank; run++) {
        test_poison_bf16(out, rows * j->n);
        agmm_matmul_reduce_scatter_io io = {.a = j->a[run][rank], .b = j->b[run][rank], .out = rows ? out : NULL};
        agmm_matmul_all_reduce_io aio = {.a = j->a[run][rank], .b = j->b[run][rank], .c = out};
        int64_t t0 = agmm_mono_ns();
        st = all ? agmm_matmul_all_reduce(plan, &aio, NULL) : agmm_matmul_reduce_scatter(plan, &io, NULL);
        j->start_ns[rank][run] = t0, j->end_ns[rank][run] = agmm_mono_ns();
        j->run_ms[rank][run] = (double)(j->end_ns[rank][run] - t0) * 1e-6;
        if (st != AGMM_SUCCESS)
            break;
        j->bad[rank] += agmm_ref_first_mismatch(out, j->ref[run] + row0 * j->n, rows * j->n, 2) >= 0;
    }
    j->status[rank] = st;
    snprintf(j->msg[rank], sizeof j->msg[rank], "%s", agmm_last_error(ctx));
    atomic_fetch_add(&j->finished, 1);
    for (int waited = 0; atomic_load(&j->finished) < W && waited < 20000; waited++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    agmm_plan_destroy(plan);
    free(out);
    return AGMM_SUCCESS;
}

/* Runs the job in a CPU world of W ranks with fresh inputs per run; 0 if it could not. */
static int run_job(fused_job *j, agmm_op op, int W, double timeout_s, uint64_t seed)
{
    int ok = 1;
    j->op = op;
    j->m = shape_m[op == AGMM_OP_MATMUL_ALL_REDUCE];
    j->n = shape_n[op == AGMM_OP_MATMUL_ALL_REDUCE];
    double *sum = calloc((size_t)(j->m * j->n), sizeof(double)), *part = malloc(sizeof(double) * j->m * j->n);
    j->nranks = W;
    ok = sum && part;
    for (int run = 0; ok && run < RUNS; run++) {
        memset(sum, 0, sizeof(double) * j->m * j->n);
        ok = (j->ref[run] = malloc((size_t)j->m * j->n * 2)) != NULL;
        for (int r = 0; ok && r < W; r++) {
            j->a[run][r] = malloc((size_t)j->m * K * 2);
            j->b[run][r] = malloc((size_t)K * j->n * 2);
            ok = j->a[run][r] && j->b[run][r];
            if (!ok)
                break;
            test_fill_bf16(j->a[run][r], j->m * K, test_seed_of(seed, r, run, 'a'), 2);
            test_fill_bf16(j->b[run][r], K * j->n, test_seed_of(seed, r, run, 'b'), 2);
            ok = agmm_ref_gemm_bf16(j->a[run][r], j->b[run][r], AGMM_LAYOUT_COL_MAJOR, j->m, j->n, K, part,
                                    NULL) == AGMM_SUCCESS;
            for (int64_t i = 0; ok && i < j->m * j->n; i++)
                sum[i] += part[i];
        }
        for (int64_t i = 0; ok && i < j->m * j->n; i++)
            j->ref[run][i] = agmm_ref_f64_to_bf16(sum[i]); /* integers: the fp32 rank-ordered sum, exactly */
    }
    agmm_world *world = ok ? test_cpu_world(W, timeout_s) : NULL;
    ok = world != NULL;
    if (ok)
        agmm_world_run(world, fused_rank, j);
    agmm_world_destroy(world);
    free(sum);
    free(part);
    return ok;
}

static void job_free(fused_job *j)
{
    for (int run = 0; run < RUNS; run++) {
        free(j->ref[run]);
        for (int r = 0; r < MAX_W; r++)
            free(j->a[run][r]), free(j->b[run][r]);
    }
}

static fused_job job_init(void)
{
    return (fused_job){.late_rank = -1, .slow_rank = -1, .idle_rank = -1};
}

/* One line per rank: exact in every run; the others' run `run` ended >= min_ms after rank who's
 * began (they waited for it; measured from its start, not theirs, so that a rank scheduled late
 * into the run does not seem to have waited less). */
static void report(const fused_job *j, int who, int run, double min_ms, const char *what)
{
    for (int r = 0; r < j->nranks; r++) {
        const double after_ms = (double)(j->end_ns[r][run] - j->start_ns[who][run]) * 1e-6;
        agmm_check(j->status[r] == AGMM_SUCCESS && j->bad[r] == 0 && (r == who || after_ms >= min_ms),
                   "%s/fused W=%d M=%d N=%d K=%d rank %d: %s: exact in %d runs (bad %d), run %d ended %.1f ms "
                   "after rank %d's began (>= %.0f on the others)%s%s",
                   agmm_op_name(j->op), j->nranks, (int)j->m, (int)j->n, K, r, what, RUNS, j->bad[r], run, after_ms,
                   who, min_ms, j->status[r] ? ": " : "", j->status[r] ? j->msg[r] : "");
    }
}

static const agmm_op ops[2] = {AGMM_OP_MATMUL_REDUCE_SCATTER, AGMM_OP_MATMUL_ALL_REDUCE};

void test_mr_fused_late_writer(void)
{
    for (int o = 0; o < 2; o++) {
        fused_job j = job_init();
        j.late_rank = 1;
        j.late_ms = 30;
        if (run_job(&j, ops[o], 3, 0, 81 + (uint64_t)o))
            report(&j, 1, 2, 25.0, "rank 1's GEMM starts 30 ms late in every run; the others wait for its tile flags");
        job_free(&j);
    }
}

void test_mr_fused_slow_owner(void)
{
    for (int o = 0; o < 2; o++) {
        fused_job j = job_init();
        j.slow_rank = 2;
        j.slow_ms = 30;
        if (run_job(&j, ops[o], 3, 0, 83 + (uint64_t)o))
            report(&j, 2, 1, 0.0, "rank 2's last sum is 30 ms late in every run, the others run back to back; they "
                                  "wait for its done word before writing its slots");
        job_free(&j);
    }
}

void test_mr_fused_timeouts(void)
{
    for (int o = 0; o < 2; o++) {
        fused_job j = job_init();
        j.idle_rank = 1;
        if (run_job(&j, ops[o], 2, 0.2, 85 + (uint64_t)o))
            agmm_check(j.status[0] == AGMM_ERR_TIMEOUT && strstr(j.msg[0], "rank 1's partial of tile") != NULL &&
                           j.run_ms[0][0] < 5000,
                       "%s/fused W=2: rank 1 never runs: rank 0 -> %s in %.0f ms naming rank 1's tile flag: \"%s\"",
                       agmm_op_name(ops[o]), agmm_status_str(j.status[0]), j.run_ms[0][0], j.msg[0]);
        job_free(&j);

        j = job_init();
        j.slow_rank = 1;
        j.slow_ms = 1000;
        if (run_job(&j, ops[o], 2, 0.2, 87 + (uint64_t)o))
            agmm_check(j.status[0] == AGMM_ERR_TIMEOUT &&
                           strstr(j.msg[0], "for rank 1 to finish reading its slots") != NULL,
                       "%s/fused W=2: rank 1's last sum is 1 s late, bound 0.2 s: rank 0's next run -> %s naming "
                       "rank 1's slots: \"%s\"",
                       agmm_op_name(ops[o]), agmm_status_str(j.status[0]), j.msg[0]);
        job_free(&j);
    }
}
