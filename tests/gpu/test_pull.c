/* GPU tests of the `pull` backend's protocol, in emulated worlds (ranks share the GPU, so peers'
 * shards are read through the symmetric heap's pointers as across NVLink). Its correctness sweep
 * over W = 1..8 and odd shapes is in test_ag_matmul.c with the other backends.
 *   late ready    a rank enqueues its next shard 50 ms after its peers started the run: their
 *                 GEMMs must wait for its ready flag, or they read its previous shard
 *   slow reader   a rank's GEMM starts 50 ms late (the delay hook) while its peers write NaN over
 *                 their shards right after their runs, on their streams: the closing barrier in
 *                 the kernel must hold them
 *   io.input      the shard alternates between two caller buffers from agmm_symmetric_alloc: the
 *                 peers' tensor maps follow the pointers (the plan's own input holds zeros)
 *   timeout       a rank that never runs: its peer's ready wait ends in AGMM_ERR_TIMEOUT naming it
 * Every run has fresh inputs (and -A), outputs poisoned with NaN: the gathered A must equal the
 * shards bit for bit and C the fp64 reference within 1e-2 (a NaN fails).
 *   map slots     an eager run of the io.input a graph was captured with, before the graph ever
 *                 ran; the graph still reads through its own maps after eager runs with more
 *                 other io.inputs than the plan keeps maps of; and a capture that needs one more
 *                 distinct input than the slots graphs leave is refused, saying why (small
 *                 integers there, compared exactly: steps.c) */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "backends/ag_matmul_pull.h"
#include "core/numeric.h"
#include "cpu/reference.h"
#include "gpu_tests.h"
#include "kernels/gemm/gemm_engine.h"
#include "../harness.h"

#define RUNS 3
#define TOL 1e-2

typedef struct {
    pthread_barrier_t setup;   /* every rank has allocated and uploaded before any rank runs */
    int nranks;
    int64_t m, n, k;
    int late_rank, late_ms;    /* enqueues runs 1.. late_ms late (-1: none) */
    int slow_rank, delay_ms;   /* its GEMM starts delay_ms late (-1: none) */
    int idle_rank;             /* plans but never runs (-1: none) */
    int poison_after;          /* the others write NaN over their shard after each run */
    int use_input;             /* the shard lives in caller buffers, alternating per run */
    atomic_int rank0_done;
    uint16_t *a[RUNS], *b;     /* every rank's shard per run (run 1 is -A of run 0); B col-major */
    double *c_ref[RUNS];
    agmm_status status[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][512];
    int bad[AGMM_MAX_RANKS];
    char bad_what[AGMM_MAX_RANKS][160];
    double run_ms[AGMM_MAX_RANKS][RUNS];
} pull_job;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void note_bad(pull_job *j, int rank, const char *what, int run)
{
    if (j->bad[rank]++ == 0)
        snprintf(j->bad_what[rank], sizeof j->bad_what[rank], "run %d: %s", run, what);
}

static agmm_status pull_rank(agmm_ctx *ctx, void *arg)
{
    pull_job *j = arg;
    int rank = agmm_ctx_rank(ctx), W = j->nranks;
    size_t shard = (size_t)(j->m * j->k), ag = (size_t)W * shard, c = (size_t)W * (size_t)(j->m * j->n);
    agmm_plan *plan = NULL;
    cudaStream_t s = NULL;
    void *d_b = NULL, *d_ag = NULL, *d_c = NULL, *sym[2] = {NULL, NULL};
    uint16_t *h_a = NULL, *h_ag = NULL, *h_c = NULL;
    int setup_ok = 0;
    agmm_ag_matmul_desc d = {.m = j->m, .n = j->n, .k = j->k, .b_layout = AGMM_LAYOUT_COL_MAJOR, .splits = 2,
                             .backend = "pull"};
    agmm_status st = agmm_plan_ag_matmul(&plan, ctx, &d);
    /* Collective, so every rank asks whatever failed before. */
    for (int i = 0; i < 2 && j->use_input; i++)
        if (agmm_symmetric_alloc(ctx, shard * 2 + 4096, &sym[i]) != AGMM_SUCCESS && st == AGMM_SUCCESS)
            st = AGMM_ERR_NO_MEMORY;
    if (st == AGMM_SUCCESS && rank == j->slow_rank)
        st = agmm_pull_set_delay(plan, (int64_t)j->delay_ms * 1000000);
    snprintf(j->msg[rank], sizeof j->msg[rank], "setup: %s", agmm_last_error(ctx));
    if (st == AGMM_SUCCESS && (s = gpu_rank_stream(rank, 0)) != NULL &&
        cudaMalloc(&d_b, (size_t)(j->k * j->n) * 2) == cudaSuccess && cudaMalloc(&d_ag, ag * 2) == cudaSuccess &&
        cudaMalloc(&d_c, c * 2) == cudaSuccess && cudaMallocHost((void **)&h_a, RUNS * shard * 2) == cudaSuccess &&
        cudaMallocHost((void **)&h_ag, ag * 2) == cudaSuccess && cudaMallocHost((void **)&h_c, c * 2) == cudaSuccess &&
        cudaMemcpy(d_b, j->b, (size_t)(j->k * j->n) * 2, cudaMemcpyHostToDevice) == cudaSuccess) {
        for (int run = 0; run < RUNS; run++)
            memcpy(h_a + run * shard, j->a[run] + rank * shard, shard * 2);
        setup_ok = 1;
    }
    j->status[rank] = setup_ok ? AGMM_SUCCESS : st != AGMM_SUCCESS ? st : AGMM_ERR_CUDA;
    /* Nobody allocates or copies from pageable memory once a peer's run may be spinning on the
     * shared GPU (rank_gpu.h's rule for emulated worlds). */
    pthread_barrier_wait(&j->setup);
    for (int run = 0; setup_ok && run < RUNS && rank != j->idle_rank; run++) {
        if (rank == j->late_rank && run > 0) {
            struct timespec nap = {0, (long)j->late_ms * 1000000};
            nanosleep(&nap, NULL);
        }
        /* At a 4 KB offset in the caller's buffer, alternating buffers: the maps change every run. */
        void *in = j->use_input ? (char *)sym[run % 2] + 4096 : agmm_plan_input(plan);
        agmm_ag_matmul_io io = {.b = d_b, .a_gathered = d_ag, .c = d_c, .input = j->use_input ? in : NULL};
        cudaMemcpyAsync(in, h_a + run * shard, shard * 2, cudaMemcpyHostToDevice, s);
        cudaMemsetAsync(d_ag, 0xff, ag * 2, s);
        cudaMemsetAsync(d_c, 0xff, c * 2, s);
        double t0 = now_ms();
        st = agmm_ag_matmul(plan, &io, s);
        if (st == AGMM_SUCCESS && j->poison_after && rank != j->slow_rank)
            cudaMemsetAsync(in, 0xff, shard * 2, s); /* a peer still reading it would read NaN */
        cudaMemcpyAsync(h_ag, d_ag, ag * 2, cudaMemcpyDeviceToHost, s);
        cudaMemcpyAsync(h_c, d_c, c * 2, cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_sync(ctx);
        j->run_ms[rank][run] = now_ms() - t0;
        j->status[rank] = st;
        if (st != AGMM_SUCCESS) {
            snprintf(j->msg[rank], sizeof j->msg[rank], "run %d: %s", run, agmm_last_error(ctx));
            break;
        }
        if (agmm_ref_first_mismatch(h_ag, j->a[run], (int64_t)ag, 2) >= 0)
            note_bad(j, rank, "gathered A differs from the shards", run);
        double rel = agmm_ref_rel_frobenius(h_c, AGMM_DTYPE_BF16, j->c_ref[run], (int64_t)c);
        if (!(rel <= TOL)) {
            char what[96];
            snprintf(what, sizeof what, "C rel err %.3g > %.0e (NaN: read a poisoned or stale shard)", rel, TOL);
            note_bad(j, rank, what, run);
        }
    }
    if (rank == 0)
        atomic_store(&j->rank0_done, 1);
    else if (rank == j->idle_rank)
        gpu_wait_flag(&j->rank0_done, 30.0); /* plan destruction meets the peers */
    if (s)
        cudaStreamSynchronize(s);
    agmm_plan_destroy(plan);
    for (int i = 0; i < 2; i++)
        agmm_symmetric_free(ctx, sym[i]);
    cudaFree(d_b);
    cudaFree(d_ag);
    cudaFree(d_c);
    cudaFreeHost(h_a);
    cudaFreeHost(h_ag);
    cudaFreeHost(h_c);
    return AGMM_SUCCESS;
}

/* Fresh inputs for W ranks (run 1 is -A of run 0, run 2 new), the references, and the world. */
static int run_job(pull_job *j, int W, double timeout_s, uint64_t seed)
{
    size_t ag = (size_t)W * (size_t)(j->m * j->k), c = (size_t)W * (size_t)(j->m * j->n);
    int ok = 1;
    j->nranks = W;
    j->b = malloc((size_t)(j->k * j->n) * 2);
    ok = j->b != NULL;
    for (int run = 0; ok && run < RUNS; run++) {
        j->a[run] = malloc(ag * 2);
        j->c_ref[run] = malloc(c * sizeof(double));
        ok = j->a[run] && j->c_ref[run];
    }
    for (size_t i = 0; ok && i < (size_t)(j->k * j->n); i++)
        j->b[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
    for (size_t i = 0; ok && i < ag; i++) {
        j->a[0][i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
        j->a[1][i] = j->a[0][i] ^ 0x8000u;
        j->a[2][i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
    }
    for (int run = 0; ok && run < RUNS; run++)
        ok = agmm_ref_gemm_bf16(j->a[run], j->b, AGMM_LAYOUT_COL_MAJOR, (int64_t)W * j->m, j->n, j->k, j->c_ref[run],
                                NULL) == AGMM_SUCCESS;
    agmm_world *w = ok ? gpu_test_world(AGMM_WORLD_EMULATED, W, timeout_s) : NULL;
    if (w) {
        pthread_barrier_init(&j->setup, NULL, (unsigned)W);
        agmm_world_run(w, pull_rank, j);
        pthread_barrier_destroy(&j->setup);
    } else if (ok) {
        ok = 0;
    } else {
        agmm_check(0, "ag_matmul/pull W=%d: out of host memory", W);
    }
    agmm_world_destroy(w);
    free(j->b);
    for (int run = 0; run < RUNS; run++)
        free(j->a[run]), free(j->c_ref[run]);
    return ok;
}

static pull_job *job_new(int64_t m, int64_t n, int64_t k)
{
    pull_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        agmm_check(0, "ag_matmul/pull: out of host memory");
        return NULL;
    }
    j->m = m, j->n = n, j->k = k;
    j->late_rank = j->slow_rank = j->idle_rank = -1;
    return j;
}

/* One line per rank: no failure, no wrong run, and (where min_ms > 0) runs of the other ranks
 * that lasted at least min_ms (they waited for `who`). */
static void report(const pull_job *j, const char *what, int who, double min_ms, int timed_run)
{
    for (int r = 0; r < j->nranks; r++) {
        int waited = r == who || min_ms <= 0 || j->run_ms[r][timed_run] >= min_ms;
        agmm_check(j->status[r] == AGMM_SUCCESS && j->bad[r] == 0 && waited,
                   "ag_matmul/pull W=%d M=%lld N=%lld K=%lld rank %d: %s: %d runs right (%s), run %d took %.1f ms%s%s",
                   j->nranks, (long long)j->m, (long long)j->n, (long long)j->k, r, what, RUNS,
                   j->bad[r] ? j->bad_what[r] : "gathered A exact, C within 1e-2", timed_run, j->run_ms[r][timed_run],
                   j->status[r] ? ": " : "", j->status[r] ? j->msg[r] : "");
    }
}

void test_pull_protocol_gpu(void)
{
    pull_job *j = job_new(200, 264, 136);
    if (j) {
        j->late_rank = 1, j->late_ms = 50;
        if (run_job(j, 3, 5.0, 0x9011))
            report(j, "rank 1 enqueues its shard 50 ms late; the others wait for its ready flag (>= 45 ms)", 1, 45.0, 1);
        free(j);
    }
    j = job_new(131, 200, 72);
    if (j) {
        j->slow_rank = 2, j->delay_ms = 50, j->poison_after = 1;
        if (run_job(j, 3, 5.0, 0x9012))
            report(j, "rank 2's GEMM starts 50 ms late, the others write NaN over their shards right after each run; "
                      "the closing barrier holds them (>= 45 ms)",
                   2, 45.0, 0);
        free(j);
    }
    j = job_new(67, 129, 64);
    if (j) {
        j->use_input = 1;
        if (run_job(j, 4, 5.0, 0x9013))
            report(j, "the shard in caller buffers, alternating every run (the peers' maps follow)", -1, 0, 0);
        free(j);
    }
}

void test_pull_timeout_gpu(void)
{
    pull_job *j = job_new(128, 128, 64);
    if (j == NULL)
        return;
    j->idle_rank = 1;
    if (run_job(j, 2, 0.3, 0x9014))
        agmm_check(j->status[0] == AGMM_ERR_TIMEOUT && strstr(j->msg[0], "peer's shard") != NULL &&
                       strstr(j->msg[0], "rank 1") != NULL && j->run_ms[0][0] < 10000,
                   "ag_matmul/pull W=2: rank 1 never runs: rank 0 -> %s in %.0f ms naming the wait for rank 1's "
                   "shard: \"%s\"",
                   agmm_status_str(j->status[0]), j->run_ms[0][0], j->msg[0]);
    free(j);
}

/* ---- map slots under capture ---- */

#define SLOT_STEPS (AGMM_GEMM_MAP_SLOTS + 2) /* distinct io.inputs, more than a plan keeps maps of */

typedef struct {
    gpu_rank_results res;
    gpu_rank_results refused; /* the capture that needs one slot too many: its failure */
} slots_job;

static agmm_status slots_rank(agmm_ctx *ctx, void *arg)
{
    static const step_case pull_case = {AGMM_OP_AG_MATMUL, "pull", 40, 72, 64, 2, 0, AGMM_DTYPE_BF16, 0};
    slots_job *j = arg;
    const int rank = agmm_ctx_rank(ctx);
    cudaStream_t s;
    cudaGraphExec_t exec = NULL, more = NULL;
    step_rank sr;
    int ok = step_job_start(&j->res, rank, &s);
    /* Collective: every rank plans, whatever failed before. Step i reads slot i of one symmetric
     * buffer: a distinct io.input per step. */
    ok = step_rank_init(&sr, ctx, &pull_case, SLOT_STEPS, STEP_SYMMETRIC, &j->res) && ok;
    ok = ok && step_capture(&sr, 0, 1, s, &exec); /* step 0's maps: the graph's slot */
    ok = step_agree(&sr, ok);
    /* Eager runs: step 0 first (its slot was filled only inside the capture, which has not run),
     * then every other input: more distinct sets than slots, so slots are refilled. */
    ok = ok && step_fill(&sr, 0x5107, s);
    for (int i = 0; i < SLOT_STEPS && ok; i++)
        ok = step_enqueue(&sr, i, s) == AGMM_SUCCESS;
    ok = ok && step_download(&sr, s);
    for (int i = 0; i < SLOT_STEPS && ok; i++) {
        char what[32];
        snprintf(what, sizeof what, "eager step %d", i);
        ok = step_check(&sr, i, what);
    }
    /* The graph still reads step 0's input through the maps it was captured with. */
    ok = ok && step_fill(&sr, 0x5108, s);
    cudaError_t e = ok ? cudaGraphLaunch(exec, s) : cudaSuccess;
    if (e != cudaSuccess)
        ok = gpu_rank_fail(&j->res, rank, "cudaGraphLaunch: %s", cudaGetErrorString(e));
    ok = ok && step_download(&sr, s) && step_check(&sr, 0, "replay after the eager runs");
    ok = step_agree(&sr, ok);
    /* A capture of the other inputs: each new one takes a slot for the graph, until the slots
     * left run out (step 0's graph holds one). The failure goes to `refused`. */
    if (ok) {
        j->refused.ok[rank] = 1;
        sr.res = &j->refused;
        step_capture(&sr, 1, AGMM_GEMM_MAP_SLOTS, s, &more);
        sr.res = &j->res;
    }
    const cudaGraphExec_t execs[2] = {exec, more};
    step_rank_end(&sr, s, execs, 2, ok);
    return AGMM_SUCCESS;
}

void test_pull_graph_slots_gpu(void)
{
    slots_job *j = calloc(1, sizeof *j);
    agmm_world *w = j ? gpu_step_world(2) : NULL;
    if (w == NULL) {
        agmm_check(j != NULL, "ag_matmul/pull map slots: out of host memory");
        free(j);
        return;
    }
    char what[320];
    snprintf(what, sizeof what, "ag_matmul/pull W=2 M=40 N=72 K=64: eager runs of io.input 0 (captured, graph not yet "
             "run) and of %d others exact, then the graph of io.input 0 (%d map slots)", SLOT_STEPS - 1,
             AGMM_GEMM_MAP_SLOTS);
    gpu_report_job(agmm_world_run(w, slots_rank, j), &j->res, 2, what);
    char want[32];
    snprintf(want, sizeof want, "step %d: run:", AGMM_GEMM_MAP_SLOTS);
    for (int r = 0; r < 2; r++)
        agmm_check(j->res.ok[r] && !j->refused.ok[r] && strstr(j->refused.msg[r], want) &&
                       strstr(j->refused.msg[r], agmm_status_str(AGMM_ERR_UNSUPPORTED)) &&
                       strstr(j->refused.msg[r], "CUDA graphs captured from this plan hold all of them"),
                   "ag_matmul/pull W=2 rank %d: a capture of %d more io.inputs is refused at the %dth (the graphs hold "
                   "every slot): \"%s\"", r, AGMM_GEMM_MAP_SLOTS, AGMM_GEMM_MAP_SLOTS, j->refused.msg[r]);
    agmm_world_destroy(w);
    free(j);
}
