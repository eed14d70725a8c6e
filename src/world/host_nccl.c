/* Host collectives of a GPU world whose ranks run on several hosts (agmm_world_join): nothing on
 * the hosts is shared, so the ranks meet through the world's NCCL communicator. One collective is
 * one ncclAllGather of a fixed-size slot per rank (tag, size, data) from pinned host memory
 * through device memory, on a stream of its own that first waits for the rank's runs (NCCL calls
 * on a communicator must come in one order on every rank), polled under the world's timeout
 * (nccl_comm.c). NCCL cannot tell which rank is missing, so a timeout here names none. No
 * descriptors pass between hosts: exchange_fds is NULL, and such worlds have no peer memory. */
#ifdef AGMM_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world_gpu.h"

typedef struct {
    uint32_t tag;
    uint32_t bytes;
    unsigned char data[AGMM_HOST_SLOT_BYTES];
} nccl_slot;

typedef struct {
    cudaStream_t stream;
    nccl_slot *host;           /* pinned: [0] what this rank sends, [1 + r] what rank r sent */
    nccl_slot *dev;            /* the same layout in device memory */
} nccl_host;

static agmm_status nccl_exchange(agmm_ctx *ctx, uint32_t tag, const void *mine, size_t bytes, void *all)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_world *w = ctx->world;
    nccl_host *h = w->host_state;
    ncclComm_t comm = agmm_world_gpu_comm(w);
    char what[64];
    snprintf(what, sizeof what, "host %s #%u (an ncclAllGather)", tag & 1 ? "exchange" : "barrier", tag >> 1);
    if (comm == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NCCL, "rank %d: %s: the communicator was aborted earlier",
                         ctx->info.rank, what);
    h->host[0].tag = tag;
    h->host[0].bytes = (uint32_t)bytes;
    if (bytes)
        memcpy(h->host[0].data, mine, bytes);
    AGMM_CUDA_TRY(st, &ctx->err, cudaSetDevice(w->device_of[0]));
    cudaEvent_t ev[2];
    for (int i = 0, n = ctx->gpu != NULL ? agmm_gpu_run_events(ctx->gpu, ev) : 0; i < n; i++)
        AGMM_CUDA_TRY(st, &ctx->err, cudaStreamWaitEvent(h->stream, ev[i], 0));
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(h->dev, h->host, sizeof *h->host, cudaMemcpyHostToDevice, h->stream));
    ncclResult_t r = ncclAllGather(h->dev, h->dev + 1, sizeof *h->dev, ncclChar, comm, h->stream);
    if (r != ncclSuccess && r != ncclInProgress)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NCCL, "rank %d: %s -> %s", ctx->info.rank, what, ncclGetErrorString(r));
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(h->host + 1, h->dev + 1, (size_t)w->nranks * sizeof *h->host,
                                                 cudaMemcpyDeviceToHost, h->stream));
    AGMM_TRY(st, agmm_nccl_wait_stream(w, h->stream, what, &ctx->err));
    for (int p = 0; p < w->nranks; p++) {
        const nccl_slot *s = &h->host[1 + p];
        if (s->tag != tag || s->bytes != bytes)
            return AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL,
                             "rank %d: %s met rank %d in its host %s #%u: the ranks are out of step", ctx->info.rank,
                             what, p, s->tag & 1 ? "exchange" : "barrier", s->tag >> 1);
        if (bytes)
            memcpy((unsigned char *)all + (size_t)p * bytes, s->data, bytes);
    }
fail:
    return st;
}

static agmm_status nccl_barrier(agmm_ctx *ctx, uint32_t tag) { return nccl_exchange(ctx, tag, NULL, 0, NULL); }

static void nccl_fini(agmm_world *w)
{
    nccl_host *h = w->host_state;
    if (h == NULL)
        return;
    if (h->stream)
        cudaStreamDestroy(h->stream);
    cudaFreeHost(h->host);
    cudaFree(h->dev);
    cudaGetLastError();
    free(h);
    w->host_state = NULL;
}

/* Peers on other hosts cannot be told anything but through NCCL, which a failed collective has
 * aborted: they find out by their own timeouts. Nor can they see that a rank is busy, or that its
 * process died: their waits keep the bound (agmm.h, agmm_ctx_busy_begin). */
static const agmm_host_ops nccl_ops = {nccl_exchange, nccl_barrier, NULL, NULL, NULL, NULL, nccl_fini};

agmm_status agmm_host_nccl_init(agmm_world *w, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    nccl_host *h = calloc(1, sizeof *h);
    if (h == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "host collective state allocation failed");
    w->host = &nccl_ops;
    w->host_state = h;
    size_t slots = (size_t)(1 + w->nranks) * sizeof(nccl_slot);
    AGMM_CUDA_TRY(st, err, cudaSetDevice(w->device_of[0]));
    AGMM_CUDA_TRY(st, err, cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
    AGMM_CUDA_TRY(st, err, cudaHostAlloc((void **)&h->host, slots, cudaHostAllocDefault));
    AGMM_CUDA_TRY(st, err, cudaMalloc((void **)&h->dev, slots));
fail:
    return st;
}
#endif /* AGMM_HAVE_CUDA */
