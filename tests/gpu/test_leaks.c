/* No leaks on GPUs: 1000 create/run/destroy cycles of a plan (every backend of every operation the
 * world runs, in turn) and 100 cycles of a whole world keep the process flat, as tests/test_leaks.c
 * checks in the CPU world, and keep the device's free memory flat too (cudaMemGetInfo). Worlds:
 * emulated W=2 on GPU 0, and the GPU world of one rank (NCCL communicator and windows). Usage is
 * read with every rank between cycles, after a warm-up, and at the end. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "api/agmm_ext.h"
#include "gpu_tests.h"
#include "../harness.h"

enum { GL_M = 128, GL_N = 128, GL_K = 256, GL_AR_N = 65536, GL_MAX_KINDS = 32 };
#define GL_RSS_BOUND_KB (32 * 1024)
#define GL_VM_BOUND_KB (256 * 1024)
#define GL_MAPS_BOUND 64
#define GL_DEV_BOUND_BYTES ((size_t)16 << 20)

typedef struct {
    gpu_rank_results res;
    int nranks;
    int cycles, warm;                 /* cycles per plan loop; usage read before cycle `warm` */
    int nkinds;
    agmm_op op[GL_MAX_KINDS];
    const char *backend[GL_MAX_KINDS];
    pthread_barrier_t meet;           /* every rank, before each cycle */
    atomic_int stop;                  /* a rank failed: every rank stops at the next meeting */
    int world_cycle;                  /* world loop: the kind this world plans */
    agmm_proc_usage warm_u, end_u;
    size_t dev_free_warm, dev_free_end;
} gleak_job;

static size_t dev_free(void)
{
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return free_b;
}

/* The device buffers of one rank, made once before any plan (ranks sharing a GPU must not
 * allocate while a peer's run may wait for them). */
typedef struct {
    cudaStream_t s;
    void *b, *out, *c;
} gleak_bufs;

/* One cycle of kind `kind`: plan, input, run, synchronise, destroy. 1 on success. */
static int one_cycle(agmm_ctx *ctx, gleak_job *job, int kind, const gleak_bufs *bf)
{
    const int rank = agmm_ctx_rank(ctx);
    agmm_plan *plan = NULL;
    agmm_status st;
    size_t in_bytes;
    if (job->op[kind] == AGMM_OP_AG_MATMUL) {
        agmm_ag_matmul_desc d = {.m = GL_M, .n = GL_N, .k = GL_K, .backend = job->backend[kind]};
        st = agmm_plan_ag_matmul(&plan, ctx, &d);
        in_bytes = (size_t)GL_M * GL_K * 2;
    } else if (job->op[kind] == AGMM_OP_MATMUL_REDUCE_SCATTER) {
        agmm_matmul_reduce_scatter_desc d = {.m = GL_M, .n = GL_N, .k = GL_K, .backend = job->backend[kind]};
        st = agmm_plan_matmul_reduce_scatter(&plan, ctx, &d);
        in_bytes = 0; /* A_r comes in the io */
    } else if (job->op[kind] == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_desc d = {.m = GL_M, .n = GL_N, .k = GL_K, .backend = job->backend[kind]};
        st = agmm_plan_matmul_all_reduce(&plan, ctx, &d);
        in_bytes = 0;
    } else if (job->op[kind] == AGMM_OP_ALL_REDUCE_RMSNORM) {
        agmm_all_reduce_rmsnorm_desc d = {.tokens = GL_M, .hidden = GL_N, .eps = 1e-5, .backend = job->backend[kind]};
        st = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &d);
        in_bytes = (size_t)GL_M * GL_N * 2;
    } else if (job->op[kind] == AGMM_OP_ALL_REDUCE) {
        agmm_all_reduce_desc d = {.n = GL_AR_N, .dtype = AGMM_DTYPE_F32, .backend = job->backend[kind]};
        st = agmm_plan_all_reduce(&plan, ctx, &d);
        in_bytes = (size_t)GL_AR_N * 4;
    } else { /* the same on every rank: none plans */
        return gpu_rank_fail(&job->res, rank, "%s: no leak cycle for it in test_leaks.c's one_cycle",
                             agmm_op_name(job->op[kind]));
    }
    if (st == AGMM_SUCCESS && in_bytes && cudaMemsetAsync(agmm_plan_input(plan), 0, in_bytes, bf->s) != cudaSuccess)
        st = AGMM_ERR_CUDA;
    if (st == AGMM_SUCCESS && job->op[kind] == AGMM_OP_AG_MATMUL) {
        agmm_ag_matmul_io io = {.b = bf->b, .a_gathered = bf->out, .c = bf->c};
        st = agmm_ag_matmul(plan, &io, bf->s);
    } else if (st == AGMM_SUCCESS && job->op[kind] == AGMM_OP_MATMUL_REDUCE_SCATTER) {
        agmm_matmul_reduce_scatter_io io = {.a = bf->out, .b = bf->b, .out = bf->c};
        st = agmm_matmul_reduce_scatter(plan, &io, bf->s);
    } else if (st == AGMM_SUCCESS && job->op[kind] == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_io io = {.a = bf->out, .b = bf->b, .c = bf->c};
        st = agmm_matmul_all_reduce(plan, &io, bf->s);
    } else if (st == AGMM_SUCCESS && job->op[kind] == AGMM_OP_ALL_REDUCE_RMSNORM) {
        agmm_all_reduce_rmsnorm_io io = {.y = bf->c, .residual_out = bf->out, .gamma = bf->b};
        st = agmm_all_reduce_rmsnorm(plan, &io, bf->s);
    } else if (st == AGMM_SUCCESS) { /* all_reduce */
        agmm_all_reduce_io io = {.out = bf->out};
        st = agmm_all_reduce(plan, &io, bf->s);
    }
    if (st == AGMM_SUCCESS && cudaStreamSynchronize(bf->s) != cudaSuccess)
        st = AGMM_ERR_CUDA;
    if (st == AGMM_SUCCESS)
        st = agmm_ctx_sync(ctx);
    if (st != AGMM_SUCCESS)
        gpu_rank_fail(&job->res, rank, "%s/%s: %s: %s", agmm_op_name(job->op[kind]), job->backend[kind],
                      agmm_status_str(st), agmm_last_error(ctx));
    agmm_plan_destroy(plan);
    return st == AGMM_SUCCESS;
}

static int bufs_make(gleak_bufs *bf, int rank, int nranks)
{
    memset(bf, 0, sizeof *bf);
    size_t out = (size_t)nranks * GL_M * GL_K * 2;
    if (out < (size_t)GL_AR_N * 4)
        out = (size_t)GL_AR_N * 4;
    const size_t b = (size_t)GL_K * GL_N * 2, c = (size_t)nranks * GL_M * GL_N * 2;
    return (bf->s = gpu_rank_stream(rank, 0)) != NULL &&
           cudaMalloc(&bf->b, b) == cudaSuccess && cudaMemset(bf->b, 0, b) == cudaSuccess &&
           cudaMalloc(&bf->out, out) == cudaSuccess && cudaMalloc(&bf->c, c) == cudaSuccess;
}

static void bufs_free(gleak_bufs *bf)
{
    if (bf->s)
        cudaStreamSynchronize(bf->s);
    cudaFree(bf->b);
    cudaFree(bf->out);
    cudaFree(bf->c);
}

/* Every rank meets; returns 0 when some rank has failed (every rank then stops alike). */
static int meet(gleak_job *job)
{
    pthread_barrier_wait(&job->meet);
    int go = !atomic_load(&job->stop);
    pthread_barrier_wait(&job->meet);
    return go;
}

static agmm_status plan_cycles_rank(agmm_ctx *ctx, void *arg)
{
    gleak_job *job = arg;
    const int rank = agmm_ctx_rank(ctx);
    gleak_bufs bf;
    if (!bufs_make(&bf, rank, job->nranks)) {
        gpu_rank_fail(&job->res, rank, "device buffers: %s", cudaGetErrorString(cudaGetLastError()));
        atomic_store(&job->stop, 1);
    }
    for (int i = 0; i < job->cycles && meet(job); i++) {
        if (i == job->warm && rank == 0) {
            agmm_proc_usage_now(&job->warm_u);
            job->dev_free_warm = dev_free();
        }
        if (i == job->warm)
            meet(job); /* nobody starts the cycle before rank 0 has read */
        if (!one_cycle(ctx, job, i % job->nkinds, &bf))
            atomic_store(&job->stop, 1);
    }
    meet(job);
    if (rank == 0) {
        agmm_proc_usage_now(&job->end_u);
        job->dev_free_end = dev_free();
    }
    bufs_free(&bf);
    return AGMM_SUCCESS;
}

static agmm_status world_cycle_rank(agmm_ctx *ctx, void *arg)
{
    gleak_job *job = arg;
    const int rank = agmm_ctx_rank(ctx);
    gleak_bufs bf;
    if (bufs_make(&bf, rank, job->nranks))
        one_cycle(ctx, job, job->world_cycle % job->nkinds, &bf);
    else
        gpu_rank_fail(&job->res, rank, "device buffers: %s", cudaGetErrorString(cudaGetLastError()));
    bufs_free(&bf);
    return AGMM_SUCCESS;
}

/* The backends of every operation that `world` runs (one_cycle has a branch for each; the bound
 * on kinds is checked). */
static void list_kinds(gleak_job *job, const agmm_world *world)
{
    for (agmm_op op = 0; (int)op < agmm_ext_op_count(); op++)
        for (int i = 0; agmm_backend_name(op, i); i++)
            if (agmm_backend_available(world, op, agmm_backend_name(op, i), NULL, 0)) {
                if (job->nkinds == GL_MAX_KINDS) {
                    agmm_check(0, "leak cycles: more than %d backends to cycle (GL_MAX_KINDS)", GL_MAX_KINDS);
                    return;
                }
                job->op[job->nkinds] = op;
                job->backend[job->nkinds++] = agmm_backend_name(op, i);
            }
}

static void check_flat(const char *what, const gleak_job *job, int nranks)
{
    const agmm_proc_usage *a = &job->warm_u, *b = &job->end_u;
    long rss = b->rss_kb - a->rss_kb, vm = b->vm_kb - a->vm_kb, maps = b->maps - a->maps, fds = b->fds - a->fds;
    long long dev = (long long)job->dev_free_warm - (long long)job->dev_free_end; /* > 0: less free */
    int ran = 1;
    for (int r = 0; r < nranks; r++)
        ran &= job->res.ok[r];
    agmm_check(ran && a->rss_kb > 0 && rss <= GL_RSS_BOUND_KB && vm <= GL_VM_BOUND_KB && maps <= GL_MAPS_BOUND &&
                   fds <= 0 && dev <= (long long)GL_DEV_BOUND_BYTES,
               "%s: flat after warm-up: device memory %+lld KiB in use (bound %zu), resident %+ld KiB (bound %d), "
               "address space %+ld KiB (bound %d), mappings %+ld (bound %d), descriptors %+ld (bound 0)",
               what, dev / 1024, GL_DEV_BOUND_BYTES / 1024, rss, GL_RSS_BOUND_KB, vm, GL_VM_BOUND_KB, maps,
               GL_MAPS_BOUND, fds);
    gpu_report_ranks(&job->res, nranks, what);
}

static void plan_loop(agmm_world_kind kind, int nranks, const char *what)
{
    gleak_job *job = calloc(1, sizeof *job);
    agmm_world *w = gpu_test_world(kind, nranks, 10);
    if (w == NULL) {
        free(job);
        return;
    }
    list_kinds(job, w);
    if (job->nkinds == 0) {
        agmm_check(0, "%s: no backend to cycle", what);
        agmm_world_destroy(w);
        free(job);
        return;
    }
    for (int r = 0; r < nranks; r++)
        job->res.ok[r] = 1;
    job->nranks = nranks;
    job->cycles = 1000;
    job->warm = 100;
    pthread_barrier_init(&job->meet, NULL, (unsigned)nranks);
    agmm_world_run(w, plan_cycles_rank, job);
    agmm_world_destroy(w);
    pthread_barrier_destroy(&job->meet);
    char title[160];
    snprintf(title, sizeof title, "%s: 1000 plan create/run/destroy cycles over %d backends", what, job->nkinds);
    check_flat(title, job, nranks);
    free(job);
}

static void world_loop(agmm_world_kind kind, int nranks, int cycles, const char *what)
{
    gleak_job *job = calloc(1, sizeof *job);
    for (int r = 0; r < nranks; r++)
        job->res.ok[r] = 1;
    job->nranks = nranks;
    int warm = -1; /* usage is read once every kind has run: max(cycles / 5, kinds) */
    for (int i = 0; i < cycles; i++) {
        if (i == warm) {
            agmm_proc_usage_now(&job->warm_u);
            job->dev_free_warm = dev_free();
        }
        agmm_world *w = gpu_test_world(kind, nranks, 10);
        if (w == NULL)
            break;
        if (job->nkinds == 0) {
            list_kinds(job, w);
            warm = job->nkinds > cycles / 5 ? job->nkinds : cycles / 5;
            if (job->nkinds == 0 || warm >= cycles) {
                agmm_check(0, "%s: %d kinds to cycle: usage would be read at cycle %d of %d", what, job->nkinds,
                           warm, cycles);
                agmm_world_destroy(w);
                break;
            }
        }
        job->world_cycle = i;
        agmm_world_run(w, world_cycle_rank, job);
        agmm_world_destroy(w);
    }
    agmm_proc_usage_now(&job->end_u);
    job->dev_free_end = dev_free();
    char title[160];
    snprintf(title, sizeof title, "%s: %d world create/run/destroy cycles", what, cycles);
    check_flat(title, job, nranks);
    free(job);
}

void test_leaks_gpu(void)
{
    plan_loop(AGMM_WORLD_EMULATED, 2, "emulated W=2");
    plan_loop(AGMM_WORLD_GPU, 1, "GPU W=1");
    world_loop(AGMM_WORLD_EMULATED, 2, 100, "emulated W=2");
    world_loop(AGMM_WORLD_GPU, 1, 30, "GPU W=1 (an NCCL communicator each)");
}
