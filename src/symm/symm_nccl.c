/* Symmetric memory on NCCL 2.28 windows (production path; nccl_device.md §1-2):
 * ncclMemAlloc (cuMem memory, which windows require) -> ncclCommWindowRegister over the whole
 * allocation (offset 0, so the 4096-byte alignment rule holds) -> one kernel resolving every
 * rank's address with ncclGetLsaPointer into the device table -> a copy of it on the host.
 *
 * The table holds NCCL's flat-VA alias for peers, but this rank's own entry is the ordinary
 * pointer ncclMemAlloc returned, so a kernel touches its own buffer through one address only.
 * Registration is collective and ends in a world barrier inside NCCL; in one process each rank
 * thread registers its own communicator, concurrently, which is what that barrier needs. */
#include <stdlib.h>

#include "symm_impl.h"
#include "symm_lsa.h"
#include "../world/ctx_gpu.h"
#include "../world/gpu_check.h"

typedef struct {
    ncclWindow_t win;
} nccl_buf;

int agmm_symm_uses_nccl(const agmm_ctx *ctx)
{
    return ctx->nccl_comm != NULL && ctx->gpu != NULL && ctx->gpu->symm_nccl;
}

agmm_status agmm_symm_nccl_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    agmm_status st = AGMM_SUCCESS;
    ncclComm_t comm = (ncclComm_t)ctx->nccl_comm;
    cudaStream_t s = ctx->gpu->copy_stream;
    int nranks = ctx->world->nranks;
    size_t bytes = (buf->bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT *
                   NCCL_WIN_REQUIRED_ALIGNMENT;
    void *mem = NULL;
    void **d_peer = NULL;
    nccl_buf *nb = calloc(1, sizeof *nb);
    if (nb == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: window record allocation failed", ctx->rank);

    AGMM_NCCL_TRY(st, &ctx->err, comm, ncclMemAlloc(&mem, bytes));
    /* Zeroed before registration: NCCL's closing barrier then orders it before any peer access. */
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemsetAsync(mem, 0, bytes, s));
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamSynchronize(s));
    /* COLL_SYMMETRIC lets NCCL's own collectives use their symmetric kernels on these buffers. It
     * would also build a multicast team if NVLS were on, which agmm_world_create keeps off unless
     * the user opted in (nccl_device.md §1.6). */
    AGMM_NCCL_TRY(st, &ctx->err, comm, ncclCommWindowRegister(comm, mem, bytes, &nb->win, NCCL_WIN_COLL_SYMMETRIC));
    if (nb->win == NULL) {
        /* NCCL returns success without a window when the communicator has no symmetric support. */
        st = AGMM_FAIL(&ctx->err, AGMM_ERR_NCCL, "rank %d: ncclCommWindowRegister(%zu bytes) returned no window",
                       ctx->rank, bytes);
        goto fail;
    }
    AGMM_CUDA_TRY(st, &ctx->err, cudaMalloc((void **)&d_peer, (size_t)nranks * sizeof *d_peer));
    AGMM_CUDA_TRY(st, &ctx->err, agmm_lsa_resolve_peers(nb->win, d_peer, nranks, s));
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(buf->peer, d_peer, (size_t)nranks * sizeof *d_peer,
                                                 cudaMemcpyDeviceToHost, s));
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamSynchronize(s));
    buf->peer[ctx->rank] = mem;
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(d_peer + ctx->rank, &buf->peer[ctx->rank], sizeof *d_peer,
                                                 cudaMemcpyHostToDevice, s));
    AGMM_CUDA_TRY(st, &ctx->err, cudaStreamSynchronize(s));
    buf->local = mem;
    buf->d_peer = d_peer;
    buf->impl = nb;
    return AGMM_SUCCESS;
fail:
    if (nb->win)
        ncclCommWindowDeregister(comm, nb->win);
    if (mem)
        ncclMemFree(mem);
    cudaFree(d_peer);
    free(nb);
    return st;
}

void agmm_symm_nccl_free(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    nccl_buf *nb = buf->impl;
    /* Deregistering unmaps this rank's view of every peer's buffer, and ncclMemFree its own, and
     * neither waits for work in flight: first this rank's own kernels and copies finish, then all
     * ranks meet (so no peer still reads ours), then we unmap. A timeout here only means a peer
     * is gone. Peers' mappings keep the pages alive until they deregister too. */
    agmm_ctx_gpu_quiesce(ctx);
    agmm_world_barrier(ctx);
    if (nb && nb->win)
        ncclCommWindowDeregister((ncclComm_t)ctx->nccl_comm, nb->win);
    if (buf->local)
        ncclMemFree(buf->local);
    cudaFree(buf->d_peer);
    cudaGetLastError();
    free(nb);
}
