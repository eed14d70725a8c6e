/* Steps back to back (agmm.h: a rank may overwrite its input, B and outputs as soon as its run
 * has returned): every CPU backend runs 200 steps in a row with fresh inputs each step, one rank
 * slowed at random each step by AGMM_FAULT=rank=any,at=run,action=delay (shorter than the
 * timeout), and every rank overwrites its input and B with NaN the moment its run returns. Every
 * step's result is checked exactly: a run that returned while a peer could still read this rank's
 * input would show the NaN in that peer's result (and, under ThreadSanitizer, a race). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/clock.h"
#include "core/numeric.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"

enum { ST_W = 4, ST_STEPS = 200, ST_M = 8, ST_N = 16, ST_K = 32, ST_AR_N = 300 };
#define ST_DELAY_MS 2
#define ST_TIMEOUT_S 0.5

typedef struct {
    int all_reduce;
    const char *backend;
    int steps_ok[ST_W];
    int first_bad[ST_W];       /* the first step whose result was wrong, -1: none */
    agmm_status status[ST_W];
    char msg[ST_W][AGMM_ERROR_LEN];
    double elapsed_s[ST_W];
} steps_job;

static void poison_f32(float *x, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        x[i] = NAN;
}

/* One ag_matmul step's check: the gathered A equals every rank's shard of this step, C equals the
 * reference on this step's B. */
static int mm_step_exact(int rank, int step, const uint16_t *a_out, const uint16_t *c_out, uint16_t *a, uint16_t *b,
                         uint16_t *ref)
{
    const int64_t rows = ST_W * ST_M;
    for (int r = 0; r < ST_W; r++)
        test_fill_bf16(a + r * ST_M * ST_K, ST_M * ST_K, test_seed_of(0x57e9, r, step, 1), 2);
    test_fill_bf16(b, ST_K * ST_N, test_seed_of(0x57e9, rank, step, 2), 2);
    agmm_ref_gemm_bf16(a, b, AGMM_LAYOUT_COL_MAJOR, rows, ST_N, ST_K, NULL, ref);
    return agmm_ref_first_mismatch(a_out, a, rows * ST_K, 2) < 0 && agmm_ref_first_mismatch(c_out, ref, rows * ST_N, 2) < 0;
}

static agmm_status steps_rank(agmm_ctx *ctx, void *arg)
{
    steps_job *job = arg;
    const int rank = agmm_ctx_rank(ctx);
    const int64_t rows = ST_W * ST_M;
    job->first_bad[rank] = -1;
    agmm_plan *plan = NULL;
    agmm_status st;
    if (job->all_reduce) {
        agmm_all_reduce_desc d = {.n = ST_AR_N, .dtype = AGMM_DTYPE_F32, .backend = job->backend};
        st = agmm_plan_all_reduce(&plan, ctx, &d);
    } else {
        agmm_ag_matmul_desc d = {.m = ST_M, .n = ST_N, .k = ST_K, .backend = job->backend, .splits = 2};
        st = agmm_plan_ag_matmul(&plan, ctx, &d);
    }
    uint16_t *b = malloc(sizeof(uint16_t) * ST_K * ST_N), *a_out = malloc(sizeof(uint16_t) * (size_t)(rows * ST_K));
    uint16_t *c_out = malloc(sizeof(uint16_t) * (size_t)(rows * ST_N));
    uint16_t *a_ref = malloc(sizeof(uint16_t) * (size_t)(rows * ST_K)), *b_ref = malloc(sizeof(uint16_t) * ST_K * ST_N);
    uint16_t *c_ref = malloc(sizeof(uint16_t) * (size_t)(rows * ST_N));
    float *sum = malloc(sizeof(float) * ST_AR_N);
    int64_t t0 = agmm_mono_ns();
    for (int step = 0; st == AGMM_SUCCESS && step < ST_STEPS; step++) {
        void *in = agmm_plan_input(plan);
        int exact = 1;
        if (job->all_reduce) {
            uint64_t s = test_seed_of(0x57e9, rank, step, 3);
            for (int i = 0; i < ST_AR_N; i++)
                ((float *)in)[i] = (float)agmm_rng_small_int(&s, 1000);
            poison_f32(sum, ST_AR_N);
            agmm_all_reduce_io io = {.out = sum};
            st = agmm_all_reduce(plan, &io, NULL);
            /* The moment the run has returned: this rank's input is its own again. */
            poison_f32(in, ST_AR_N);
            float want[ST_AR_N] = {0};
            for (int r = 0; r < ST_W; r++) {
                uint64_t sr = test_seed_of(0x57e9, r, step, 3);
                for (int i = 0; i < ST_AR_N; i++)
                    want[i] += (float)agmm_rng_small_int(&sr, 1000);
            }
            for (int i = 0; i < ST_AR_N; i++)
                exact &= sum[i] == want[i];
        } else {
            test_fill_bf16(in, ST_M * ST_K, test_seed_of(0x57e9, rank, step, 1), 2);
            test_fill_bf16(b, ST_K * ST_N, test_seed_of(0x57e9, rank, step, 2), 2);
            test_poison_bf16(a_out, rows * ST_K);
            test_poison_bf16(c_out, rows * ST_N);
            agmm_ag_matmul_io io = {.b = b, .a_gathered = a_out, .c = c_out};
            st = agmm_ag_matmul(plan, &io, NULL);
            test_poison_bf16(in, ST_M * ST_K);
            test_poison_bf16(b, ST_K * ST_N);
            exact = mm_step_exact(rank, step, a_out, c_out, a_ref, b_ref, c_ref);
        }
        if (st != AGMM_SUCCESS)
            break;
        job->steps_ok[rank] += exact;
        if (!exact && job->first_bad[rank] < 0)
            job->first_bad[rank] = step;
    }
    job->elapsed_s[rank] = (double)(agmm_mono_ns() - t0) * 1e-9;
    job->status[rank] = st;
    snprintf(job->msg[rank], sizeof job->msg[rank], "%s", agmm_last_error(ctx));
    agmm_plan_destroy(plan);
    free(b), free(a_out), free(c_out), free(a_ref), free(b_ref), free(c_ref), free(sum);
    return AGMM_SUCCESS;
}

void test_steps_back_to_back(void)
{
    char spec[64];
    snprintf(spec, sizeof spec, "rank=any,at=run,action=delay,ms=%d", ST_DELAY_MS);
    static const agmm_op ops[] = {AGMM_OP_AG_MATMUL, AGMM_OP_ALL_REDUCE};
    for (int o = 0; o < 2; o++) {
        for (int bi = 0; agmm_backend_name(ops[o], bi) != NULL; bi++) {
            const char *name = agmm_backend_name(ops[o], bi);
            if (!agmm_backend_available(NULL, ops[o], name, NULL, 0))
                continue;
            steps_job *job = calloc(1, sizeof *job);
            job->all_reduce = ops[o] == AGMM_OP_ALL_REDUCE;
            job->backend = name;
            setenv("AGMM_FAULT", spec, 1);
            agmm_world *world = test_cpu_world(ST_W, ST_TIMEOUT_S);
            int runs_here = world && agmm_backend_available(world, ops[o], name, NULL, 0);
            if (runs_here)
                agmm_world_run(world, steps_rank, job);
            agmm_world_destroy(world);
            unsetenv("AGMM_FAULT");
            if (!runs_here) {
                free(job);
                continue;
            }
            int ok = 1, first_bad = -1;
            double least = 1e9;
            const char *msg = "";
            for (int r = 0; r < ST_W; r++) {
                ok &= job->status[r] == AGMM_SUCCESS && job->steps_ok[r] == ST_STEPS;
                if (job->status[r] != AGMM_SUCCESS && !msg[0])
                    msg = job->msg[r];
                if (job->first_bad[r] >= 0 && (first_bad < 0 || job->first_bad[r] < first_bad))
                    first_bad = job->first_bad[r];
                if (job->elapsed_s[r] < least)
                    least = job->elapsed_s[r];
            }
            /* Each step waits for its delayed rank: the steps took at least steps x delay. */
            agmm_check(ok && least >= ST_STEPS * ST_DELAY_MS * 0.9e-3,
                       "%s/%s W=%d: %d steps back to back, one rank delayed %d ms at random each step, inputs NaN "
                       "right after each run: every step exact on every rank (first wrong step: %d; %.2f s)%s%s",
                       agmm_op_name(ops[o]), name, ST_W, ST_STEPS, ST_DELAY_MS, first_bad, least, msg[0] ? ": " : "",
                       msg);
            free(job);
        }
    }
}
