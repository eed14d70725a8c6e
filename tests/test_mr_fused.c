/* The `fused` matmul_reduce_scatter's protocol in the CPU world: its correctness sweep is in
 * test_matmul_reduce.c with every other backend (W = 1..8, odd shapes, both layouts); here are
 * the waits that make it right (src/backends/matmul_reduce_scatter_fused.c).
 *   late writer   a rank's GEMM starts 30 ms late in every run: its peers must wait for its tile
 *                 flags, or they sum its slot before it is written (zeros in run 1, the previous
 *                 run's partial later: a frozen epoch would take run 1's flags for run 2's)
 *   slow owner    a rank sums 30 ms late in every run while its peers run back to back: they must
 *                 wait for its done word before writing its slots, or it sums their next partials
 *   timeouts      a rank that never runs: its peer's tile wait ends in AGMM_ERR_TIMEOUT naming it;
 *                 a rank that sums 1 s late (bound 0.2 s): its peer's next run's slot wait does
 * M = 70 rows in 32-row CPU tiles over W = 3 (R = 24): tiles straddle blocks, so the deferred sums
 * take part. Every run has fresh small-integer inputs, so the output compares exactly. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "backends/matmul_reduce_scatter_fused.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"

#define M 70
#define N 72
#define K 24
#define RUNS 3
#define MAX_W 4

typedef struct {
    int nranks;
    int late_rank;           /* its GEMM starts late_ms late (-1: none) */
    int slow_rank;           /* its sums start slow_ms late (-1: none) */
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
} fused_job;

static agmm_status fused_rank(agmm_ctx *ctx, void *arg)
{
    fused_job *j = arg;
    const int rank = agmm_ctx_rank(ctx), W = j->nranks;
    int64_t row0, rows = agmm_matmul_reduce_scatter_rows(M, W, rank, &row0);
    agmm_plan *plan = NULL;
    uint16_t *out = malloc((size_t)(rows > 0 ? rows : 1) * N * 2);
    agmm_matmul_reduce_scatter_desc d = {.m = M, .n = N, .k = K, .backend = "fused"};
    agmm_status st = agmm_plan_matmul_reduce_scatter(&plan, ctx, &d);
    if (st == AGMM_SUCCESS && (rank == j->late_rank || rank == j->slow_rank))
        st = agmm_mr_fused_set_delay(plan, rank == j->late_rank ? (int64_t)j->late_ms * 1000000 : 0,
                                     rank == j->slow_rank ? (int64_t)j->slow_ms * 1000000 : 0);
    for (int run = 0; st == AGMM_SUCCESS && run < RUNS && rank != j->idle_rank; run++) {
        test_poison_bf16(out, rows * N);
        agmm_matmul_reduce_scatter_io io = {.a = j->a[run][rank], .b = j->b[run][rank], .out = rows ? out : NULL};
        int64_t t0 = agmm_cpu_now_ns();
        st = agmm_matmul_reduce_scatter(plan, &io, NULL);
        j->run_ms[rank][run] = (double)(agmm_cpu_now_ns() - t0) * 1e-6;
        if (st != AGMM_SUCCESS)
            break;
        j->bad[rank] += agmm_ref_first_mismatch(out, j->ref[run] + row0 * N, rows * N, 2) >= 0;
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
static int run_job(fused_job *j, int W, double timeout_s, uint64_t seed)
{
    int ok = 1;
    double *sum = calloc((size_t)M * N, sizeof(double)), *part = malloc(sizeof(double) * M * N);
    j->nranks = W;
    ok = sum && part;
    for (int run = 0; ok && run < RUNS; run++) {
        memset(sum, 0, sizeof(double) * M * N);
        ok = (j->ref[run] = malloc((size_t)M * N * 2)) != NULL;
        for (int r = 0; ok && r < W; r++) {
            j->a[run][r] = malloc((size_t)M * K * 2);
            j->b[run][r] = malloc((size_t)K * N * 2);
            ok = j->a[run][r] && j->b[run][r];
            if (!ok)
                break;
            test_fill_bf16(j->a[run][r], M * K, test_seed_of(seed, r, run, 'a'), 2);
            test_fill_bf16(j->b[run][r], K * N, test_seed_of(seed, r, run, 'b'), 2);
            ok = agmm_ref_gemm_bf16(j->a[run][r], j->b[run][r], AGMM_LAYOUT_COL_MAJOR, M, N, K, part, NULL) ==
                 AGMM_SUCCESS;
            for (int64_t i = 0; ok && i < M * N; i++)
                sum[i] += part[i];
        }
        for (int64_t i = 0; ok && i < M * N; i++)
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

/* One line per rank: exact in every run; the others' run `run` lasted >= min_ms. */
static void report(const fused_job *j, int who, int run, double min_ms, const char *what)
{
    for (int r = 0; r < j->nranks; r++)
        agmm_check(j->status[r] == AGMM_SUCCESS && j->bad[r] == 0 && (r == who || j->run_ms[r][run] >= min_ms),
                   "matmul_reduce_scatter/fused W=%d M=%d N=%d K=%d rank %d: %s: exact in %d runs (bad %d), run %d took "
                   "%.1f ms (>= %.0f on the others)%s%s",
                   j->nranks, M, N, K, r, what, RUNS, j->bad[r], run, j->run_ms[r][run], min_ms,
                   j->status[r] ? ": " : "", j->status[r] ? j->msg[r] : "");
}

void test_mr_fused_late_writer(void)
{
    fused_job j = job_init();
    j.late_rank = 1;
    j.late_ms = 30;
    if (run_job(&j, 3, 0, 81))
        report(&j, 1, 2, 25.0, "rank 1's GEMM starts 30 ms late in every run; the others wait for its tile flags");
    job_free(&j);
}

void test_mr_fused_slow_owner(void)
{
    fused_job j = job_init();
    j.slow_rank = 2;
    j.slow_ms = 30;
    if (run_job(&j, 3, 0, 82))
        report(&j, 2, 1, 0.0, "rank 2 sums 30 ms late in every run, the others run back to back; they wait for its "
                              "done word before writing its slots");
    job_free(&j);
}

void test_mr_fused_timeouts(void)
{
    fused_job j = job_init();
    j.idle_rank = 1;
    if (run_job(&j, 2, 0.2, 83))
        agmm_check(j.status[0] == AGMM_ERR_TIMEOUT && strstr(j.msg[0], "rank 1's partial of tile") != NULL &&
                       j.run_ms[0][0] < 5000,
                   "matmul_reduce_scatter/fused W=2: rank 1 never runs: rank 0 -> %s in %.0f ms naming rank 1's tile "
                   "flag: \"%s\"",
                   agmm_status_str(j.status[0]), j.run_ms[0][0], j.msg[0]);
    job_free(&j);

    j = job_init();
    j.slow_rank = 1;
    j.slow_ms = 1000;
    if (run_job(&j, 2, 0.2, 84))
        agmm_check(j.status[0] == AGMM_ERR_TIMEOUT && strstr(j.msg[0], "for rank 1 to finish reading its slots") != NULL,
                   "matmul_reduce_scatter/fused W=2: rank 1 sums 1 s late, bound 0.2 s: rank 0's next run -> %s naming "
                   "rank 1's slots: \"%s\"",
                   agmm_status_str(j.status[0]), j.msg[0]);
    job_free(&j);
}
