/* GPU tests of worlds and the symmetric heap: a world of 1 on the real NCCL window path; emulated
 * worlds of 2, 3, 4 and 8 ranks on one GPU where each rank writes its buffer and reads every
 * peer's through the pointer table (host copies and a kernel); the stream barrier (a value
 * written before it is seen by every peer after it, 32 rounds); and a barrier whose peer never
 * arrives, which must end in AGMM_ERR_TIMEOUT naming that peer, within its bound. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "gpu_tests.h"
#include "../harness.h"
#include "api/agmm_ext.h"
#include "kernels/signal.h"
#include "symm/symm.h"
#include "world/rank_gpu.h"

agmm_world *gpu_test_world(agmm_world_kind kind, int nranks, double timeout_s)
{
    agmm_world_config cfg = {.kind = kind, .nranks = nranks,
                             .timeout_s = timeout_s > 0 ? timeout_s : gpu_test_timeout()};
    agmm_world *w = NULL;
    char err[512] = "";
    agmm_status st = agmm_world_create(&w, &cfg, err, sizeof err);
    if (st != AGMM_SUCCESS) {
        agmm_check(0, "world kind=%d nranks=%d: %s: %s", (int)kind, nranks, agmm_status_str(st), err);
        return NULL;
    }
    return w;
}

double gpu_test_timeout(void)
{
    const char *v = getenv("AGMM_GPUTEST_TIMEOUT");
    return v ? atof(v) : 0;
}

int gpu_rank_fail(gpu_rank_results *res, int rank, const char *fmt, ...)
{
    if (res->msg[rank][0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(res->msg[rank], sizeof res->msg[rank], fmt, ap);
        va_end(ap);
    }
    res->ok[rank] = 0;
    return 0;
}

void gpu_report_ranks(const gpu_rank_results *res, int nranks, const char *what)
{
    for (int r = 0; r < nranks; r++)
        agmm_check(res->ok[r], "%s rank %d%s%s", what, r, res->ok[r] ? "" : ": ", res->ok[r] ? "" : res->msg[r]);
}

/* Streams are made once per (device, rank, which) and kept: where ranks share a GPU, streams made
 * and destroyed per case stalled worlds (steps_two_streams at emulated W = 4: 9 of 15 runs; kept,
 * 0 of 12), most likely a new stream landing on a hardware queue of another rank's live stream
 * (docs/architecture.md, emulated worlds). A stream belongs to the device current at its making. */
#define GPU_RANK_DEVICES 8
static cudaStream_t rank_streams[GPU_RANK_DEVICES][AGMM_MAX_RANKS][GPU_RANK_STREAMS];
static pthread_mutex_t rank_streams_lock = PTHREAD_MUTEX_INITIALIZER;

cudaStream_t gpu_rank_stream(int rank, int which)
{
    int dev = -1;
    if (rank < 0 || rank >= AGMM_MAX_RANKS || which < 0 || which >= GPU_RANK_STREAMS ||
        cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= GPU_RANK_DEVICES)
        return NULL;
    pthread_mutex_lock(&rank_streams_lock);
    cudaStream_t *s = &rank_streams[dev][rank][which];
    if (*s == NULL && cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) != cudaSuccess)
        *s = NULL;
    cudaStream_t got = *s;
    pthread_mutex_unlock(&rank_streams_lock);
    return got;
}

void gpu_rank_streams_release(void)
{
    int current = 0;
    cudaGetDevice(&current);
    pthread_mutex_lock(&rank_streams_lock);
    for (int d = 0; d < GPU_RANK_DEVICES; d++)
        for (int r = 0; r < AGMM_MAX_RANKS; r++)
            for (int i = 0; i < GPU_RANK_STREAMS; i++) {
                cudaStream_t *s = &rank_streams[d][r][i];
                if (*s == NULL)
                    continue;
                cudaSetDevice(d);
                cudaStreamSynchronize(*s);
                cudaStreamDestroy(*s);
                *s = NULL;
            }
    pthread_mutex_unlock(&rank_streams_lock);
    cudaSetDevice(current);
}

typedef struct {
    gpu_rank_results res;
    int want_nccl;   /* 1: the world must be on NCCL windows */
} heap_args;

static uint32_t pattern(int rank, size_t i) { return (uint32_t)(rank + 1) * 1000003u + (uint32_t)i * 7u; }

/* One rank: its buffer written, every peer's read (host copy + kernel), then the barrier rounds. */
static agmm_status heap_rank(agmm_ctx *ctx, void *arg)
{
    heap_args *a = arg;
    gpu_rank_results *res = &a->res;
    int rank = agmm_ctx_rank(ctx), nranks = agmm_ctx_info(ctx)->nranks;
    const size_t words = 3 * 1024 + 25; /* not a multiple of anything useful */
    agmm_symm_buf *buf = NULL;
    cudaStream_t s = NULL;
    uint32_t *h = NULL, *d_out = NULL, *h_round = NULL;
    const int rounds = 32;
    uint32_t *h_vals = NULL, *d_seen = NULL, *h_seen = NULL;
    size_t probe[2] = {0, words - 1};
    res->ok[rank] = 1;
    const agmm_gpu_rank *gpu = agmm_ctx_gpu(ctx);
    if (gpu == NULL) {
        gpu_rank_fail(res, rank, "a rank of a GPU world has no GPU resources (agmm_ctx_gpu is NULL)");
        goto done;
    }
    int windows = strcmp(agmm_symm_kind(ctx), "NCCL windows") == 0;
    if (a->want_nccl && !(gpu->nccl_comm && windows)) {
        gpu_rank_fail(res, rank, "expected NCCL windows (comm=%p, symmetric memory: %s)", (void *)gpu->nccl_comm,
                      agmm_symm_kind(ctx));
        goto done;
    }
    if (!a->want_nccl && (gpu->nccl_comm || windows)) {
        gpu_rank_fail(res, rank, "an emulated rank has an NCCL communicator or windows (comm=%p, symmetric memory: %s)",
                      (void *)gpu->nccl_comm, agmm_symm_kind(ctx));
        goto done;
    }
    /* Every allocation first: device-synchronising calls must not meet a peer's barrier in flight
     * (see mm_rank in test_ag_matmul.c). */
    RANK_STREAM(res, rank, s, 0);
    h = malloc(words * 4);
    RANK_CUDA(res, rank, cudaMallocHost((void **)&h_round, 2 * AGMM_MAX_RANKS * 4));
    RANK_CUDA(res, rank, cudaMalloc((void **)&d_out, AGMM_MAX_RANKS * 4));
    RANK_CUDA(res, rank, cudaMallocHost((void **)&h_vals, rounds * 4));
    RANK_CUDA(res, rank, cudaMalloc((void **)&d_seen, (size_t)rounds * AGMM_MAX_RANKS * 4));
    RANK_CUDA(res, rank, cudaMallocHost((void **)&h_seen, (size_t)rounds * AGMM_MAX_RANKS * 4));
    /* Poisoned: a round reads nranks of its AGMM_MAX_RANKS slots, and the whole table comes back
     * (compute-sanitizer initcheck flagged the unwritten slots' copy on the H200). */
    RANK_CUDA(res, rank, cudaMemsetAsync(d_seen, 0xff, (size_t)rounds * AGMM_MAX_RANKS * 4, s));
    RANK_AGMM(res, ctx, agmm_host_barrier(ctx));
    RANK_AGMM(res, ctx, agmm_symm_alloc(ctx, words * 4, &buf));
    for (size_t i = 0; i < words; i++)
        h[i] = pattern(rank, i);
    RANK_CUDA(res, rank, cudaMemcpyAsync(buf->local, h, words * 4, cudaMemcpyHostToDevice, s));
    RANK_CUDA(res, rank, cudaStreamSynchronize(s));
    RANK_AGMM(res, ctx, agmm_host_barrier(ctx));

    /* Host copies through the host table. */
    for (int p = 0; p < nranks; p++) {
        memset(h, 0, words * 4);
        RANK_CUDA(res, rank, cudaMemcpyAsync(h, buf->peer[p], words * 4, cudaMemcpyDefault, s));
        RANK_CUDA(res, rank, cudaStreamSynchronize(s));
        for (size_t i = 0; i < words; i++)
            if (h[i] != pattern(p, i)) {
                gpu_rank_fail(res, rank, "host copy of rank %d's buffer: word %zu is %u, want %u", p, i, h[i],
                              pattern(p, i));
                goto done;
            }
    }
    /* A kernel through the device table: first and last word of every peer. */
    for (int j = 0; j < 2; j++) {
        RANK_CUDA(res, rank, agmm_launch_peek_peers((uint32_t *const *)buf->d_peer, probe[j], nranks, d_out, s));
        RANK_CUDA(res, rank, cudaMemcpyAsync(h_round, d_out, (size_t)nranks * 4, cudaMemcpyDeviceToHost, s));
        RANK_CUDA(res, rank, cudaStreamSynchronize(s));
        for (int p = 0; p < nranks; p++)
            if (h_round[p] != pattern(p, probe[j])) {
                gpu_rank_fail(res, rank, "kernel read of rank %d's word %zu: %u, want %u", p, probe[j], h_round[p],
                              pattern(p, probe[j]));
                goto done;
            }
    }
    RANK_AGMM(res, ctx, agmm_host_barrier(ctx));

    /* Barrier rounds, all enqueued before one sync: write word 0, barrier, read every peer's word 0
     * into round slot, barrier (nobody rewrites word 0 while a peer may still read it). Without
     * the first barrier a peer's value from the previous round shows. */
    for (int i = 0; i < rounds; i++) {
        h_vals[i] = (uint32_t)(i + 1) * 64u + (uint32_t)rank;
        RANK_CUDA(res, rank, cudaMemcpyAsync(buf->local, &h_vals[i], 4, cudaMemcpyHostToDevice, s));
        RANK_AGMM(res, ctx, agmm_symm_barrier_stream(ctx, s));
        RANK_CUDA(res, rank, agmm_launch_peek_peers((uint32_t *const *)buf->d_peer, 0, nranks,
                                                       d_seen + (size_t)i * AGMM_MAX_RANKS, s));
        RANK_AGMM(res, ctx, agmm_symm_barrier_stream(ctx, s));
    }
    RANK_AGMM(res, ctx, agmm_gpu_note_run(ctx, s));
    RANK_CUDA(res, rank, cudaMemcpyAsync(h_seen, d_seen, (size_t)rounds * AGMM_MAX_RANKS * 4,
                                            cudaMemcpyDeviceToHost, s));
    RANK_AGMM(res, ctx, agmm_ctx_sync(ctx));
    RANK_CUDA(res, rank, cudaStreamSynchronize(s));
    for (int i = 0; i < rounds && res->ok[rank]; i++)
        for (int p = 0; p < nranks; p++) {
            uint32_t want = (uint32_t)(i + 1) * 64u + (uint32_t)p;
            if (h_seen[(size_t)i * AGMM_MAX_RANKS + p] != want) {
                gpu_rank_fail(res, rank, "barrier round %d: rank %d's word reads %u, want %u", i, p,
                              h_seen[(size_t)i * AGMM_MAX_RANKS + p], want);
                break;
            }
        }
done:
    /* Collective clean-up even after a failure, so peers are not left waiting; it meets the peers
     * first, so the cudaFree calls after it find nothing of theirs in flight. */
    agmm_symm_free(ctx, buf);
    cudaFreeHost(h_vals);
    cudaFree(d_seen);
    cudaFreeHost(h_seen);
    free(h);
    cudaFreeHost(h_round);
    cudaFree(d_out);
    if (s)
        cudaStreamSynchronize(s);
    return AGMM_SUCCESS;
}

static void heap_world(agmm_world_kind kind, int nranks, int want_nccl)
{
    agmm_world *w = gpu_test_world(kind, nranks, 0);
    if (w == NULL)
        return;
    heap_args a;
    memset(&a, 0, sizeof a);
    a.want_nccl = want_nccl;
    agmm_status st = agmm_world_run(w, heap_rank, &a);
    char what[600];
    snprintf(what, sizeof what, "heap+barrier %s W=%d (%s)", kind == AGMM_WORLD_GPU ? "nccl" : "emulated", nranks,
             agmm_world_describe(w));
    if (st != AGMM_SUCCESS)
        agmm_check(0, "%s: agmm_world_run -> %s", what, agmm_status_str(st));
    else
        gpu_report_ranks(&a.res, nranks, what);
    agmm_world_destroy(w);
}

void test_world_nccl_one(void)
{
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, 1, 0);
    if (w == NULL)
        return;
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    agmm_check(nvls && strcmp(nvls, "0") == 0, "world GPU W=1 forces NCCL_NVLS_ENABLE=0 (is %s)", nvls ? nvls : "unset");
    agmm_check(strstr(agmm_world_describe(w), "NCCL 2.") != NULL, "world GPU W=1 describe names NCCL: %s",
               agmm_world_describe(w));
    /* A real GPU world has NCCL and peer memory: every backend of the table can run. */
    for (agmm_op op = 0; (int)op < agmm_ext_op_count(); op++)
        for (int i = 0; agmm_backend_name(op, i) != NULL; i++) {
            char why[512] = "";
            int avail = agmm_backend_available(w, op, agmm_backend_name(op, i), why, sizeof why);
            agmm_check(avail == 1, "world GPU W=1: %s/%s available%s%s", agmm_op_name(op), agmm_backend_name(op, i),
                       avail ? "" : ": ", why);
        }
    agmm_world_destroy(w);
    heap_world(AGMM_WORLD_GPU, 1, 1);
}

void test_world_emulated(void)
{
    const int sizes[] = {2, 3, 4, 8};
    for (int i = 0; i < 4; i++) {
        agmm_world *w = gpu_test_world(AGMM_WORLD_EMULATED, sizes[i], 0);
        if (w == NULL)
            continue;
        agmm_check(strstr(agmm_world_describe(w), "emulated") != NULL && agmm_world_nranks(w) == sizes[i],
                   "emulated W=%d describe: %s", sizes[i], agmm_world_describe(w));
        agmm_world_destroy(w);
        heap_world(AGMM_WORLD_EMULATED, sizes[i], 0);
    }
    /* Arguments an emulated world refuses. */
    agmm_world_config cfg = {.kind = AGMM_WORLD_EMULATED, .nranks = 0};
    agmm_world *w = NULL;
    char err[512] = "";
    agmm_status st = agmm_world_create(&w, &cfg, err, sizeof err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && w == NULL && strstr(err, "nranks"),
               "emulated world without nranks is refused: %s", err);
}

/* For compute-sanitizer: the heap, peer reads and barrier rounds at W = nranks (the pad barrier and
 * peek kernels; an emulated world, or the GPU world at W = 1), and a chunk flag raised and waited
 * for by the single-thread signal kernels that stand in where the driver lacks stream memory
 * operations. */
void test_world_small(int nranks)
{
    if (nranks == 1)
        heap_world(AGMM_WORLD_GPU, 1, 1);
    else
        heap_world(AGMM_WORLD_EMULATED, nranks, 0);
    uint32_t *flag = NULL, got = 0;
    agmm_dev_error *err_h = NULL, *err_d = NULL;
    cudaStream_t s = NULL;
    int ok = cudaMalloc((void **)&flag, 4) == cudaSuccess && cudaMemset(flag, 0, 4) == cudaSuccess &&
             cudaHostAlloc((void **)&err_h, sizeof *err_h, cudaHostAllocMapped) == cudaSuccess &&
             cudaHostGetDevicePointer((void **)&err_d, err_h, 0) == cudaSuccess && (s = gpu_rank_stream(0, 0)) != NULL;
    if (ok) {
        memset(err_h, 0, sizeof *err_h);
        ok = agmm_launch_flag_raise(flag, 1, s) == cudaSuccess &&
             agmm_launch_flag_wait(flag, 1, 1000000000ull, err_d, 0, 0, AGMM_WAIT_CHUNK, 0, s) == cudaSuccess &&
             cudaMemcpyAsync(&got, flag, 4, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
             cudaStreamSynchronize(s) == cudaSuccess;
    }
    agmm_check(ok && got == 1 && err_h->code == AGMM_DEV_OK,
               "signal kernels: a flag raised to 1 is read back and satisfies its wait (flag %u, error record %u)", got,
               ok ? err_h->code : 0);
    if (s)
        cudaStreamSynchronize(s);
    cudaFree(flag);
    cudaFreeHost(err_h);
}

typedef struct {
    gpu_rank_results res;
    double elapsed_s;
    atomic_int rank0_done;
} timeout_args;

/* Keeps the absent rank's thread alive (its context and pad too) until rank 0 has seen its
 * timeout, so the two meet again at clean-up instead of timing out there as well. */
void gpu_wait_flag(atomic_int *flag, double max_s)
{
    struct timespec nap = {0, 1000000};
    for (double t = 0; t < max_s && !atomic_load(flag); t += 1e-3)
        nanosleep(&nap, NULL);
}

/* Rank 0 enters a barrier that rank 1 never enters. */
static agmm_status timeout_rank(agmm_ctx *ctx, void *arg)
{
    timeout_args *a = arg;
    gpu_rank_results *res = &a->res;
    int rank = agmm_ctx_rank(ctx);
    cudaStream_t s = NULL;
    res->ok[rank] = 1;
    if (rank != 0) {
        gpu_wait_flag(&a->rank0_done, 30.0);
        return AGMM_SUCCESS;
    }
    RANK_STREAM(res, rank, s, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    RANK_AGMM(res, ctx, agmm_symm_barrier_stream(ctx, s));
    RANK_AGMM(res, ctx, agmm_gpu_note_run(ctx, s));
    agmm_status st = agmm_ctx_sync(ctx);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    a->elapsed_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    const char *msg = agmm_last_error(ctx);
    if (st != AGMM_ERR_TIMEOUT || !strstr(msg, "waiting for rank 1") || !strstr(msg, "barrier"))
        gpu_rank_fail(res, rank, "agmm_ctx_sync -> %s: '%s' (want a timeout naming rank 1 and the barrier)",
                      agmm_status_str(st), msg);
    else
        printf("  rank 0 reported: %s\n", msg);
done:
    atomic_store(&a->rank0_done, 1);
    if (s)
        cudaStreamSynchronize(s);
    return AGMM_SUCCESS;
}

void test_world_barrier_timeout(void)
{
    const double timeout_s = 0.25;
    agmm_world *w = gpu_test_world(AGMM_WORLD_EMULATED, 2, timeout_s);
    if (w == NULL)
        return;
    timeout_args a;
    memset(&a, 0, sizeof a);
    agmm_status st = agmm_world_run(w, timeout_rank, &a);
    if (st != AGMM_SUCCESS)
        agmm_check(0, "barrier timeout: agmm_world_run -> %s", agmm_status_str(st));
    gpu_report_ranks(&a.res, 2, "barrier whose peer never arrives ends in AGMM_ERR_TIMEOUT");
    agmm_check(a.elapsed_s >= timeout_s * 0.9 && a.elapsed_s < timeout_s + 2.0,
               "barrier timeout bounded: %.3f s for a %.2f s bound", a.elapsed_s, timeout_s);
    agmm_world_destroy(w);
}
