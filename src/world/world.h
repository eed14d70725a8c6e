/* Worlds and rank contexts (internal). A world is the set of ranks one process drives; a
 * context is one rank. The GPU-specific state hangs off opaque pointers filled by
 * world_gpu.c, so this header and the CPU path need no CUDA. */
#ifndef AGMM_WORLD_WORLD_H
#define AGMM_WORLD_WORLD_H

#include <pthread.h>
#include <stdint.h>

#include "agmm.h"
#include "../core/error.h"

struct agmm_world_gpu;   /* world_gpu.c: NCCL communicators, device list */
struct agmm_ctx_gpu;     /* world_gpu.c: streams, cuBLASLt handle, device error record */
struct agmm_symm_buf;    /* symm/symm.h */

struct agmm_world {
    agmm_world_kind kind;      /* resolved: never AGMM_WORLD_AUTO */
    int nranks;                /* W */
    int nlocal;                /* ranks this process drives */
    int first_rank;            /* global rank of local rank 0 */
    int device_of[AGMM_MAX_RANKS]; /* CUDA device of each local rank; -1 in the CPU world */
    int shares_gpu;            /* two local ranks on one device: NCCL cannot serve this world */
    double timeout_s;          /* bound on every wait for a peer */
    int log_level;
    char describe[512];

    /* Rendezvous of the local ranks' threads (host-side exchanges and barriers). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned generation;
    int arrived;
    unsigned char *xchg;       /* nlocal slots of xchg_slot bytes */
    size_t xchg_slot;
    uint32_t *xchg_seq;        /* nlocal: the tag of the host collective each rank is in (world.c) */

    struct agmm_world_gpu *gpu; /* NULL in the CPU world */
};

struct agmm_ctx {
    agmm_world *world;
    int rank;                  /* global rank */
    int local_rank;
    int device;                /* -1 in the CPU world */
    agmm_error err;
    agmm_error out_of_step;    /* set when a run failed after the ranks' epochs moved: sticky */
    void *nccl_comm;           /* ncclComm_t of this rank, or NULL where NCCL cannot run */
    struct agmm_ctx_gpu *gpu;  /* NULL in the CPU world */
    struct agmm_symm_buf *pad; /* signal pad: AGMM_PAD_SLOTS uint32 flags per rank */
    uint32_t barrier_epoch;    /* bumped by every barrier; equal on all ranks (same call order) */
    uint32_t host_seq;         /* host collectives (world barrier/exchange) this rank has entered */
};

/* Signal pad layout (uint32 slots): [0, AGMM_MAX_RANKS) barrier arrivals, slot p written by rank p. */
#define AGMM_PAD_SLOTS (AGMM_MAX_RANKS)

/* Host-side collectives among the ranks of the world. Collective. `all` receives nranks slots of
 * `bytes` each, slot r from rank r. Bounded by world->timeout_s: a rank that never arrives gives
 * AGMM_ERR_TIMEOUT naming the ranks missing. */
agmm_status agmm_world_exchange(agmm_ctx *ctx, const void *mine, size_t bytes, void *all);
agmm_status agmm_world_barrier(agmm_ctx *ctx);

/* GPU worlds (world_gpu.c; stubs returning AGMM_ERR_UNSUPPORTED in a build without CUDA). */
agmm_status agmm_world_gpu_create(agmm_world *world, const agmm_world_config *config, agmm_error *err);
void agmm_world_gpu_destroy(agmm_world *world);
agmm_status agmm_ctx_gpu_create(agmm_ctx *ctx);
void agmm_ctx_gpu_destroy(agmm_ctx *ctx);
agmm_status agmm_ctx_gpu_sync(agmm_ctx *ctx);

#endif
