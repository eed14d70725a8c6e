/* The GPU barrier on the signal pads (symm.h): one bounded kernel on the caller's stream
 * (src/kernels/signal.cu has its ordering). Its epoch is counted on the device, in the rank's own
 * slot of its own pad, so the barrier may be captured in a CUDA graph and replayed. */
#ifdef AGMM_HAVE_CUDA
#include "symm_impl.h"
#include "../kernels/signal.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

agmm_status agmm_symm_barrier_stream(agmm_ctx *ctx, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    if (ri->nranks == 1)
        return AGMM_SUCCESS;
    agmm_symm_state *state = agmm_symm_state_of(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    AGMM_CUDA_TRY(st, agmm_ctx_err(ctx),
                  agmm_launch_barrier((uint32_t *const *)state->pad->d_peer, ri->rank, ri->nranks, g->timeout_ns,
                                      g->err_dev, (cudaStream_t)stream));
fail:
    return st;
}
#endif
