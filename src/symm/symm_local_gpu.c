/* Symmetric memory for ranks of one process without NCCL windows (emulated ranks sharing GPUs,
 * or a fallback where windows are unavailable): one cudaMalloc per rank, the pointers exchanged
 * through the world's host rendezvous. Ranks on one device address each other's buffers
 * directly; ranks on different devices rely on the peer access agmm_gpu_rank_create enabled. */
#ifdef AGMM_HAVE_CUDA
#include <stdlib.h>

#include "symm_impl.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

agmm_status agmm_symm_local_gpu_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_error *err = agmm_ctx_err(ctx);
    cudaStream_t s = agmm_ctx_gpu(ctx)->copy_stream;
    int nranks = agmm_ctx_info(ctx)->nranks;
    size_t bytes = (buf->bytes + 255) / 256 * 256;
    void *mem = NULL;
    void **d_peer = NULL;
    AGMM_CUDA_TRY(st, err, cudaMalloc(&mem, bytes));
    /* Zeroed and finished before the exchange, so no peer can see the buffer before it is zero. */
    AGMM_CUDA_TRY(st, err, cudaMemsetAsync(mem, 0, bytes, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
    AGMM_TRY(st, agmm_host_exchange(ctx, &mem, sizeof mem, buf->peer));
    AGMM_CUDA_TRY(st, err, cudaMalloc((void **)&d_peer, (size_t)nranks * sizeof *d_peer));
    /* On the copy stream, not with cudaMemcpy: the legacy stream would wait for peers' kernels. */
    AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(d_peer, buf->peer, (size_t)nranks * sizeof *d_peer,
                                                 cudaMemcpyHostToDevice, s));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
    buf->local = mem;
    buf->d_peer = d_peer;
    return AGMM_SUCCESS;
fail:
    cudaFree(d_peer);
    cudaFree(mem);
    return st;
}

void agmm_symm_local_gpu_free(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    /* Our own kernels and copies may still read peers' buffers, and peers' ours: each rank first
     * waits for its own work, then all meet, and only then does anyone free. (cudaFree's implicit
     * sync covers one device only; ranks on other GPUs may still read this one.) */
    agmm_gpu_quiesce(ctx);
    agmm_host_barrier(ctx);
    cudaFree(buf->d_peer);
    cudaFree(buf->local);
    cudaGetLastError();
}
#endif /* AGMM_HAVE_CUDA */
