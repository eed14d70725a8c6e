/* GPU worlds and ranks: devices, NCCL communicators, the start-up guards (NCCL version, NVLink
 * multicast off), per-rank streams, cuBLASLt handle, the device error record and the driver entry
 * points for stream memory operations.
 *
 * The binary links no libcuda: driver calls are fetched through cudaGetDriverEntryPointByVersion,
 * so a machine without a driver fails cudaGetDeviceCount here and world_common.c falls back to the CPU. */
#ifdef AGMM_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "rank_gpu.h"
#include "world_impl.h"

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
    /* Before any CUDA context exists: CUDA maps streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware
     * queues (default 8). Ranks sharing a GPU bring two streams each, and two streams aliased onto
     * one queue serialise: a rank's barrier kernel queued behind a peer's wait for that same
     * barrier never starts, so an emulated world of 8 ran into its timeouts (seen on the H200).
     * 32 is CUDA's maximum; a value the user set is kept (agmm.h). */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    /* Likewise: a kernel loaded lazily, at its first launch, may wait for the whole context, and
     * where ranks share a GPU that context holds a peer's barrier spinning until we arrive (seen:
     * the first launch of a rank's copy-delay kernel stalled it past its peers' timeout). Emulated
     * worlds load every kernel when the context starts. */
    if (cfg->kind == AGMM_WORLD_EMULATED)
        setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce == cudaErrorNoDevice || ce == cudaErrorInsufficientDriver || (ce == cudaSuccess && ndev == 0)) {
        /* The one failure after which world_common.c's AUTO takes the CPU world. */
        cudaGetLastError();
        w->no_gpu_visible = 1;
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "no GPU visible: cudaGetDeviceCount -> %s",
                         ce == cudaSuccess ? "0 devices" : cudaGetErrorString(ce));
    }
    if (ce != cudaSuccess) {
        cudaGetLastError();
        return AGMM_FAIL(err, AGMM_ERR_CUDA, "GPUs are visible but CUDA cannot use them: cudaGetDeviceCount -> %s (%s)",
                         cudaGetErrorName(ce), cudaGetErrorString(ce));
    }

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
    w->caps = AGMM_CAP_GPU | AGMM_CAP_PEER_MEMORY;
    if (emulated)
        snprintf(w->lacks_nccl, sizeof w->lacks_nccl,
                 "ranks share a GPU (an emulated world), and NCCL needs one GPU per rank");

    if (!emulated) {
        /* Before any NCCL call: NCCL reads the variable once, at its first initialisation. A
         * value the user set is kept, but never one that turns multicast on unasked (agmm.h). */
        const char *nvls = getenv("NCCL_NVLS_ENABLE");
        if (!cfg->allow_nvls && nvls != NULL && strcmp(nvls, "0") != 0) {
            st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                           "NCCL_NVLS_ENABLE=%s in the environment, but allow_nvls=0: NVLink multicast stays off "
                           "unless the world config asks for it (unset the variable or set it to 0)",
                           nvls);
            goto fail;
        }
        if (!cfg->allow_nvls && setenv("NCCL_NVLS_ENABLE", "0", 0) != 0) {
            st = AGMM_FAIL(err, AGMM_ERR_INTERNAL, "setenv(NCCL_NVLS_ENABLE=0) failed");
            goto fail;
        }
        AGMM_TRY(st, check_nccl_version(g, err));
        AGMM_NCCL_TRY(st, err, NULL, ncclCommInitAll(g->comms, w->nranks, w->device_of));
        w->caps |= AGMM_CAP_NCCL;
    }

    struct cudaDeviceProp prop;
    AGMM_CUDA_TRY(st, err, cudaGetDeviceProperties(&prop, 0));
    char nccl[48] = "no NCCL (ranks share GPUs)";
    if (!emulated) {
        char v[32];
        version_text(g->nccl_version, v, sizeof v);
        snprintf(nccl, sizeof nccl, "NCCL %s%s", v, cfg->allow_nvls ? "" : ", NVLS off");
    }
    if (emulated && w->nranks > ndev)
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
static void load_stream_memops(agmm_gpu_rank *g)
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
    const int dev = ctx->info.device;
    for (int i = 0; i < w->nlocal; i++) {
        int d = w->device_of[i];
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= w->device_of[j] == d;
        if (d == dev || seen)
            continue;
        int can = 0;
        AGMM_CUDA_TRY(st, &ctx->err, cudaDeviceCanAccessPeer(&can, dev, d));
        if (!can) {
            st = AGMM_FAIL(&ctx->err, AGMM_ERR_UNSUPPORTED, "rank %d: GPU %d cannot access GPU %d (no CUDA P2P)",
                           ctx->info.rank, dev, d);
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

agmm_status agmm_gpu_rank_create(agmm_ctx *ctx)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_world *w = ctx->world;
    agmm_gpu_rank *g = calloc(1, sizeof *g);
    if (g == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: GPU context allocation failed", ctx->info.rank);
    ctx->gpu = g;
    /* The thread that creates the context is the one that enqueues its work (rank_gpu.h). */
    AGMM_CUDA_TRY(st, &ctx->err, cudaSetDevice(ctx->info.device));
    g->nccl_comm = w->gpu->comms[ctx->info.local_rank];

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
    AGMM_CUDA_TRY(st, &ctx->err,
                  cudaDeviceGetAttribute(&g->num_sms, cudaDevAttrMultiProcessorCount, ctx->info.device));
    load_stream_memops(g);
    AGMM_TRY(st, enable_peers(ctx));
    return AGMM_SUCCESS;
fail:
    /* world_common.c destroys the context (and with it this state) on failure. */
    return st;
}

void agmm_gpu_rank_destroy(agmm_ctx *ctx)
{
    agmm_gpu_rank *g = ctx->gpu;
    if (g == NULL)
        return;
    cudaSetDevice(ctx->info.device);
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
    case AGMM_WAIT_READY: return "a pull GEMM's wait for a peer's shard";
    }
    return "a wait";
}

const agmm_gpu_rank *agmm_ctx_gpu(const agmm_ctx *ctx) { return ctx->gpu; }

agmm_status agmm_gpu_check_dev_error(agmm_ctx *ctx)
{
    const volatile agmm_dev_error *e = ctx->gpu->err_host;
    if (e->code == AGMM_DEV_OK)
        return AGMM_SUCCESS;
    if (e->wait == AGMM_WAIT_CHUNK)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                         "rank %d: timed out after %.3g s waiting for chunk %d of the gathered A (rank %d's rows; "
                         "epoch %u, flag read %u): its copy never landed",
                         (int)e->rank, ctx->info.timeout_s, (int)e->chunk, (int)e->peer, (unsigned)e->epoch,
                         (unsigned)e->seen);
    return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                     "rank %d: timed out after %.3g s in %s waiting for rank %d (epoch %u, last saw %u): the "
                     "peer never arrived",
                     (int)e->rank, ctx->info.timeout_s, wait_name(e->wait), (int)e->peer, (unsigned)e->epoch,
                     (unsigned)e->seen);
}

agmm_status agmm_gpu_rank_sync(agmm_ctx *ctx)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_gpu_rank *g = ctx->gpu;
    AGMM_CUDA_TRY(st, &ctx->err, cudaSetDevice(ctx->info.device));
    if (ctx->info.ranks_on_device == 1) {
        AGMM_CUDA_TRY(st, &ctx->err, cudaDeviceSynchronize());
    } else {
        /* Only this rank's work: peers on the device may hold barriers waiting for our next call. */
        if (g->last_run_recorded)
            AGMM_CUDA_TRY(st, &ctx->err, cudaEventSynchronize(g->last_run));
        AGMM_CUDA_TRY(st, &ctx->err, cudaStreamSynchronize(g->copy_stream));
    }
    AGMM_CUDA_TRY(st, &ctx->err, cudaGetLastError());
    st = agmm_gpu_check_dev_error(ctx);
fail:
    return st;
}

agmm_status agmm_gpu_check_stream(agmm_ctx *ctx, cudaStream_t stream)
{
    if (stream == NULL && ctx->info.ranks_on_device > 1)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG,
                         "rank %d: %d ranks share GPU %d, so each needs its own non-blocking stream: the legacy "
                         "default stream (NULL) serialises them and a barrier would wait for a peer queued behind it",
                         ctx->info.rank, ctx->info.ranks_on_device, ctx->info.device);
    return AGMM_SUCCESS;
}

agmm_status agmm_gpu_note_run(agmm_ctx *ctx, cudaStream_t stream)
{
    agmm_status st = AGMM_SUCCESS;
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventRecord(ctx->gpu->last_run, stream));
    ctx->gpu->last_run_recorded = 1;
fail:
    return st;
}

agmm_status agmm_gpu_agreed_sm_share(agmm_ctx *ctx, int *out)
{
    int per_device = ctx->info.ranks_on_device > 0 ? ctx->info.ranks_on_device : 1;
    int mine = ctx->gpu->num_sms / per_device;
    if (mine < 1)
        mine = 1;
    int all[AGMM_MAX_RANKS];
    for (int r = 0; r < AGMM_MAX_RANKS; r++)
        all[r] = mine;
    agmm_status st = agmm_host_exchange(ctx, &mine, sizeof mine, all);
    if (st != AGMM_SUCCESS)
        return st;
    for (int r = 0; r < ctx->info.nranks; r++)
        if (all[r] < mine)
            mine = all[r];
    *out = mine;
    return AGMM_SUCCESS;
}

void agmm_gpu_quiesce(agmm_ctx *ctx)
{
    agmm_gpu_rank *g = ctx->gpu;
    if (g == NULL)
        return;
    cudaSetDevice(ctx->info.device);
    if (ctx->info.ranks_on_device == 1) {
        cudaDeviceSynchronize();
    } else {
        if (g->last_run_recorded)
            cudaEventSynchronize(g->last_run);
        cudaStreamSynchronize(g->copy_stream);
    }
    cudaGetLastError();
}
#endif /* AGMM_HAVE_CUDA */
