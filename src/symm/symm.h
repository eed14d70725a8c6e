/* The symmetric heap: a buffer of the same size on every rank, and a table of every rank's
 * address of it as this rank sees it. Kernels and copies get only the table, never which
 * implementation made it:
 *   symm_local.c   in-process ranks (CPU world, emulated ranks, GPU threads with P2P): plain
 *                  allocations whose pointers are exchanged directly.
 *   symm_nccl.c    NCCL 2.28 windows: ncclMemAlloc + ncclCommWindowRegister, peer pointers
 *                  resolved once (production path, and the only one across processes).
 */
#ifndef AGMM_SYMM_SYMM_H
#define AGMM_SYMM_SYMM_H

#include <stddef.h>
#include "agmm.h"

typedef struct agmm_symm_buf {
    void *local;                   /* this rank's buffer (peer[rank]) */
    void *peer[AGMM_MAX_RANKS];    /* every rank's buffer, addressable from this rank */
    void **d_peer;                 /* the same table in device memory; NULL in the CPU world */
    size_t bytes;
    void *impl;                    /* implementation's own state */
} agmm_symm_buf;

/* Collective. bytes >= 1. Memory is zeroed. Device memory on GPUs, host memory in the CPU world. */
agmm_status agmm_symm_alloc(agmm_ctx *ctx, size_t bytes, agmm_symm_buf **buf);
/* Collective (every rank frees its buffers in the same order). NULL-safe. The caller makes sure
 * no peer still reads the buffer (a barrier before). */
void agmm_symm_free(agmm_ctx *ctx, agmm_symm_buf *buf);

#endif
