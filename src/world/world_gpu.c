/* GPU worlds and ranks: devices, the start-up guards, per-rank streams, cuBLASLt handle, the
 * device error record and the driver entry points for stream memory operations and virtual
 * memory; the GPU part of process worlds (device, peer-access probe). NCCL communicators are
 * nccl_comm.c's.
 *
 * The binary links no libcuda: driver calls are fetched through cudaGetDriverEntryPointByVersion,
 * so a machine without a driver fails cudaGetDeviceCount here and world_common.c falls back to the CPU. */
#ifdef AGMM_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world_gpu.h"
#include "../core/text.h"

/* Before any CUDA context exists: CUDA maps streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware
 * queues (default 8). Ranks sharing a GPU bring two streams each, and two streams aliased onto
 * one queue serialise: a rank's barrier kernel queued behind a peer's wait for that same barrier
 * never starts, so an emulated world of 8 ran into its timeouts (seen on the H200). 32 is CUDA's
 * maximum; a value the user set is kept (agmm.h).
 * Likewise: a kernel loaded lazily, at its first launch, may wait for the whole context, and
 * where ranks share a GPU that context holds a peer's barrier spinning until we arrive (seen: the
 * first launch of a rank's copy-delay kernel stalled it past its peers' timeout). Emulated worlds
 * load every kernel when the context starts. */
static void cuda_env(agmm_world_kind kind)
{
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    if (kind == AGMM_WORLD_EMULATED)
        setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

/* The visible devices and the world's GPU part, or why not: AGMM_ERR_UNSUPPORTED with
 * no_gpu_visible set where there is no GPU or no driver (AUTO then takes the CPU), AGMM_ERR_CUDA
 * where CUDA fails otherwise. */
static agmm_status open_devices(agmm_world *w, agmm_world_kind kind, agmm_error *err)
{
    cuda_env(kind);
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
    w->gpu = calloc(1, sizeof *w->gpu);
    if (w->gpu == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "GPU world allocation failed");
    w->gpu->ndev = ndev;
    return AGMM_SUCCESS;
}

int agmm_world_gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    return n;
}

/* "NCCL_P2P_DISABLE=1: ..." where the user turned peer access off, else "". */
static void p2p_disabled(char *why, size_t len)
{
    const char *p2p = getenv("NCCL_P2P_DISABLE");
    why[0] = '\0';
    if (p2p && *p2p && strcmp(p2p, "0") != 0)
        agmm_format(why, len, "NCCL_P2P_DISABLE=%s: peer access between the ranks' GPUs is turned off", p2p);
}

agmm_status agmm_world_gpu_create(agmm_world *w, const agmm_world_config *cfg, agmm_error *err)
{
    agmm_status st = open_devices(w, cfg->kind, err);
    if (st != AGMM_SUCCESS)
        return st;
    struct agmm_world_gpu *g = w->gpu;
    const int ndev = g->ndev;
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
    if (!emulated && w->nranks > 1) {
        p2p_disabled(w->lacks_peer, sizeof w->lacks_peer);
        if (w->lacks_peer[0])
            w->caps &= ~(unsigned)AGMM_CAP_PEER_MEMORY;
    }

    if (!emulated) {
        AGMM_TRY(st, agmm_nccl_guards(g, cfg->allow_nvls, err));
        AGMM_TRY(st, agmm_nccl_init_local(w, err));
        w->caps |= AGMM_CAP_NCCL;
    }

    struct cudaDeviceProp prop;
    AGMM_CUDA_TRY(st, err, cudaGetDeviceProperties(&prop, 0));
    char nccl[48] = "no NCCL (ranks share GPUs)";
    if (!emulated)
        agmm_nccl_text(w, cfg->allow_nvls, nccl, sizeof nccl);
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
    agmm_nccl_end_all(w);
    free(g);
    w->gpu = NULL;
}

void *agmm_world_gpu_comm(const agmm_world *w) { return w->gpu ? w->gpu->comms[0] : NULL; }

/* ---- virtual memory (cuMem*) through the driver's entry points ---- */

int agmm_gpu_vmm_load(agmm_vmm_api *api, char *why, size_t why_len)
{
    static const struct {
        const char *name;
        size_t offset;
    } calls[] = {
        {"cuDeviceGet", offsetof(agmm_vmm_api, device_get)},
        {"cuMemGetAllocationGranularity", offsetof(agmm_vmm_api, granularity)},
        {"cuMemCreate", offsetof(agmm_vmm_api, create)},
        {"cuMemExportToShareableHandle", offsetof(agmm_vmm_api, export_handle)},
        {"cuMemImportFromShareableHandle", offsetof(agmm_vmm_api, import_handle)},
        {"cuMemAddressReserve", offsetof(agmm_vmm_api, reserve)},
        {"cuMemAddressFree", offsetof(agmm_vmm_api, address_free)},
        {"cuMemMap", offsetof(agmm_vmm_api, map)},
        {"cuMemSetAccess", offsetof(agmm_vmm_api, set_access)},
        {"cuMemUnmap", offsetof(agmm_vmm_api, unmap)},
        {"cuMemRelease", offsetof(agmm_vmm_api, release)},
        {"cuGetErrorName", offsetof(agmm_vmm_api, error_name)},
    };
    memset(api, 0, sizeof *api);
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        void *fn = NULL;
        enum cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion(calls[i].name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || fn == NULL) {
            cudaGetLastError();
            snprintf(why, why_len, "the CUDA driver has no %s", calls[i].name);
            return -1;
        }
        memcpy((char *)api + calls[i].offset, &fn, sizeof fn);
    }
    return 0;
}

CUmemAllocationProp agmm_gpu_vmm_prop(CUdevice device)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* Whether this process can make device memory another process can map: one granule made with a
 * POSIX fd handle, exported, imported back, mapped and released. 0, or -1 with why. */
static int probe_vmm(int device, char *why, size_t len)
{
    agmm_vmm_api v;
    if (agmm_gpu_vmm_load(&v, why, len) != 0)
        return -1;
    CUdevice dev;
    CUmemAllocationProp prop;
    size_t gran = 0;
    CUmemGenericAllocationHandle h = 0, back = 0;
    CUdeviceptr va = 0;
    int fd = -1, mapped = 0;
    const char *step = "cuDeviceGet";
    CUresult r = v.device_get(&dev, device);
    if (r == CUDA_SUCCESS) {
        prop = agmm_gpu_vmm_prop(dev);
        step = "cuMemGetAllocationGranularity";
        r = v.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    }
    if (r == CUDA_SUCCESS)
        step = "cuMemCreate with a POSIX file-descriptor handle", r = v.create(&h, gran, &prop, 0);
    if (r == CUDA_SUCCESS)
        step = "cuMemExportToShareableHandle", r = v.export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r == CUDA_SUCCESS)
        step = "cuMemImportFromShareableHandle",
        r = v.import_handle(&back, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r == CUDA_SUCCESS)
        step = "cuMemAddressReserve", r = v.reserve(&va, gran, gran, 0, 0);
    if (r == CUDA_SUCCESS)
        step = "cuMemMap", r = v.map(va, gran, 0, back, 0), mapped = r == CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc a = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        step = "cuMemSetAccess", r = v.set_access(va, gran, &a, 1);
    }
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        v.error_name(r, &name);
        snprintf(why, len, "%s -> %s on GPU %d", step, name, device);
    }
    if (mapped)
        v.unmap(va, gran);
    if (va)
        v.address_free(va, gran);
    if (back)
        v.release(back);
    if (h)
        v.release(h);
    if (fd >= 0)
        close(fd);
    return r == CUDA_SUCCESS ? 0 : -1;
}

agmm_status agmm_world_gpu_join_device(agmm_world *w, int device, agmm_gpu_join_info *info, char *text,
                                       size_t text_len, agmm_error *err)
{
    agmm_status st = open_devices(w, w->kind, err);
    if (st != AGMM_SUCCESS)
        return st;
    if (device >= w->gpu->ndev)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "rank %d: device=%d, but this process sees %d GPU%s (CUDA_VISIBLE_DEVICES=%s)", w->first_rank,
                         device, w->gpu->ndev, w->gpu->ndev == 1 ? "" : "s",
                         getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
    AGMM_CUDA_TRY(st, err, cudaSetDevice(device));
    AGMM_CUDA_TRY(st, err, cudaFree(NULL)); /* the device's context, before the driver's VMM calls */
    AGMM_CUDA_TRY(st, err, cudaDeviceGetPCIBusId(info->bus_id, (int)sizeof info->bus_id, device));
    struct cudaDeviceProp prop;
    AGMM_CUDA_TRY(st, err, cudaGetDeviceProperties(&prop, device));
    snprintf(text, text_len, "device: %s (sm_%d%d, %d SMs), GPU %d (%s)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount, device, info->bus_id);
    if (w->kind == AGMM_WORLD_EMULATED)
        info->vmm_fd_ok = probe_vmm(device, info->vmm_why, sizeof info->vmm_why) == 0;
fail:
    return st;
}

void agmm_world_gpu_peer_probe(const agmm_world *w, const agmm_gpu_join_info *all, char *why, size_t why_len)
{
    const int me = w->first_rank, mine = w->device_of[0];
    for (int r = 0; r < w->nranks && !why[0]; r++) {
        if (r == me)
            continue;
        int d = -1, can = 0;
        if (cudaDeviceGetByPCIBusId(&d, all[r].bus_id) != cudaSuccess) {
            cudaGetLastError();
            snprintf(why, why_len,
                     "rank %d's GPU %s is not visible to rank %d (the processes see different GPUs: "
                     "CUDA_VISIBLE_DEVICES), so they cannot map each other's memory",
                     r, all[r].bus_id, me);
        } else if (cudaDeviceCanAccessPeer(&can, mine, d) != cudaSuccess || !can) {
            cudaGetLastError();
            snprintf(why, why_len, "rank %d's GPU %s cannot access rank %d's GPU %s (no CUDA peer access)", me,
                     all[me].bus_id, r, all[r].bus_id);
        }
    }
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
    AGMM_CUDA_TRY(st, &ctx->err, cudaEventCreateWithFlags(&g->last_replay, cudaEventDisableTiming));
    AGMM_LT_TRY(st, &ctx->err, cublasLtCreate(&g->lt));
    AGMM_CUDA_TRY(st, &ctx->err, cudaHostAlloc((void **)&g->err_host, sizeof *g->err_host, cudaHostAllocMapped));
    memset(g->err_host, 0, sizeof *g->err_host);
    AGMM_CUDA_TRY(st, &ctx->err, cudaHostGetDevicePointer((void **)&g->err_dev, g->err_host, 0));
    g->timeout_ns = (uint64_t)(w->timeout_s * 1e9);
    AGMM_CUDA_TRY(st, &ctx->err,
                  cudaDeviceGetAttribute(&g->num_sms, cudaDevAttrMultiProcessorCount, ctx->info.device));
    load_stream_memops(g);
    AGMM_TRY(st, enable_peers(ctx));
    if (ctx->info.processes && ctx->info.kind == AGMM_WORLD_EMULATED && (ctx->info.caps & AGMM_CAP_PEER_MEMORY)) {
        /* Symmetric memory passes between these processes as CUDA VMM handles (symm_vmm.c). */
        char why[160];
        if (agmm_gpu_vmm_load(&g->vmm, why, sizeof why) != 0) {
            st = AGMM_FAIL(&ctx->err, AGMM_ERR_CUDA, "rank %d: %s", ctx->info.rank, why);
            goto fail;
        }
        if (g->vmm.device_get(&g->cu_device, ctx->info.device) != CUDA_SUCCESS) {
            st = AGMM_FAIL(&ctx->err, AGMM_ERR_CUDA, "rank %d: cuDeviceGet(%d) failed", ctx->info.rank,
                           ctx->info.device);
            goto fail;
        }
    }
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
    if (g->last_replay)
        cudaEventDestroy(g->last_replay);
    if (g->copy_stream)
        cudaStreamDestroy(g->copy_stream);
    if (g->measure_stream) {
        cudaStreamSynchronize(g->measure_stream);
        cudaStreamDestroy(g->measure_stream);
    }
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
    case AGMM_WAIT_SLOT: return "a reduce-scatter GEMM's wait for its owner to free a slot";
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
        AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                  "rank %d: timed out after %.3g s waiting for chunk %d of the gathered A (rank %d's rows; epoch %u, "
                  "flag read %u): its copy never landed",
                  (int)e->rank, ctx->info.timeout_s, (int)e->chunk, (int)e->peer, (unsigned)e->epoch,
                  (unsigned)e->seen);
    else if (e->wait == AGMM_WAIT_TILE)
        AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                  "rank %d: timed out after %.3g s waiting for rank %d's partial of tile %d of the reduce-scatter "
                  "(flag read %u, wants %u): rank %d never stored it",
                  (int)e->rank, ctx->info.timeout_s, (int)e->peer, (int)e->chunk, (unsigned)e->seen,
                  (unsigned)e->epoch, (int)e->peer);
    else
        AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                  "rank %d: timed out after %.3g s in %s waiting for rank %d (epoch %u, last saw %u): the peer never "
                  "arrived",
                  (int)e->rank, ctx->info.timeout_s, wait_name(e->wait), (int)e->peer, (unsigned)e->epoch,
                  (unsigned)e->seen);
    /* A peer process that died is named as dead, not only as late. */
    agmm_world_note_gone(ctx);
    return AGMM_ERR_TIMEOUT;
}

/* Waits for the rank's work: the whole device where the rank has it alone, else only its own runs
 * and copies (peers on the device may hold barriers waiting for our next call). Waits for all of
 * them and returns the first error. */
static cudaError_t wait_own_work(const agmm_ctx *ctx)
{
    const agmm_gpu_rank *g = ctx->gpu;
    if (ctx->info.ranks_on_device == 1)
        return cudaDeviceSynchronize();
    cudaError_t first = cudaSuccess, e;
    cudaEvent_t ev[2];
    for (int i = 0, n = agmm_gpu_run_events(g, ev); i < n; i++)
        if ((e = cudaEventSynchronize(ev[i])) != cudaSuccess && first == cudaSuccess)
            first = e;
    if ((e = cudaStreamSynchronize(g->copy_stream)) != cudaSuccess && first == cudaSuccess)
        first = e;
    return first;
}

agmm_status agmm_gpu_rank_sync(agmm_ctx *ctx)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_gpu_rank *g = ctx->gpu;
    AGMM_CUDA_TRY(st, &ctx->err, cudaSetDevice(ctx->info.device));
    /* Only NCCL can keep the rank's work waiting without a bound: poll that part first. */
    if (g->nccl_comm != NULL)
        AGMM_TRY(st, agmm_nccl_wait_work(ctx));
    AGMM_CUDA_TRY(st, &ctx->err, wait_own_work(ctx));
    AGMM_CUDA_TRY(st, &ctx->err, cudaGetLastError());
    st = agmm_gpu_check_dev_error(ctx);
fail:
    return st;
}

agmm_status agmm_gpu_measure_stream(agmm_ctx *ctx, cudaStream_t *out)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_gpu_rank *g = ctx->gpu;
    if (g->measure_stream == NULL)
        AGMM_CUDA_TRY(st, &ctx->err, cudaStreamCreateWithFlags(&g->measure_stream, cudaStreamNonBlocking));
    *out = g->measure_stream;
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

/* A captured run's mark: a node of the graph that records last_replay (an external record: a plain
 * record in a capture only joins streams, and leaves the event unusable outside the graph). The
 * node hangs off the run's last work and off the capture's previous mark, and nothing else of the
 * graph depends on it: the work captured after the run stays ordered by the run's own nodes, and
 * the marks record in capture order, the last run's last. Recorded into the stream instead, the
 * mark was the only link between a run and the next (an input staged for the next step, say), and
 * that link did not hold: graphs of 5 steps with staged inputs let a rank overwrite its shard
 * with a later step's while peers still read it, or stalled (H100, 4 ranks sharing the GPU: 20 of
 * 240 jobs of 4 replays, docs/results twenty-first session; none of 240 since). */
static agmm_status mark_replay(agmm_ctx *ctx, cudaStream_t stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_gpu_rank *g = ctx->gpu;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaGraph_t graph = NULL;
    const cudaGraphNode_t *deps = NULL;
    const cudaGraphEdgeData *edges = NULL; /* asked for only so the query is not lossy: the mark's
                                              edges are plain ones, which wait for everything */
    size_t n = 0;
    cudaGraphNode_t mark = NULL;
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamGetCaptureInfo(stream, &cap, &id, &graph, &deps, &edges, &n));
    AGMM_CUDA_TRY(st, &ctx->err, cudaGraphAddEventRecordNode(&mark, graph, deps, n, g->last_replay));
    if (g->mark_capture == id && g->mark_node != NULL)
        AGMM_CUDA_TRY(st, &ctx->err, cudaGraphAddDependencies(graph, &g->mark_node, &mark, NULL, 1));
    g->mark_capture = id;
    g->mark_node = mark;
fail:
    return st;
}

agmm_status agmm_gpu_note_run(agmm_ctx *ctx, cudaStream_t stream)
{
    agmm_status st = AGMM_SUCCESS;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamIsCapturing(stream, &cap));
    agmm_gpu_rank *g = ctx->gpu;
    if (cap == cudaStreamCaptureStatusNone) {
        AGMM_CUDA_TRY(st, &ctx->err, cudaEventRecord(g->last_run, stream));
        g->last_run_recorded = 1;
        g->last_run_stream = stream;
    } else {
        AGMM_TRY(st, mark_replay(ctx, stream));
        g->captured = 1;
    }
fail:
    return st;
}

agmm_status agmm_gpu_order_run(agmm_ctx *ctx, cudaStream_t stream)
{
    agmm_status st = AGMM_SUCCESS;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamIsCapturing(stream, &cap));
    const agmm_gpu_rank *g = ctx->gpu;
    if (cap != cudaStreamCaptureStatusNone)
        return st;
    if (g->last_run_recorded && stream != g->last_run_stream)
        AGMM_CUDA_TRY(st, &ctx->err, cudaStreamWaitEvent(stream, g->last_run, 0));
    if (g->captured) {
        /* A replay launched before this call (in host order) is the event's latest record: the
         * query reports it pending until it has run, and then the wait is not needed. */
        cudaError_t q = cudaEventQuery(g->last_replay);
        if (q == cudaErrorNotReady)
            AGMM_CUDA_TRY(st, &ctx->err, cudaStreamWaitEvent(stream, g->last_replay, 0));
        else
            AGMM_CUDA_TRY(st, &ctx->err, q);
    }
fail:
    return st;
}

int agmm_gpu_run_events(const agmm_gpu_rank *g, cudaEvent_t ev[2])
{
    int n = 0;
    if (g->last_run_recorded)
        ev[n++] = g->last_run;
    if (g->captured)
        ev[n++] = g->last_replay;
    return n;
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
    if (g->nccl_comm != NULL) {
        /* Bounded either way; the rank's record keeps what it said before. */
        agmm_error kept = ctx->err;
        agmm_nccl_wait_work(ctx);
        ctx->err = kept;
    }
    (void)wait_own_work(ctx);
    cudaGetLastError();
}
#endif /* AGMM_HAVE_CUDA */
