/* The implementations behind symm.h and the per-rank state they share (internal to src/symm). */
#ifndef AGMM_SYMM_IMPL_H
#define AGMM_SYMM_IMPL_H

#include "symm.h"
#include "../world/world.h"

typedef enum { AGMM_SYMM_HOST = 0, AGMM_SYMM_NCCL, AGMM_SYMM_LOCAL_GPU } agmm_symm_kind_id;

/* A rank's symmetric heap (the world's per-context slot points here). */
typedef struct {
    agmm_symm_kind_id kind;
    void *nccl_dev;            /* ncclDevComm * (symm_lsa.cu) where kind == AGMM_SYMM_NCCL */
    agmm_symm_buf *pad;        /* the signal pad: AGMM_MAX_RANKS uint32 slots per rank */
    uint32_t barrier_epoch;    /* host barriers this rank has entered (GPU barriers count on the device) */
    agmm_symm_buf **user;      /* the caller's buffers, in allocation order */
    int nuser, user_cap;
} agmm_symm_state;

static inline agmm_symm_state *agmm_symm_state_of(const agmm_ctx *ctx)
{
    return (agmm_symm_state *)agmm_ctx_symm_state(ctx);
}

/* GPU implementations (stubs returning AGMM_ERR_UNSUPPORTED in a build without CUDA). */
/* Decides between NCCL windows and in-process memory for a GPU rank (collective) and sets
 * state->kind; creates the device communicator where windows are used. */
agmm_status agmm_symm_gpu_choose(agmm_ctx *ctx, agmm_symm_state *state);
void agmm_symm_gpu_release(agmm_ctx *ctx, agmm_symm_state *state);
agmm_status agmm_symm_local_gpu_alloc(agmm_ctx *ctx, agmm_symm_buf *buf);
void agmm_symm_local_gpu_free(agmm_ctx *ctx, agmm_symm_buf *buf);
agmm_status agmm_symm_nccl_alloc(agmm_ctx *ctx, agmm_symm_buf *buf);
void agmm_symm_nccl_free(agmm_ctx *ctx, agmm_symm_buf *buf);

#endif
