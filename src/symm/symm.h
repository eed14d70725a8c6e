/* The symmetric heap: a buffer of the same size on every rank, and a table of every rank's
 * address of it as this rank sees it, plus the signal pad and the cross-rank barriers built on it
 * (internal). Kernels and copies get only the tables, never which implementation made them:
 *   host memory       the CPU world's threads: aligned_alloc, pointers exchanged (symm_share.c)
 *   shared memfd      the CPU world's processes: a memfd per rank, mapped by every rank
 *                     (symm_memfd.c)
 *   NCCL windows      NCCL 2.28: ncclMemAlloc + ncclCommWindowRegister, peer pointers resolved
 *                     once (symm_nccl.c, symm_lsa.cu); the production path on GPUs
 *   in-process GPU    ranks of one process without windows (emulated ranks sharing a GPU, or a
 *                     fallback): cudaMalloc, pointers exchanged directly (symm_local_gpu.c)
 *   CUDA VMM          emulated ranks that are processes: cuMemCreate with POSIX fd handles, passed
 *                     to every peer and mapped there (symm_vmm.c)
 *   private GPU       worlds without peer memory (ranks on several nodes, P2P off): this rank's
 *                     buffer only; only backends that need no peer memory run (symm_local_gpu.c)
 * Which one serves a rank is decided once, when the API layer attaches the heap to a new context;
 * every rank of a world uses the same. Memory is never freed while a peer may touch it
 * (symm_impl.h, "Ownership"). */
#ifndef AGMM_SYMM_SYMM_H
#define AGMM_SYMM_SYMM_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"

typedef struct agmm_symm_buf {
    void *local;                   /* this rank's buffer (peer[rank]) */
    void *peer[AGMM_MAX_RANKS];    /* every rank's buffer, addressable from this rank */
    void **d_peer;                 /* the same table in device memory; NULL in the CPU world */
    size_t bytes;
    uint64_t serial;               /* the rank's symmetric allocations so far, this one included:
                                      allocations are collective and agreed, so one allocation has
                                      the same serial on every rank (the run check compares them) */
    void *impl;                    /* implementation's own state */
} agmm_symm_buf;

/* Gives a new context its symmetric heap: picks the implementation (all ranks agree), and
 * allocates the rank's signal pad. Collective. agmm_symm_detach undoes it (collective, NULL-safe
 * state), after every buffer of the rank has been freed. */
agmm_status agmm_symm_attach(agmm_ctx *ctx);
void agmm_symm_detach(agmm_ctx *ctx);

/* Collective and agreed: it succeeds on every rank or fails on every rank, with the same error.
 * bytes >= 1. Memory is zeroed and 256-byte aligned (64 in the CPU world). Device memory on
 * GPUs, host memory in the CPU world. */
agmm_status agmm_symm_alloc(agmm_ctx *ctx, size_t bytes, agmm_symm_buf **buf);
/* Every rank frees each of its buffers (in the same order: GPU implementations meet their
 * peers first). NULL-safe. Waits for this rank's own work that may touch the buffer, then lets
 * go of this rank's part; memory a peer may still touch stays until that peer frees it too, so
 * a free never depends on a meeting that may time out. */
void agmm_symm_free(agmm_ctx *ctx, agmm_symm_buf *buf);

/* The caller's buffers (agmm_symmetric_alloc): the heap keeps a list of them, so that a run can
 * find the buffer a pointer belongs to, and frees those left at detach (in allocation order, the
 * same on every rank). alloc and free are collective; find is local. */
agmm_status agmm_symm_user_alloc(agmm_ctx *ctx, size_t bytes, agmm_symm_buf **buf);
/* The caller's buffer holding all of [ptr, ptr + bytes), or NULL. */
const agmm_symm_buf *agmm_symm_user_find(const agmm_ctx *ctx, const void *ptr, size_t bytes);
/* buf's place among the caller's live buffers in allocation order (1: the oldest; the same on every
 * rank, as allocation and free are collective), or 0 if buf is not one of them. */
int agmm_symm_user_index(const agmm_ctx *ctx, const agmm_symm_buf *buf);
/* Frees the caller's buffer that starts at ptr; AGMM_ERR_INVALID_ARG (before any collective step)
 * if no buffer starts there. */
agmm_status agmm_symm_user_free(agmm_ctx *ctx, void *ptr);

/* "NCCL windows", "in-process GPU memory" or "host memory": for logs and banners. */
const char *agmm_symm_kind(const agmm_ctx *ctx);

/* ---- barriers on the signal pad (barrier.c, barrier_gpu.c) ----
 * Pad layout: slot p of rank r's pad (uint32, p < AGMM_MAX_RANKS) is written only by rank p, with
 * the number of barriers p has entered (its barrier epoch, equal on all ranks because the calls are
 * collective). A barrier is passed when every slot of my pad has reached my epoch. On GPUs my own
 * slot of my own pad is where my barrier kernels count (on the device: graphs replay them). */

/* The CPU world's barrier, on the calling thread. Collective. Writes this rank's epoch (release)
 * into every pad, then waits (acquire, bounded by the world's timeout) for every slot of its own:
 * every write a rank made before the barrier is visible to every rank after it. On timeout
 * returns AGMM_ERR_TIMEOUT naming the ranks that never arrived and `what` ("ag_matmul/ce opening
 * barrier"); the ranks are then out of step. */
agmm_status agmm_symm_barrier_host(agmm_ctx *ctx, const char *what);

/* The GPU barrier, enqueued on `stream` (a cudaStream_t). Collective, in the same order on every
 * rank. On the device it returns once every rank has reached its matching barrier, and every
 * write enqueued before it on each rank's stream is visible to the others. Bounded: a missing peer
 * is recorded in the rank's device error record (AGMM_ERR_TIMEOUT at the next sync or run). A
 * no-op with one rank. */
agmm_status agmm_symm_barrier_stream(agmm_ctx *ctx, void *stream);

#endif
