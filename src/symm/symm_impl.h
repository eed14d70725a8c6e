/* The implementations behind symm.h and the per-rank state they share (internal to src/symm).
 *
 * Ownership. No rank ever frees memory a peer may still touch, whatever happened to the
 * meetings before (a timeout, a peer that never came): a rank's free only lets go of its own
 * references, and memory goes when the last reference does.
 *   - ranks that are threads of one process: every rank's buffer has a reference count of W,
 *     and each rank drops one on every buffer of the allocation when it frees (symm_share.c);
 *   - ranks that are processes: each maps every peer's memory itself (memfd, CUDA VMM, NCCL
 *     windows), and the kernel or the driver keeps it until the last mapping is gone. */
#ifndef AGMM_SYMM_IMPL_H
#define AGMM_SYMM_IMPL_H

#include "symm.h"
#include "../world/world.h"

/* One way to make symmetric memory. alloc fills buf->local, peer[] and d_peer for buf->bytes
 * (collective, agreed: it succeeds on every rank or fails on every rank); free lets go of this
 * rank's part (local; never waits for a peer to be safe). */
typedef struct {
    const char *name;          /* agmm_symm_kind's answer: "host memory", ... */
    agmm_status (*alloc)(agmm_ctx *ctx, agmm_symm_buf *buf);
    void (*free)(agmm_ctx *ctx, agmm_symm_buf *buf);
} agmm_symm_impl;

extern const agmm_symm_impl agmm_symm_host;        /* CPU, threads: aligned_alloc, shared (symm_share.c) */
extern const agmm_symm_impl agmm_symm_memfd;       /* CPU, processes: memfd mapped by every rank */
extern const agmm_symm_impl agmm_symm_local_gpu;   /* GPU, threads: cudaMalloc, shared */
extern const agmm_symm_impl agmm_symm_private_gpu; /* GPU without peer memory: this rank's buffer only */
extern const agmm_symm_impl agmm_symm_vmm;         /* GPU, processes sharing a GPU: CUDA VMM, fd handles */
extern const agmm_symm_impl agmm_symm_nccl;        /* GPU with NCCL: NCCL windows */

/* A rank's symmetric heap (the world's per-context slot points here). */
typedef struct {
    const agmm_symm_impl *impl;
    void *nccl_dev;            /* ncclDevComm * (symm_lsa.cu) where impl == &agmm_symm_nccl */
    agmm_symm_buf *pad;        /* the signal pad: AGMM_MAX_RANKS uint32 slots per rank */
    uint32_t barrier_epoch;    /* host barriers this rank has entered (GPU barriers count on the device) */
    agmm_symm_buf **user;      /* the caller's buffers, in allocation order */
    int nuser, user_cap;
    uint64_t allocs;           /* allocations made, the source of agmm_symm_buf.serial */
} agmm_symm_state;

static inline agmm_symm_state *agmm_symm_state_of(const agmm_ctx *ctx)
{
    return (agmm_symm_state *)agmm_ctx_symm_state(ctx);
}

/* GPU ranks: picks the implementation (collective, agreed) and sets state->impl; creates the
 * device communicator where NCCL windows are used (symm_nccl.c; a stub without CUDA). */
agmm_status agmm_symm_gpu_choose(agmm_ctx *ctx, agmm_symm_state *state);
void agmm_symm_gpu_release(agmm_ctx *ctx, agmm_symm_state *state);

/* ---- memory shared by the threads of one process (symm_share.c) ---- */

/* Publishes this rank's memory `mem` (NULL where its own part failed with `mine`, recorded in
 * the rank's error) and gathers every rank's, then agrees. On success buf->peer[r] is rank r's
 * memory and this rank holds a reference on each; on an agreed failure every reference is
 * dropped again. `release(mem, device)` frees a buffer when its last reference goes (device:
 * the CUDA device it lives on, -1 on the host). Collective. */
agmm_status agmm_symm_share(agmm_ctx *ctx, agmm_symm_buf *buf, void *mem, agmm_status mine,
                            void (*release)(void *mem, int device), int device);
/* Drops this rank's references (every rank's buffer of the allocation). Local. */
void agmm_symm_unshare(agmm_symm_buf *buf);

#endif
