/* NCCL communicators, bounded: made, used and ended without ever waiting on NCCL for longer than
 * the world allows.
 *
 * Communicators are blocking by default: on the H200 with NCCL 2.28.9, nonblocking ones
 * (ncclConfig_t.blocking = 0) made every later NCCL call fail with CUDA error 500 ("named symbol
 * not found": ncclDevCommCreate, ncclAllGather), measured 2026-12-03. AGMM_NCCL_BLOCKING=0 asks
 * for nonblocking ones. Either way the waits that matter are ours and bounded: a collective set-up
 * step is entered only after the ranks agreed that every one will enter it (world and heap
 * agreements), and a run's NCCL work is waited for by polling its completion and
 * ncclCommGetAsyncError within the world's timeout; where a call answers ncclInProgress
 * (nonblocking), it is polled the same way. Creation gets at least COMM_INIT_MIN_S, since NCCL's
 * own set-up (topology, connections) takes seconds on a healthy machine. On timeout the
 * communicator is aborted (ncclCommAbort; a borrowed one is left to its owner), the error names
 * the call, the rank is out of step and the world is unusable.
 *
 * Made here: the communicators of one-process worlds (one group, one thread) and of process
 * worlds (ncclCommInitRankConfig from an id, or the caller's to borrow). */
#ifdef AGMM_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "world_gpu.h"
#include "../core/clock.h"
#include "../core/knobs.h"

#define COMM_INIT_MIN_S 60.0

static void nap_us(long us)
{
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

static ncclConfig_t comm_config(void)
{
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    /* Checked at world creation (agmm_knobs_check): a bad value cannot reach here. */
    agmm_error ignored;
    agmm_knob_value b;
    agmm_knob_read(AGMM_KNOB_NCCL_BLOCKING, &b, &ignored);
    c.blocking = b.choice; /* the words are "0|1" */
    return c;
}

/* The communicator's state once it leaves ncclInProgress, or ncclInProgress at the deadline. */
static ncclResult_t settle_comm(ncclComm_t comm, int64_t deadline_ns)
{
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess)
            return r;
        if (state != ncclInProgress || agmm_mono_ns() >= deadline_ns)
            return state;
        nap_us(100);
    }
}

static double init_bound_s(const agmm_world *w)
{
    return w->timeout_s > COMM_INIT_MIN_S ? w->timeout_s : COMM_INIT_MIN_S;
}

static void version_text(int code, char *buf, size_t len)
{
    /* NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z from 2.9 on. */
    snprintf(buf, len, "%d.%d.%d", code / 10000, (code / 100) % 100, code % 100);
}

agmm_status agmm_nccl_guards(struct agmm_world_gpu *g, int allow_nvls, agmm_error *err)
{
    /* Before any NCCL call: NCCL reads the variable once, at its first initialisation. A value
     * the user set is kept, but never one that turns multicast on unasked (agmm.h). */
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (!allow_nvls && nvls != NULL && strcmp(nvls, "0") != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "NCCL_NVLS_ENABLE=%s in the environment, but allow_nvls=0: NVLink multicast stays off "
                         "unless the world config asks for it (unset the variable or set it to 0)",
                         nvls);
    if (!allow_nvls && setenv("NCCL_NVLS_ENABLE", "0", 0) != 0)
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "setenv(NCCL_NVLS_ENABLE=0) failed");
    /* ncclGetVersion == NCCL_VERSION_CODE: the device API is header code reading structs the
     * library fills, so a mismatch corrupts memory. */
    int v = 0;
    ncclResult_t r = ncclGetVersion(&v);
    if (r != ncclSuccess)
        return AGMM_FAIL(err, AGMM_ERR_NCCL, "ncclGetVersion -> %s", ncclGetErrorString(r));
    g->nccl_version = v;
    if (v != NCCL_VERSION_CODE) {
        char lib[32], hdr[32];
        version_text(v, lib, sizeof lib);
        version_text(NCCL_VERSION_CODE, hdr, sizeof hdr);
        return AGMM_FAIL(err, AGMM_ERR_VERSION,
                         "the NCCL library loaded is %s but agmm was built with NCCL %s headers; they must match. "
                         "Build against the library you run (make NCCL_HOME=<dir with include/ and lib/>) or load "
                         "the matching one (LD_LIBRARY_PATH=<its lib dir>; on the GPU machine the PyTorch wheel's: "
                         "$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')/lib)",
                         lib, hdr);
    }
    return AGMM_SUCCESS;
}

void agmm_nccl_text(const agmm_world *w, int allow_nvls, char *buf, size_t len)
{
    char v[32];
    version_text(w->gpu->nccl_version, v, sizeof v);
    snprintf(buf, len, "NCCL %s%s", v, allow_nvls ? "" : ", NVLS off");
}

agmm_status agmm_nccl_init_local(agmm_world *w, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    struct agmm_world_gpu *g = w->gpu;
    ncclUniqueId id;
    ncclConfig_t cfg = comm_config();
    AGMM_NCCL_TRY(st, err, NULL, ncclGetUniqueId(&id));
    /* One thread makes every rank's communicator: one group, as ncclCommInitAll does inside. */
    AGMM_NCCL_TRY(st, err, NULL, ncclGroupStart());
    for (int i = 0; i < w->nranks; i++) {
        cudaSetDevice(w->device_of[i]);
        ncclResult_t r = ncclCommInitRankConfig(&g->comms[i], w->nranks, id, i, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) {
            ncclGroupEnd();
            AGMM_NCCL_TRY(st, err, NULL, r);
        }
    }
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclInProgress)
        AGMM_NCCL_TRY(st, err, NULL, r);
    const int64_t deadline = agmm_mono_ns() + (int64_t)(init_bound_s(w) * 1e9);
    for (int i = 0; i < w->nranks; i++) {
        r = settle_comm(g->comms[i], deadline);
        if (r == ncclInProgress) {
            st = AGMM_FAIL(err, AGMM_ERR_TIMEOUT,
                           "ncclCommInitRankConfig of rank %d (GPU %d) did not complete within %.0f s", i,
                           w->device_of[i], init_bound_s(w));
            goto fail;
        }
        AGMM_NCCL_TRY(st, err, g->comms[i], r);
    }
fail:
    return st;
}

agmm_status agmm_world_gpu_nccl_id(void *out, size_t len, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    ncclUniqueId id;
    if (len < sizeof id)
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "an NCCL unique id needs %zu bytes, not %zu", sizeof id, len);
    AGMM_NCCL_TRY(st, err, NULL, ncclGetUniqueId(&id));
    memcpy(out, &id, sizeof id);
fail:
    return st;
}

/* A borrowed communicator must be this world's: its size, this rank, this device. */
static agmm_status check_borrowed(agmm_world *w, ncclComm_t comm, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    int count = 0, rank = -1, device = -1;
    AGMM_NCCL_TRY(st, err, comm, ncclCommCount(comm, &count));
    AGMM_NCCL_TRY(st, err, comm, ncclCommUserRank(comm, &rank));
    AGMM_NCCL_TRY(st, err, comm, ncclCommCuDevice(comm, &device));
    if (count != w->nranks || rank != w->first_rank || device != w->device_of[0])
        st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                       "nccl_comm: the communicator has %d ranks, is rank %d on GPU %d; this world has %d ranks and "
                       "this process is rank %d on GPU %d",
                       count, rank, device, w->nranks, w->first_rank, w->device_of[0]);
fail:
    return st;
}

agmm_status agmm_world_gpu_join_nccl(agmm_world *w, const void *nccl_id, void *comm, int allow_nvls, char *text,
                                     size_t text_len, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    struct agmm_world_gpu *g = w->gpu;
    AGMM_TRY(st, agmm_nccl_guards(g, allow_nvls, err));
    size_t used = strlen(text);
    char nccl[48];
    agmm_nccl_text(w, allow_nvls, nccl, sizeof nccl);
    snprintf(text + used, text_len - used, "; %s%s", nccl, comm ? " (the caller's communicator)" : "");
    if (comm != NULL) {
        AGMM_TRY(st, check_borrowed(w, (ncclComm_t)comm, err));
        g->comms[0] = (ncclComm_t)comm;
        g->borrowed = 1;
        return AGMM_SUCCESS;
    }
    if (nccl_id == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank %d: no NCCL unique id to make the communicator from",
                         w->first_rank);
    ncclUniqueId id;
    memcpy(&id, nccl_id, sizeof id);
    ncclConfig_t cfg = comm_config();
    AGMM_CUDA_TRY(st, err, cudaSetDevice(w->device_of[0]));
    ncclResult_t r = ncclCommInitRankConfig(&g->comms[0], w->nranks, id, w->first_rank, &cfg);
    if (r == ncclInProgress)
        r = settle_comm(g->comms[0], agmm_mono_ns() + (int64_t)(init_bound_s(w) * 1e9));
    if (r == ncclInProgress) {
        ncclCommAbort(g->comms[0]);
        g->comms[0] = NULL;
        return AGMM_FAIL(err, AGMM_ERR_TIMEOUT,
                         "rank %d: ncclCommInitRankConfig (%d ranks) did not complete within %.0f s: a rank did not "
                         "make the same call, or NCCL cannot connect the ranks (NCCL_DEBUG=WARN tells more)",
                         w->first_rank, w->nranks, init_bound_s(w));
    }
    AGMM_NCCL_TRY(st, err, g->comms[0], r);
fail:
    return st;
}

void agmm_nccl_end_all(agmm_world *w)
{
    struct agmm_world_gpu *g = w->gpu;
    const int64_t deadline = agmm_mono_ns() + (int64_t)(w->timeout_s * 1e9);
    int owned = 0;
    for (int i = 0; i < AGMM_MAX_RANKS; i++)
        owned += g->comms[i] != NULL && !(g->borrowed && i == 0);
    if (owned == 0)
        return;
    /* Finalising is collective over a clique, and one thread ends all of this process's: one group. */
    ncclGroupStart();
    for (int i = 0; i < AGMM_MAX_RANKS; i++)
        if (g->comms[i] && !(g->borrowed && i == 0))
            ncclCommFinalize(g->comms[i]);
    ncclGroupEnd();
    for (int i = 0; i < AGMM_MAX_RANKS; i++) {
        if (g->comms[i] == NULL || (g->borrowed && i == 0))
            continue;
        if (settle_comm(g->comms[i], deadline) == ncclSuccess)
            ncclCommDestroy(g->comms[i]);
        else
            ncclCommAbort(g->comms[i]);
        g->comms[i] = NULL;
    }
}

/* After a timeout: nothing more is waited for on this rank's communicator. */
static agmm_status give_up(agmm_ctx *ctx, const char *what, double waited_s)
{
    agmm_world *w = ctx->world;
    agmm_gpu_rank *gr = ctx->gpu;
    int borrowed = w->gpu->borrowed;
    AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
              "rank %d: %s did not complete within %.3g s: a peer died, stalled or did not make the same call. %s; "
              "the world is unusable",
              ctx->info.rank, what, waited_s,
              borrowed ? "The borrowed communicator was left as it is (abort it yourself)"
                       : "The communicator was aborted");
    if (!borrowed && gr->nccl_comm != NULL) {
        ncclCommAbort(gr->nccl_comm);
        w->gpu->comms[ctx->info.local_rank] = NULL;
        gr->nccl_comm = NULL;
    }
    *agmm_ctx_out_of_step(ctx) = ctx->err;
    agmm_world_break(w, &ctx->err);
    return AGMM_ERR_TIMEOUT;
}

agmm_status agmm_gpu_nccl_settle(agmm_ctx *ctx, ncclResult_t r, const char *what)
{
    ncclComm_t comm = ctx->gpu->nccl_comm;
    if (r == ncclInProgress && comm != NULL)
        r = settle_comm(comm, agmm_mono_ns() + (int64_t)(ctx->info.timeout_s * 1e9));
    if (r == ncclInProgress)
        return give_up(ctx, what, ctx->info.timeout_s);
    if (r != ncclSuccess) {
        const char *w = ncclGetLastError(comm);
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NCCL, "rank %d: %s -> %s%s%s", ctx->info.rank, what, ncclGetErrorString(r),
                         w && *w ? ": " : "", w ? w : "");
    }
    return AGMM_SUCCESS;
}

agmm_status agmm_nccl_wait_stream(agmm_world *w, cudaStream_t stream, const char *what, agmm_error *err)
{
    ncclComm_t comm = w->gpu->comms[0];
    const int64_t deadline = agmm_mono_ns() + (int64_t)(w->timeout_s * 1e9);
    for (;;) {
        cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess)
            return AGMM_SUCCESS;
        if (q != cudaErrorNotReady) {
            cudaGetLastError();
            return AGMM_FAIL(err, AGMM_ERR_CUDA, "rank %d: %s: %s", w->first_rank, what, cudaGetErrorString(q));
        }
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
            return AGMM_FAIL(err, AGMM_ERR_NCCL, "rank %d: %s -> %s", w->first_rank, what, ncclGetErrorString(state));
        if (agmm_mono_ns() >= deadline)
            break;
        nap_us(50);
    }
    if (!w->gpu->borrowed) {
        ncclCommAbort(comm);
        w->gpu->comms[0] = NULL;
    }
    return AGMM_FAIL(err, AGMM_ERR_TIMEOUT,
                     "rank %d: %s did not complete within %.3g s: a rank on another host died, stalled or did not "
                     "make the same call (NCCL cannot say which). %s",
                     w->first_rank, what, w->timeout_s,
                     w->gpu->borrowed ? "The borrowed communicator was left as it is" : "The communicator was aborted");
}

agmm_status agmm_nccl_wait_work(agmm_ctx *ctx)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_gpu_rank *g = ctx->gpu;
    const int64_t start = agmm_mono_ns(), deadline = start + (int64_t)(ctx->info.timeout_s * 1e9);
    cudaEvent_t ev[2];
    const int nev = agmm_gpu_run_events(g, ev);
    for (;;) {
        int pending = 0;
        for (int i = 0; i <= nev; i++) {
            cudaError_t q = i < nev ? cudaEventQuery(ev[i]) : cudaStreamQuery(g->copy_stream);
            if (q == cudaErrorNotReady)
                pending = 1;
            else
                AGMM_CUDA_TRY(st, &ctx->err, q);
        }
        if (!pending)
            return AGMM_SUCCESS;
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(g->nccl_comm, &state) == ncclSuccess && state != ncclSuccess &&
            state != ncclInProgress)
            return agmm_gpu_nccl_settle(ctx, state, "an NCCL operation of this rank (asynchronous error)");
        if (agmm_mono_ns() >= deadline)
            return give_up(ctx, "agmm_ctx_sync: this rank's work (waiting in an NCCL operation)", ctx->info.timeout_s);
        nap_us(50);
    }
fail:
    cudaGetLastError();
    return st;
}
#endif /* AGMM_HAVE_CUDA */
