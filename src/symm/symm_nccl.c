/* Symmetric memory on NCCL 2.28 windows (the production path on GPUs):
 * ncclMemAlloc (cuMem memory, which windows require) -> ncclCommWindowRegister over the whole
 * allocation (offset 0, so the 4096-byte alignment rule holds) -> one kernel resolving every
 * rank's address with ncclGetLsaPointer into the device table -> a copy of it on the host.
 *
 * The table holds NCCL's flat-VA alias for peers, but this rank's own entry is the ordinary
 * pointer ncclMemAlloc returned, so a kernel touches its own buffer through one address only.
 * Registration is collective and ends in a world barrier inside NCCL; in one process each rank
 * thread registers its own communicator, concurrently, which is what that barrier needs. Every
 * rank agrees that its own part succeeded before anyone enters it, and again after, so that a
 * failure on one rank never leaves the others inside NCCL. NCCL maps peers' memory itself, so a
 * rank's free never pulls memory from under a peer: the pages stay until every mapping is gone.
 *
 * Which implementation a GPU rank uses is decided here too (agmm_symm_gpu_choose). */
#ifdef AGMM_HAVE_CUDA
#include <stdlib.h>

#include "symm_impl.h"
#include "symm_lsa.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

typedef struct {
    ncclWindow_t win;
} nccl_buf;

/* Windows where the world has NCCL and peer memory and every rank got a device communicator.
 * Without peer memory: this rank's buffer only. Without NCCL: memory shared directly (threads) or
 * through CUDA VMM handles (processes). A one-process world whose windows fail falls back to
 * direct sharing; processes have nothing to fall back to and fail, on every rank alike. */
agmm_status agmm_symm_gpu_choose(agmm_ctx *ctx, agmm_symm_state *state)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    if (!(ri->caps & AGMM_CAP_PEER_MEMORY)) {
        state->impl = &agmm_symm_private_gpu;
        return AGMM_SUCCESS;
    }
    if (!(ri->caps & AGMM_CAP_NCCL)) {
        state->impl = ri->processes ? &agmm_symm_vmm : &agmm_symm_local_gpu;
        return AGMM_SUCCESS;
    }
    char why[AGMM_ERROR_LEN] = "";
    ncclResult_t r = agmm_lsa_devcomm_create(g->nccl_comm, &state->nccl_dev, why, sizeof why);
    if (r == ncclSuccess || r == ncclInProgress) {
        agmm_status st = agmm_gpu_nccl_settle(ctx, r, "ncclDevCommCreate");
        if (st == AGMM_ERR_TIMEOUT)
            return st; /* the communicator is gone and the world unusable */
        if (st != AGMM_SUCCESS)
            snprintf(why, sizeof why, "%s", agmm_error_detail(agmm_ctx_err(ctx)->msg));
        else
            agmm_lsa_devcomm_check(state->nccl_dev, why, sizeof why);
        agmm_error_clear(agmm_ctx_err(ctx));
    }
    int ok = why[0] == '\0';
    if (!ok)
        agmm_symm_gpu_release(ctx, state);
    if (ri->processes) {
        agmm_status mine = ok ? AGMM_SUCCESS
                              : AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_UNSUPPORTED,
                                          "rank %d: NCCL windows are unavailable (%s), and the symmetric memory of "
                                          "processes lives in them (NCCL_P2P_DISABLE=1 runs the backends that need "
                                          "none)",
                                          ri->rank, why);
        agmm_status st = agmm_host_agree(ctx, mine);
        state->impl = &agmm_symm_nccl;
        return st;
    }
    int all[AGMM_MAX_RANKS];
    agmm_status st = agmm_host_exchange(ctx, &ok, sizeof ok, all);
    if (st != AGMM_SUCCESS)
        return st;
    int every = 1;
    for (int rr = 0; rr < ri->nranks; rr++)
        every &= all[rr];
    state->impl = every ? &agmm_symm_nccl : &agmm_symm_local_gpu;
    if (!ok)
        agmm_log(ri->log_level, AGMM_LOG_WARN, ri->rank,
                 "NCCL windows unavailable, symmetric memory falls back to in-process buffers: %s", why);
    return AGMM_SUCCESS;
}

void agmm_symm_gpu_release(agmm_ctx *ctx, agmm_symm_state *state)
{
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    if (g != NULL && state->nccl_dev != NULL && g->nccl_comm != NULL) {
        /* Bounded; the rank's record keeps what it said before. */
        agmm_error kept = *agmm_ctx_err(ctx);
        cudaSetDevice(agmm_ctx_info(ctx)->device);
        agmm_gpu_nccl_settle(ctx, agmm_lsa_devcomm_destroy(g->nccl_comm, state->nccl_dev), "ncclDevCommDestroy");
        *agmm_ctx_err(ctx) = kept;
    }
    /* After an abort the communicator took its device communicator with it: only ours is left. */
    agmm_lsa_devcomm_free(state->nccl_dev);
    state->nccl_dev = NULL;
}

static void release_window(agmm_ctx *ctx, agmm_symm_buf *buf, void *mem, nccl_buf *nb)
{
    ncclComm_t comm = agmm_ctx_gpu(ctx)->nccl_comm;
    if (nb != NULL && nb->win != NULL && comm != NULL &&
        agmm_gpu_nccl_settle(ctx, ncclCommWindowDeregister(comm, nb->win), "ncclCommWindowDeregister") != AGMM_SUCCESS)
        agmm_error_clear(agmm_ctx_err(ctx));
    if (mem)
        ncclMemFree(mem);
    cudaFree(buf->d_peer);
    buf->d_peer = NULL;
    cudaGetLastError();
    free(nb);
}

/* This rank's part before registration: its memory, zeroed, and room for the table. */
static agmm_status make_local(agmm_ctx *ctx, agmm_symm_buf *buf, size_t bytes, void **mem, const nccl_buf *nb)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    agmm_error *err = agmm_ctx_err(ctx);
    cudaStream_t s = agmm_ctx_gpu(ctx)->copy_stream;
    if (nb == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: window record allocation failed", ri->rank);
    if (agmm_ctx_gpu(ctx)->nccl_comm == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NCCL, "rank %d: its communicator was aborted after a timeout", ri->rank);
    AGMM_TRY(st, agmm_gpu_nccl_settle(ctx, ncclMemAlloc(mem, bytes), "ncclMemAlloc"));
    /* Zeroed before registration: NCCL's closing barrier then orders it before any peer access. */
    AGMM_CUDA_TRY(st, err, cudaMemsetAsync(*mem, 0, bytes, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
    AGMM_CUDA_TRY(st, err, cudaMalloc((void **)&buf->d_peer, (size_t)ri->nranks * sizeof *buf->d_peer));
fail:
    return st;
}

/* After registration: every rank's address of the window, in the device table and on the host. */
static agmm_status resolve_table(agmm_ctx *ctx, agmm_symm_buf *buf, void *mem, const nccl_buf *nb)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    agmm_error *err = agmm_ctx_err(ctx);
    cudaStream_t s = agmm_ctx_gpu(ctx)->copy_stream;
    const int nranks = ri->nranks;
    if (nb->win == NULL)
        /* NCCL returns success without a window when the communicator has no symmetric support. */
        return AGMM_FAIL(err, AGMM_ERR_NCCL, "rank %d: ncclCommWindowRegister returned no window", ri->rank);
    AGMM_CUDA_TRY(st, err, agmm_lsa_resolve_peers(nb->win, buf->d_peer, nranks, s));
    AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(buf->peer, buf->d_peer, (size_t)nranks * sizeof *buf->d_peer,
                                           cudaMemcpyDeviceToHost, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
    buf->peer[ri->rank] = mem;
    AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(buf->d_peer + ri->rank, &buf->peer[ri->rank], sizeof *buf->d_peer,
                                           cudaMemcpyHostToDevice, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
fail:
    return st;
}

static agmm_status nccl_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    size_t bytes = (buf->bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT *
                   NCCL_WIN_REQUIRED_ALIGNMENT;
    void *mem = NULL;
    nccl_buf *nb = calloc(1, sizeof *nb);
    /* Every rank's own part is agreed before the collective registration, and the result after. */
    agmm_status st = agmm_host_agree(ctx, make_local(ctx, buf, bytes, &mem, nb));
    if (st == AGMM_SUCCESS) {
        /* COLL_SYMMETRIC lets NCCL's own collectives use their symmetric kernels on these buffers.
         * It would also build a multicast team if NVLS were on, which the world keeps off unless
         * the user opted in. */
        ncclComm_t comm = agmm_ctx_gpu(ctx)->nccl_comm;
        st = agmm_gpu_nccl_settle(ctx, ncclCommWindowRegister(comm, mem, bytes, &nb->win, NCCL_WIN_COLL_SYMMETRIC),
                                  "ncclCommWindowRegister");
        if (st == AGMM_ERR_TIMEOUT)
            nb->win = NULL; /* the communicator is aborted, the window gone with it, the world unusable */
        else
            st = agmm_host_agree(ctx, st == AGMM_SUCCESS ? resolve_table(ctx, buf, mem, nb) : st);
    }
    if (st != AGMM_SUCCESS) {
        release_window(ctx, buf, mem, nb);
        return st;
    }
    buf->local = mem;
    buf->impl = nb;
    return AGMM_SUCCESS;
}

static void nccl_free(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    /* Deregistering unmaps this rank's view of every peer's buffer, and ncclMemFree its own, and
     * neither waits for work in flight: first this rank's own kernels and copies finish. Peers'
     * mappings keep the pages alive until they deregister too. The meeting keeps the ranks' NCCL
     * calls in one order; if it fails (a peer is gone) the world is unusable and nothing waits. */
    agmm_error kept = *agmm_ctx_err(ctx);
    agmm_gpu_quiesce(ctx);
    agmm_host_barrier(ctx);
    release_window(ctx, buf, buf->local, buf->impl);
    *agmm_ctx_err(ctx) = kept;
    buf->impl = NULL;
}

const agmm_symm_impl agmm_symm_nccl = {"NCCL windows", nccl_alloc, nccl_free};
#endif /* AGMM_HAVE_CUDA */
