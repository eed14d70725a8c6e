/* Symmetric memory on NCCL 2.28 windows (the production path on GPUs):
 * ncclMemAlloc (cuMem memory, which windows require) -> ncclCommWindowRegister over the whole
 * allocation (offset 0, so the 4096-byte alignment rule holds) -> one kernel resolving every
 * rank's address with ncclGetLsaPointer into the device table -> a copy of it on the host.
 *
 * The table holds NCCL's flat-VA alias for peers, but this rank's own entry is the ordinary
 * pointer ncclMemAlloc returned, so a kernel touches its own buffer through one address only.
 * Registration is collective and ends in a world barrier inside NCCL; in one process each rank
 * thread registers its own communicator, concurrently, which is what that barrier needs.
 *
 * Which implementation a GPU rank uses is decided here too (agmm_symm_gpu_choose): windows when
 * every rank has a communicator and got a device communicator, else in-process memory. */
#ifdef AGMM_HAVE_CUDA
#include <stdlib.h>

#include "symm_impl.h"
#include "symm_lsa.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

typedef struct {
    ncclWindow_t win;
} nccl_buf;

/* The device communicator (collective), and whether every rank got one: symmetric memory lives in
 * NCCL windows only if all did, else every rank uses the in-process implementation. */
agmm_status agmm_symm_gpu_choose(agmm_ctx *ctx, agmm_symm_state *state)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    state->kind = AGMM_SYMM_LOCAL_GPU;
    if (!(ri->caps & AGMM_CAP_NCCL))
        return AGMM_SUCCESS;
    char why[AGMM_ERROR_LEN] = "";
    int ok = agmm_lsa_devcomm_create(g->nccl_comm, &state->nccl_dev, why, sizeof why) == ncclSuccess;
    int all[AGMM_MAX_RANKS];
    agmm_status st = agmm_host_exchange(ctx, &ok, sizeof ok, all);
    if (st != AGMM_SUCCESS)
        return st;
    int every = 1;
    for (int r = 0; r < ri->nranks; r++)
        every &= all[r];
    if (every)
        state->kind = AGMM_SYMM_NCCL;
    if (!ok)
        agmm_log(ri->log_level, AGMM_LOG_WARN, ri->rank,
                 "NCCL windows unavailable, symmetric memory falls back to in-process buffers: %s", why);
    return AGMM_SUCCESS;
}

void agmm_symm_gpu_release(agmm_ctx *ctx, agmm_symm_state *state)
{
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    if (g != NULL && state->nccl_dev != NULL) {
        cudaSetDevice(agmm_ctx_info(ctx)->device);
        agmm_lsa_devcomm_destroy(g->nccl_comm, state->nccl_dev);
    }
    state->nccl_dev = NULL;
}

agmm_status agmm_symm_nccl_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    agmm_error *err = agmm_ctx_err(ctx);
    ncclComm_t comm = agmm_ctx_gpu(ctx)->nccl_comm;
    cudaStream_t s = agmm_ctx_gpu(ctx)->copy_stream;
    int nranks = ri->nranks;
    size_t bytes = (buf->bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT *
                   NCCL_WIN_REQUIRED_ALIGNMENT;
    void *mem = NULL;
    void **d_peer = NULL;
    nccl_buf *nb = calloc(1, sizeof *nb);
    if (nb == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: window record allocation failed", ri->rank);

    AGMM_NCCL_TRY(st, err, comm, ncclMemAlloc(&mem, bytes));
    /* Zeroed before registration: NCCL's closing barrier then orders it before any peer access. */
    AGMM_CUDA_TRY(st, err, cudaMemsetAsync(mem, 0, bytes, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
    /* COLL_SYMMETRIC lets NCCL's own collectives use their symmetric kernels on these buffers. It
     * would also build a multicast team if NVLS were on, which agmm_world_create keeps off unless
     * the user opted in. */
    AGMM_NCCL_TRY(st, err, comm, ncclCommWindowRegister(comm, mem, bytes, &nb->win, NCCL_WIN_COLL_SYMMETRIC));
    if (nb->win == NULL) {
        /* NCCL returns success without a window when the communicator has no symmetric support. */
        st = AGMM_FAIL(err, AGMM_ERR_NCCL, "rank %d: ncclCommWindowRegister(%zu bytes) returned no window",
                       ri->rank, bytes);
        goto fail;
    }
    AGMM_CUDA_TRY(st, err, cudaMalloc((void **)&d_peer, (size_t)nranks * sizeof *d_peer));
    AGMM_CUDA_TRY(st, err, agmm_lsa_resolve_peers(nb->win, d_peer, nranks, s));
    AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(buf->peer, d_peer, (size_t)nranks * sizeof *d_peer,
                                                 cudaMemcpyDeviceToHost, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
    buf->peer[ri->rank] = mem;
    AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(d_peer + ri->rank, &buf->peer[ri->rank], sizeof *d_peer,
                                                 cudaMemcpyHostToDevice, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
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
    ncclComm_t comm = agmm_ctx_gpu(ctx)->nccl_comm;
    /* Deregistering unmaps this rank's view of every peer's buffer, and ncclMemFree its own, and
     * neither waits for work in flight: first this rank's own kernels and copies finish, then all
     * ranks meet (so no peer still reads ours), then we unmap. A timeout here only means a peer
     * is gone. Peers' mappings keep the pages alive until they deregister too. */
    agmm_gpu_quiesce(ctx);
    agmm_host_barrier(ctx);
    if (nb && nb->win)
        ncclCommWindowDeregister(comm, nb->win);
    if (buf->local)
        ncclMemFree(buf->local);
    cudaFree(buf->d_peer);
    cudaGetLastError();
    free(nb);
}
#endif /* AGMM_HAVE_CUDA */
