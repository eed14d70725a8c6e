/* No leaks: 1000 create/run/destroy cycles of a plan (every CPU backend in turn) and 100 cycles of
 * a whole world keep the process flat, measured from /proc/self (harness.h): resident memory,
 * mapped address space, mappings and open file descriptors, between a point after warm-up and the
 * end. A plan's buffers are 64-256 KiB, so a leaked buffer, thread (its stack) or descriptor per
 * cycle shows many times over the bounds. Under a sanitizer, whose allocator holds freed memory
 * back and maps its own regions as it goes, only descriptors are compared: there LeakSanitizer
 * checks the heap. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/error.h"
#include "cpu_tests.h"
#include "harness.h"

enum { PLAN_CYCLES = 1000, PLAN_WARM = 100, WORLD_CYCLES = 100, WORLD_WARM = 20, LEAK_W = 2 };
#define RSS_BOUND_KB 4096
#define VM_BOUND_KB 4096
#define MAPS_BOUND 4

typedef struct {
    pthread_barrier_t quiet;        /* ranks meet here so that usage is read between cycles */
    pthread_mutex_t mu;             /* guards failures and msg */
    int cycle;                      /* world cycles: the one running */
    agmm_proc_usage warm, end;
    int failures;
    char msg[AGMM_ERROR_LEN];
} leak_job;

/* Cycle i: plan backend i % (backends of both operations), put fresh input in, run, check the
 * result where it is cheap (all_reduce), destroy. Returns 0 on a failure (recorded). */
static int one_cycle(agmm_ctx *ctx, int i, leak_job *job)
{
    static const struct {
        agmm_op op;
        const char *backend;
    } kinds[] = {{AGMM_OP_AG_MATMUL, "ce"},        {AGMM_OP_ALL_REDUCE, "one_shot"}, {AGMM_OP_AG_MATMUL, "fused"},
                 {AGMM_OP_ALL_REDUCE, "two_shot"}, {AGMM_OP_AG_MATMUL, "nccl"},      {AGMM_OP_ALL_REDUCE, "nccl"}};
    const int kind = i % (int)(sizeof kinds / sizeof *kinds);
    enum { M = 64, N = 8, K = 512, AR_N = 32768 };
    agmm_plan *plan = NULL;
    agmm_status st;
    void *out = NULL, *b = NULL, *c = NULL;
    if (kinds[kind].op == AGMM_OP_AG_MATMUL) {
        agmm_ag_matmul_desc d = {.m = M, .n = N, .k = K, .backend = kinds[kind].backend, .splits = 2};
        st = agmm_plan_ag_matmul(&plan, ctx, &d);
        out = malloc(sizeof(uint16_t) * LEAK_W * M * K);
        b = calloc(K * N, sizeof(uint16_t));
        c = malloc(sizeof(uint16_t) * LEAK_W * M * N);
        if (st == AGMM_SUCCESS) {
            memset(agmm_plan_input(plan), 0, sizeof(uint16_t) * M * K);
            agmm_ag_matmul_io io = {.b = b, .a_gathered = out, .c = c};
            st = agmm_ag_matmul(plan, &io, NULL);
        }
    } else {
        agmm_all_reduce_desc d = {.n = AR_N, .dtype = AGMM_DTYPE_F32, .backend = kinds[kind].backend};
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
    }
    if (st != AGMM_SUCCESS) {
        pthread_mutex_lock(&job->mu);
        if (job->failures++ == 0)
            snprintf(job->msg, sizeof job->msg, "cycle %d (%s/%s): %s: %s", i, agmm_op_name(kinds[kind].op),
                     kinds[kind].backend, agmm_status_str(st), agmm_last_error(ctx));
        pthread_mutex_unlock(&job->mu);
    }
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
        agmm_world_run(world, plan_cycles_rank, job);
        agmm_world_destroy(world);
        check_flat("1000 plan create/run/destroy cycles (ce, one_shot, fused, two_shot, nccl x 2; W=2)", job);
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
        agmm_status st = agmm_world_run(world, world_cycle_rank, job);
        if (st != AGMM_SUCCESS && job->failures++ == 0)
            snprintf(job->msg, sizeof job->msg, "world cycle %d: %s", i, agmm_status_str(st));
        agmm_world_destroy(world);
    }
    agmm_proc_usage_now(&job->end);
    check_flat("100 world create/run/destroy cycles (W=2, contexts and a plan each)", job);
    pthread_mutex_destroy(&job->mu);
    free(job);
}
