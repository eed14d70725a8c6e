/* GPU symmetric memory without NCCL windows, two ways:
 *   in-process    ranks that are threads of one process (emulated ranks sharing a GPU, or a
 *                 fallback where windows are unavailable): one cudaMalloc per rank, shared with
 *                 the other threads (symm_share.c: the last rank out frees it). Ranks on one device
 *                 address each other's buffers directly; ranks on different devices rely on the
 *                 peer access agmm_gpu_rank_create enabled.
 *   private       worlds without peer memory (ranks on several nodes, NCCL_P2P_DISABLE): this
 *                 rank's buffer only; the backends that run there (nccl) touch nothing else. */
#ifdef AGMM_HAVE_CUDA
#include <stdlib.h>

#include "symm_impl.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

/* This rank's zeroed buffer, finished before anyone can see it. */
static agmm_status make_buffer(agmm_ctx *ctx, size_t bytes, void **mem)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_error *err = agmm_ctx_err(ctx);
    cudaStream_t s = agmm_ctx_gpu(ctx)->copy_stream;
    *mem = NULL;
    AGMM_CUDA_TRY(st, err, cudaMalloc(mem, bytes));
    AGMM_CUDA_TRY(st, err, cudaMemsetAsync(*mem, 0, bytes, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
    return AGMM_SUCCESS;
fail:
    cudaFree(*mem);
    *mem = NULL;
    return st;
}

/* buf->peer into a new device table (buf->d_peer). */
static agmm_status make_table(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_error *err = agmm_ctx_err(ctx);
    cudaStream_t s = agmm_ctx_gpu(ctx)->copy_stream;
    size_t bytes = (size_t)agmm_ctx_info(ctx)->nranks * sizeof *buf->d_peer;
    AGMM_CUDA_TRY(st, err, cudaMalloc((void **)&buf->d_peer, bytes));
    /* On the copy stream, not with cudaMemcpy: the legacy stream would wait for peers' kernels. */
    AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(buf->d_peer, buf->peer, bytes, cudaMemcpyHostToDevice, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
fail:
    return st;
}

/* Frees a rank's buffer when the last rank that may touch it lets go, from whichever rank's
 * thread that is. */
static void release_device_buffer(void *mem, int device)
{
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(device);
    cudaFree(mem);
    cudaSetDevice(current);
    cudaGetLastError();
}

static agmm_status local_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    void *mem = NULL;
    agmm_status mine = make_buffer(ctx, (buf->bytes + 255) / 256 * 256, &mem);
    agmm_status st = agmm_symm_share(ctx, buf, mem, mine, release_device_buffer, agmm_ctx_info(ctx)->device);
    if (st != AGMM_SUCCESS)
        return st;
    st = agmm_host_agree(ctx, make_table(ctx, buf));
    if (st != AGMM_SUCCESS) {
        cudaFree(buf->d_peer);
        buf->d_peer = NULL;
        agmm_symm_unshare(buf);
    }
    return st;
}

static void local_free(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    /* This rank's own kernels and copies may still read peers' buffers: they finish first. The
     * meeting keeps cudaFree's device-wide sync away from a peer's run that waits for this rank
     * where ranks share a device (rank_gpu.h); it is for that, not for safety: the buffers stay
     * until the last rank lets go of them. */
    agmm_error kept = *agmm_ctx_err(ctx);
    agmm_gpu_quiesce(ctx);
    agmm_host_barrier(ctx);
    *agmm_ctx_err(ctx) = kept;
    cudaFree(buf->d_peer);
    buf->d_peer = NULL;
    cudaGetLastError();
    agmm_symm_unshare(buf);
}

const agmm_symm_impl agmm_symm_local_gpu = {"in-process GPU memory", local_alloc, local_free};

static agmm_status private_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    void *mem = NULL;
    agmm_status mine = make_buffer(ctx, (buf->bytes + 255) / 256 * 256, &mem);
    buf->peer[agmm_ctx_info(ctx)->rank] = mem;
    if (mine == AGMM_SUCCESS)
        mine = make_table(ctx, buf);
    agmm_status st = agmm_host_agree(ctx, mine);
    if (st != AGMM_SUCCESS) {
        cudaFree(buf->d_peer);
        cudaFree(mem);
        buf->d_peer = NULL;
        buf->peer[agmm_ctx_info(ctx)->rank] = NULL;
        return st;
    }
    buf->local = mem;
    return AGMM_SUCCESS;
}

static void private_free(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    agmm_gpu_quiesce(ctx);
    cudaFree(buf->d_peer);
    cudaFree(buf->local);
    cudaGetLastError();
}

const agmm_symm_impl agmm_symm_private_gpu = {"this rank's GPU memory only (no peer memory)", private_alloc,
                                              private_free};
#endif /* AGMM_HAVE_CUDA */
