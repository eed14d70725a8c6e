/* No leaks: 1000 create/run/destroy cycles of a plan (every CPU backend of every operation, in
 * turn) and 100 cycles of a whole world keep the process flat, measured from /proc/self
 * (harness.h): resident memory, mapped address space, mappings and open file descriptors, between a
 * point after warm-up and the end. A plan's buffers are 64-256 KiB, so a leaked buffer, thread (its
 * stack) or descriptor per cycle shows many times over the bounds. Under a sanitizer, whose
 * allocator holds freed memory back and maps its own regions as it goes, only descriptors are
 * compared: there LeakSanitizer checks the heap. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "api/agmm_ext.h"
#include "core/error.h"
#include "cpu_tests.h"
#include "harness.h"

enum { PLAN_CYCLES = 1000, PLAN_WARM = 100, WORLD_CYCLES = 100, WORLD_WARM = 20, LEAK_W = 2 };
#define RSS_BOUND_KB 4096
#define VM_BOUND_KB 4096
#define MAPS_BOUND 4

enum { MAX_KINDS = 32 };

typedef struct {
    pthread_barrier_t quiet;        /* ranks meet here so that usage is read between cycles */
    pthread_mutex_t mu;             /* guards failures and msg */
    int cycle;                      /* world cycles: the one running */
    int nkinds;                     /* every backend of every operation the CPU world runs */
    agmm_op op[MAX_KINDS];
    const char *backend[MAX_KINDS];
    agmm_proc_usage warm, end;
    int failures;
    char msg[AGMM_ERROR_LEN];
} leak_job;

/* Records the first failure of any rank. */
static void job_fail(leak_job *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void job_fail(leak_job *job, const char *fmt, ...)
{
    pthread_mutex_lock(&job->mu);
    if (job->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(job->msg, sizeof job->msg, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&job->mu);
}

/* The kinds to cycle: each backend of each operation (agmm_ext_op_count) that `world` runs. */
static void list_kinds(leak_job *job, const agmm_world *world)
{
    job->nkinds = 0;
    for (agmm_op op = 0; (int)op < agmm_ext_op_count(); op++)
        for (int i = 0; agmm_backend_name(op, i); i++)
            if (agmm_backend_available(world, op, agmm_backend_name(op, i), NULL, 0)) {
                if (job->nkinds == MAX_KINDS) {
                    job_fail(job, "more than %d backends to cycle (MAX_KINDS)", MAX_KINDS);
                    return;
                }
                job->op[job->nkinds] = op;
                job->backend[job->nkinds++] = agmm_backend_name(op, i);
            }
    if (job->nkinds == 0)
        job_fail(job, "no backend to cycle: the CPU world runs none");
}

/* Cycle i: plan kind i % nkinds, put input in, run, check the result where it is cheap
 * (all_reduce), destroy. Returns 0 on a failure (recorded). */
static int one_cycle(agmm_ctx *ctx, int i, leak_job *job)
{
    const int kind = i % job->nkinds;
    const agmm_op op = job->op[kind];
    const char *backend = job->backend[kind];
    enum { M = 64, N = 8, K = 512, AR_N = 32768, H = 64 };
    agmm_plan *plan = NULL;
    agmm_status st = AGMM_ERR_INTERNAL;
    void *out = NULL, *b = NULL, *c = NULL;
    if (op == AGMM_OP_AG_MATMUL) {
        agmm_ag_matmul_desc d = {.m = M, .n = N, .k = K, .backend = backend, .splits = 2};
        st = agmm_plan_ag_matmul(&plan, ctx, &d);
        out = malloc(sizeof(uint16_t) * LEAK_W * M * K);
        b = calloc(K * N, sizeof(uint16_t));
        c = malloc(sizeof(uint16_t) * LEAK_W * M * N);
        if (st == AGMM_SUCCESS) {
            memset(agmm_plan_input(plan), 0, sizeof(uint16_t) * M * K);
            agmm_ag_matmul_io io = {.b = b, .a_gathered = out, .c = c};
            st = agmm_ag_matmul(plan, &io, NULL);
        }
    } else if (op == AGMM_OP_MATMUL_REDUCE_SCATTER || op == AGMM_OP_MATMUL_ALL_REDUCE) {
        out = calloc(M * K, sizeof(uint16_t)); /* A_r */
        b = calloc(K * N, sizeof(uint16_t));
        c = malloc(sizeof(uint16_t) * M * N);
        if (op == AGMM_OP_MATMUL_REDUCE_SCATTER) {
            agmm_matmul_reduce_scatter_desc d = {.m = M, .n = N, .k = K, .backend = backend};
            st = agmm_plan_matmul_reduce_scatter(&plan, ctx, &d);
            agmm_matmul_reduce_scatter_io io = {.a = out, .b = b, .out = c};
            if (st == AGMM_SUCCESS)
                st = agmm_matmul_reduce_scatter(plan, &io, NULL);
        } else {
            agmm_matmul_all_reduce_desc d = {.m = M, .n = N, .k = K, .backend = backend};
            st = agmm_plan_matmul_all_reduce(&plan, ctx, &d);
            agmm_matmul_all_reduce_io io = {.a = out, .b = b, .c = c};
            if (st == AGMM_SUCCESS)
                st = agmm_matmul_all_reduce(plan, &io, NULL);
        }
    } else if (op == AGMM_OP_ALL_REDUCE_RMSNORM) {
        agmm_all_reduce_rmsnorm_desc d = {.tokens = M, .hidden = H, .eps = 1e-5, .backend = backend};
        st = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &d);
        out = malloc(sizeof(uint16_t) * M * H); /* y */
        b = calloc(H, sizeof(uint16_t));        /* gamma */
        c = malloc(sizeof(uint16_t) * M * H);   /* r' */
        if (st == AGMM_SUCCESS) {
            memset(agmm_plan_input(plan), 0, sizeof(uint16_t) * M * H);
            agmm_all_reduce_rmsnorm_io io = {.y = out, .residual_out = c, .gamma = b};
            st = agmm_all_reduce_rmsnorm(plan, &io, NULL);
        }
    } else if (op == AGMM_OP_ALL_REDUCE) {
        agmm_all_reduce_desc d = {.n = AR_N, .dtype = AGMM_DTYPE_F32, .backend = backend};
        st = agmm_plan_all_reduce(&plan, ctx, &d);
        out = malloc(sizeof(float) * AR_N);
        if (st == AGMM_SUCCESS) {
            for (int e = 0; e < AR_N; e++)
                ((float *)agmm_plan_input(plan))[e] = (float)(i + e);
            agmm_all_reduce_io io = {.out = out};
            st = agmm_all_reduce(plan, &io, NULL);
            for (int e = 0; st == AGMM_SUCCESS && e < AR_N; e++)
                if (((float *)out)[e] != (float)(LEAK_W * (i + e)))
                    st = AGMM_ERR_INTERNAL;
        }
    } else { /* the same on every rank: none plans */
        job_fail(job, "cycle %d (%s/%s): no leak cycle for it in test_leaks.c", i, agmm_op_name(op), backend);
        return 0;
    }
    if (st != AGMM_SUCCESS)
        job_fail(job, "cycle %d (%s/%s): %s: %s", i, agmm_op_name(op), backend, agmm_status_str(st),
                 agmm_last_error(ctx));
    agmm_plan_destroy(plan);
    free(out), free(b), free(c);
    return st == AGMM_SUCCESS;
}

/* Reads usage with every rank between cycles. */
static void read_quiet(agmm_ctx *ctx, leak_job *job, agmm_proc_usage *u)
{
    pthread_barrier_wait(&job->quiet);
    if (agmm_ctx_rank(ctx) == 0)
        agmm_proc_usage_now(u);
    pthread_barrier_wait(&job->quiet);
}

static agmm_status plan_cycles_rank(agmm_ctx *ctx, void *arg)
{
    leak_job *job = arg;
    for (int i = 0; i < PLAN_CYCLES; i++) {
        if (i == PLAN_WARM)
            read_quiet(ctx, job, &job->warm);
        one_cycle(ctx, i, job);
    }
    read_quiet(ctx, job, &job->end);
    return AGMM_SUCCESS;
}

static agmm_status world_cycle_rank(agmm_ctx *ctx, void *arg)
{
    leak_job *job = arg;
    one_cycle(ctx, job->cycle, job);
    return AGMM_SUCCESS;
}

/* Prints the comparison of warm and end. */
static void check_flat(const char *what, const leak_job *job)
{
    const agmm_proc_usage *a = &job->warm, *b = &job->end;
    long rss = b->rss_kb - a->rss_kb, vm = b->vm_kb - a->vm_kb, maps = b->maps - a->maps, fds = b->fds - a->fds;
    int flat = fds == 0 && (TEST_SANITIZED || (rss <= RSS_BOUND_KB && vm <= VM_BOUND_KB && maps <= MAPS_BOUND));
    agmm_check(a->rss_kb > 0 && job->failures == 0 && flat,
               "%s: flat after warm-up: descriptors %+ld (bound 0); resident %+ld KiB (bound %d), address space "
               "%+ld KiB (bound %d), mappings %+ld (bound %d)%s%s%s",
               what, fds, rss, RSS_BOUND_KB, vm, VM_BOUND_KB, maps, MAPS_BOUND,
               TEST_SANITIZED ? ": these three not checked under a sanitizer" : "", job->failures ? "; failed: " : "",
               job->msg);
}

void test_leaks_plan_cycles(void)
{
    leak_job *job = calloc(1, sizeof *job);
    pthread_barrier_init(&job->quiet, NULL, LEAK_W);
    pthread_mutex_init(&job->mu, NULL);
    agmm_world *world = test_cpu_world(LEAK_W, 2.0);
    if (world) {
        list_kinds(job, world);
        if (job->nkinds > 0)
            agmm_world_run(world, plan_cycles_rank, job);
        agmm_world_destroy(world);
        char what[128];
        snprintf(what, sizeof what, "1000 plan create/run/destroy cycles over %d backends of %d operations (W=2)",
                 job->nkinds, agmm_ext_op_count());
        check_flat(what, job);
    }
    pthread_barrier_destroy(&job->quiet);
    pthread_mutex_destroy(&job->mu);
    free(job);
}

void test_leaks_world_cycles(void)
{
    leak_job *job = calloc(1, sizeof *job);
    pthread_mutex_init(&job->mu, NULL);
    for (int i = 0; i < WORLD_CYCLES; i++) {
        job->cycle = i;
        if (i == WORLD_WARM)
            agmm_proc_usage_now(&job->warm);
        agmm_world *world = test_cpu_world(LEAK_W, 2.0);
        if (world == NULL)
            break;
        if (job->nkinds == 0)
            list_kinds(job, world);
        agmm_status st = job->nkinds ? agmm_world_run(world, world_cycle_rank, job) : AGMM_ERR_INTERNAL;
        if (st != AGMM_SUCCESS && job->failures++ == 0)
            snprintf(job->msg, sizeof job->msg, "world cycle %d: %s", i, agmm_status_str(st));
        agmm_world_destroy(world);
    }
    agmm_proc_usage_now(&job->end);
    check_flat("100 world create/run/destroy cycles (W=2, contexts and a plan each)", job);
    pthread_mutex_destroy(&job->mu);
    free(job);
}
