/* GPU worlds and rank contexts: devices, NCCL communicators, the start-up guards (NCCL version,
 * NVLink multicast off), per-rank streams, cuBLASLt handle, the device error record, the
 * driver entry points for stream memory operations, and the cross-rank stream barrier.
 *
 * The binary links no libcuda: driver calls are fetched through cudaGetDriverEntryPointByVersion,
 * so a machine without a driver fails cudaGetDeviceCount here and world.c falls back to the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx_gpu.h"
#include "gpu_check.h"
#include "../kernels/signal.h"
#include "../symm/symm.h"
#include "../symm/symm_lsa.h"

struct agmm_world_gpu {
    int ndev;                             /* visible devices */
    int nccl_version;                     /* ncclGetVersion, 0 where NCCL is not used */
    ncclComm_t comms[AGMM_MAX_RANKS];     /* one per local rank; none in emulated worlds */
};

static void version_text(int code, char *buf, size_t len)
{
    /* NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z from 2.9 on. */
    snprintf(buf, len, "%d.%d.%d", code / 10000, (code / 100) % 100, code % 100);
}

/* ncclGetVersion == NCCL_VERSION_CODE, or AGMM_ERR_VERSION saying how to fix it: the device API
 * is header code reading structs the library fills, so a mismatch corrupts memory. */
static agmm_status check_nccl_version(struct agmm_world_gpu *g, agmm_error *err)
{
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

agmm_status agmm_world_gpu_create(agmm_world *w, const agmm_world_config *cfg, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    if (cfg->kind == AGMM_WORLD_MPI)
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "this agmm was built without MPI: no MPI world");
    /* Before any CUDA context exists: CUDA maps streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware
     * queues (default 8). Ranks sharing a GPU bring two streams each, and two streams aliased onto
     * one queue serialise: a rank's barrier kernel queued behind a peer's wait for that same
     * barrier never starts, so an emulated world of 8 ran into its timeouts (seen on the H200).
     * 32 is CUDA's maximum; a value the user set is kept. */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    /* Likewise: a kernel loaded lazily, at its first launch, may wait for the whole context, and
     * where ranks share a GPU that context holds a peer's barrier spinning until we arrive (seen:
     * the first launch of a rank's copy-delay kernel stalled it past its peers' timeout). Emulated
     * worlds load every kernel when the context starts; a program that started CUDA before
     * creating the world must set CUDA_MODULE_LOADING=EAGER itself. */
    if (cfg->kind == AGMM_WORLD_EMULATED)
        setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "no usable GPU: cudaGetDeviceCount -> %s (%s)",
                         cudaGetErrorName(ce), cudaGetErrorString(ce));
    }
    if (ndev == 0)
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "no usable GPU: cudaGetDeviceCount found 0 devices");

    struct agmm_world_gpu *g = calloc(1, sizeof *g);
    if (g == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "GPU world allocation failed");
    g->ndev = ndev;
    w->gpu = g;

    int emulated = cfg->kind == AGMM_WORLD_EMULATED;
    if (emulated) {
        if (cfg->nranks < 1) {
            st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "an emulated world needs nranks >= 1 (got %d)", cfg->nranks);
            goto fail;
        }
        w->nranks = cfg->nranks;
    } else {
        w->nranks = cfg->nranks ? cfg->nranks : ndev;
        if (w->nranks > ndev) {
            st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                           "nranks=%d but only %d GPU(s) are visible: NCCL needs one GPU per rank "
                           "(use an emulated world to share GPUs)",
                           w->nranks, ndev);
            goto fail;
        }
    }
    w->kind = emulated ? AGMM_WORLD_EMULATED : AGMM_WORLD_GPU;
    w->nlocal = w->nranks;
    w->first_rank = 0;
    for (int i = 0; i < w->nlocal; i++)
        w->device_of[i] = i % ndev;
    w->shares_gpu = w->nranks > ndev;

    if (!emulated) {
        /* Before any NCCL call: NCCL reads the variable once, at its first initialisation. */
        if (!cfg->allow_nvls && setenv("NCCL_NVLS_ENABLE", "0", 1) != 0) {
            st = AGMM_FAIL(err, AGMM_ERR_INTERNAL, "setenv(NCCL_NVLS_ENABLE=0) failed");
            goto fail;
        }
        AGMM_TRY(st, check_nccl_version(g, err));
        AGMM_NCCL_TRY(st, err, NULL, ncclCommInitAll(g->comms, w->nranks, w->device_of));
    }

    struct cudaDeviceProp prop;
    AGMM_CUDA_TRY(st, err, cudaGetDeviceProperties(&prop, 0));
    char nccl[48] = "no NCCL (ranks share GPUs)";
    if (!emulated) {
        char v[32];
        version_text(g->nccl_version, v, sizeof v);
        snprintf(nccl, sizeof nccl, "NCCL %s%s", v, cfg->allow_nvls ? "" : ", NVLS off");
    }
    if (emulated && w->shares_gpu)
        snprintf(w->describe, sizeof w->describe,
                 "device: %d x %s (sm_%d%d, %d SMs); emulated: %d ranks share %d GPU%s; %s", ndev, prop.name,
                 prop.major, prop.minor, prop.multiProcessorCount, w->nranks, ndev, ndev > 1 ? "s" : "", nccl);
    else
        snprintf(w->describe, sizeof w->describe, "device: %d x %s (sm_%d%d, %d SMs); %d rank%s, %s; %s", ndev,
                 prop.name, prop.major, prop.minor, prop.multiProcessorCount, w->nranks, w->nranks > 1 ? "s" : "",
                 emulated ? "emulated, one thread per rank" : "one thread per GPU", nccl);
    return AGMM_SUCCESS;
fail:
    agmm_world_gpu_destroy(w);
    w->shares_gpu = 0;
    return st;
}

void agmm_world_gpu_destroy(agmm_world *w)
{
    struct agmm_world_gpu *g = w->gpu;
    if (g == NULL)
        return;
    /* Communicators made by one ncclCommInitAll are destroyed from one thread, as nccl-tests does. */
    for (int i = 0; i < AGMM_MAX_RANKS; i++)
        if (g->comms[i])
            ncclCommDestroy(g->comms[i]);
    free(g);
    w->gpu = NULL;
}

/* Stream memory operations from the driver, without linking libcuda. Missing ones stay NULL: only
 * backends that need them (fused) check, and report AGMM_ERR_UNSUPPORTED. */
static void load_stream_memops(struct agmm_ctx_gpu *g)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        g->write_value32 = (agmm_cu_stream_write_value32_fn)fn;
    fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        g->wait_value32 = (agmm_cu_stream_wait_value32_fn)fn;
    cudaGetLastError();
}

/* Ranks of this process on other devices read this rank's memory directly (in-process symmetric
 * memory, copies from peers): enable peer access to each of their devices. */
static agmm_status enable_peers(agmm_ctx *ctx)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_world *w = ctx->world;
    for (int i = 0; i < w->nlocal; i++) {
        int d = w->device_of[i];
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= w->device_of[j] == d;
        if (d == ctx->device || seen)
            continue;
        int can = 0;
        AGMM_CUDA_TRY(st, &ctx->err, cudaDeviceCanAccessPeer(&can, ctx->device, d));
        if (!can) {
            st = AGMM_FAIL(&ctx->err, AGMM_ERR_UNSUPPORTED, "rank %d: GPU %d cannot access GPU %d (no CUDA P2P)",
                           ctx->rank, ctx->device, d);
            goto fail;
        }
        cudaError_t e = cudaDeviceEnablePeerAccess(d, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled)
            cudaGetLastError();
        else
            AGMM_CUDA_TRY(st, &ctx->err, e);
    }
fail:
    return st;
}

/* The device communicator (collective), and whether every rank got one: symmetric memory lives in
 * NCCL windows only if all did, else every rank uses the in-process implementation. */
static agmm_status setup_windows(agmm_ctx *ctx)
{
    char why[AGMM_ERROR_LEN] = "";
    int ok = agmm_lsa_devcomm_create((ncclComm_t)ctx->nccl_comm, &ctx->gpu->nccl_dev, why, sizeof why) == ncclSuccess;
    int all[AGMM_MAX_RANKS];
    agmm_status st = agmm_world_exchange(ctx, &ok, sizeof ok, all);
    if (st != AGMM_SUCCESS)
        return st;
    int every = 1;
    for (int r = 0; r < ctx->world->nranks; r++)
        every &= all[r];
    ctx->gpu->symm_nccl = every;
    if (!ok)
        agmm_log(ctx->world->log_level, AGMM_LOG_WARN, ctx->rank,
                 "NCCL windows unavailable, symmetric memory falls back to in-process buffers: %s", why);
    return AGMM_SUCCESS;
}

agmm_status agmm_ctx_gpu_create(agmm_ctx *ctx)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_world *w = ctx->world;
    struct agmm_ctx_gpu *g = calloc(1, sizeof *g);
    if (g == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: GPU context allocation failed", ctx->rank);
    ctx->gpu = g;
    /* The thread that creates the context is the one that enqueues its work (ctx_gpu.h). */
    AGMM_CUDA_TRY(st, &ctx->err, cudaSetDevice(ctx->device));
    ctx->nccl_comm = w->gpu->comms[ctx->local_rank];

    int least = 0, greatest = 0;
    AGMM_CUDA_TRY(st, &ctx->err, cudaDeviceGetStreamPriorityRange(&least, &greatest));
    /* Non-blocking: never serialised behind the legacy default stream (emulated ranks share it). */
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamCreateWithPriority(&g->copy_stream, cudaStreamNonBlocking, greatest));
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventCreateWithFlags(&g->last_run, cudaEventDisableTiming));
    AGMM_LT_TRY(st, &ctx->err, cublasLtCreate(&g->lt));
    AGMM_CUDA_TRY(st, &ctx->err, cudaHostAlloc((void **)&g->err_host, sizeof *g->err_host, cudaHostAllocMapped));
    memset(g->err_host, 0, sizeof *g->err_host);
    AGMM_CUDA_TRY(st, &ctx->err, cudaHostGetDevicePointer((void **)&g->err_dev, g->err_host, 0));
    g->timeout_ns = (uint64_t)(w->timeout_s * 1e9);
    AGMM_CUDA_TRY(st, &ctx->err, cudaDeviceGetAttribute(&g->num_sms, cudaDevAttrMultiProcessorCount, ctx->device));
    for (int i = 0; i < w->nlocal; i++)
        g->ranks_on_device += w->device_of[i] == ctx->device;
    load_stream_memops(g);
    AGMM_TRY(st, enable_peers(ctx));
    if (ctx->nccl_comm)
        AGMM_TRY(st, setup_windows(ctx));
    return AGMM_SUCCESS;
fail:
    /* world.c destroys the context (and with it this state) on failure. */
    return st;
}

void agmm_ctx_gpu_destroy(agmm_ctx *ctx)
{
    struct agmm_ctx_gpu *g = ctx->gpu;
    if (g == NULL)
        return;
    cudaSetDevice(ctx->device);
    agmm_lsa_devcomm_destroy((ncclComm_t)ctx->nccl_comm, g->nccl_dev);
    if (g->copy_stream)
        cudaStreamSynchronize(g->copy_stream);
    if (g->lt)
        cublasLtDestroy(g->lt);
    if (g->last_run)
        cudaEventDestroy(g->last_run);
    if (g->copy_stream)
        cudaStreamDestroy(g->copy_stream);
    if (g->err_host)
        cudaFreeHost(g->err_host);
    cudaGetLastError();
    free(g);
    ctx->gpu = NULL;
}

static const char *wait_name(int wait)
{
    switch (wait) {
    case AGMM_WAIT_BARRIER: return "a cross-rank barrier";
    case AGMM_WAIT_CHUNK: return "a chunk of the gathered A";
    case AGMM_WAIT_ALL_REDUCE: return "an all-reduce barrier";
    }
    return "a wait";
}

agmm_status agmm_ctx_gpu_check_dev_error(agmm_ctx *ctx)
{
    const volatile agmm_dev_error *e = ctx->gpu->err_host;
    if (e->code == AGMM_DEV_OK)
        return AGMM_SUCCESS;
    if (e->wait == AGMM_WAIT_CHUNK)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                         "rank %d: timed out after %.3g s waiting for chunk %d of the gathered A (rank %d's rows; "
                         "epoch %u, flag read %u): its copy never landed",
                         (int)e->rank, ctx->world->timeout_s, (int)e->chunk, (int)e->peer, (unsigned)e->epoch,
                         (unsigned)e->seen);
    return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                     "rank %d: timed out after %.3g s in %s waiting for rank %d (epoch %u, last saw %u): the "
                     "peer never arrived",
                     (int)e->rank, ctx->world->timeout_s, wait_name(e->wait), (int)e->peer, (unsigned)e->epoch,
                     (unsigned)e->seen);
}

agmm_status agmm_ctx_gpu_sync(agmm_ctx *ctx)
{
    agmm_status st = AGMM_SUCCESS;
    struct agmm_ctx_gpu *g = ctx->gpu;
    AGMM_CUDA_TRY(st, &ctx->err, cudaSetDevice(ctx->device));
    if (g->ranks_on_device == 1) {
        AGMM_CUDA_TRY(st, &ctx->err, cudaDeviceSynchronize());
    } else {
        /* Only this rank's work: peers on the device may hold barriers waiting for our next call. */
        if (g->last_run_recorded)
            AGMM_CUDA_TRY(st, &ctx->err, cudaEventSynchronize(g->last_run));
        AGMM_CUDA_TRY(st, &ctx->err, cudaStreamSynchronize(g->copy_stream));
    }
    AGMM_CUDA_TRY(st, &ctx->err, cudaGetLastError());
    st = agmm_ctx_gpu_check_dev_error(ctx);
fail:
    return st;
}

agmm_status agmm_ctx_gpu_check_stream(agmm_ctx *ctx, cudaStream_t stream)
{
    if (stream == NULL && ctx->gpu->ranks_on_device > 1)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG,
                         "rank %d: %d ranks share GPU %d, so each needs its own non-blocking stream: the legacy "
                         "default stream (NULL) serialises them and a barrier would wait for a peer queued behind it",
                         ctx->rank, ctx->gpu->ranks_on_device, ctx->device);
    return AGMM_SUCCESS;
}

agmm_status agmm_ctx_gpu_barrier(agmm_ctx *ctx, cudaStream_t stream)
{
    agmm_status st = AGMM_SUCCESS;
    if (ctx->world->nranks == 1)
        return AGMM_SUCCESS;
    uint32_t epoch = ++ctx->barrier_epoch;
    AGMM_CUDA_TRY(st, &ctx->err,
                  agmm_launch_barrier((uint32_t *const *)ctx->pad->d_peer, ctx->rank, ctx->world->nranks, epoch,
                                      ctx->gpu->timeout_ns, ctx->gpu->err_dev, stream));
fail:
    return st;
}

agmm_status agmm_ctx_gpu_note_run(agmm_ctx *ctx, cudaStream_t stream)
{
    agmm_status st = AGMM_SUCCESS;
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventRecord(ctx->gpu->last_run, stream));
    ctx->gpu->last_run_recorded = 1;
fail:
    return st;
}

agmm_status agmm_ctx_gpu_agreed_sm_share(agmm_ctx *ctx, int *out)
{
    int per_device = ctx->gpu->ranks_on_device > 0 ? ctx->gpu->ranks_on_device : 1;
    int mine = ctx->gpu->num_sms / per_device;
    if (mine < 1)
        mine = 1;
    int all[AGMM_MAX_RANKS];
    for (int r = 0; r < AGMM_MAX_RANKS; r++)
        all[r] = mine;
    agmm_status st = agmm_world_exchange(ctx, &mine, sizeof mine, all);
    if (st != AGMM_SUCCESS)
        return st;
    for (int r = 0; r < ctx->world->nranks; r++)
        if (all[r] < mine)
            mine = all[r];
    *out = mine;
    return AGMM_SUCCESS;
}

void agmm_ctx_gpu_quiesce(agmm_ctx *ctx)
{
    struct agmm_ctx_gpu *g = ctx->gpu;
    if (g == NULL)
        return;
    cudaSetDevice(ctx->device);
    if (g->ranks_on_device == 1) {
        cudaDeviceSynchronize();
    } else {
        if (g->last_run_recorded)
            cudaEventSynchronize(g->last_run);
        cudaStreamSynchronize(g->copy_stream);
    }
    cudaGetLastError();
}
