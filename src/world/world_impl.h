/* The world's private structs, shared by the files of src/world only. Layers above see world.h
 * and rank_gpu.h. */
#ifndef AGMM_WORLD_WORLD_IMPL_H
#define AGMM_WORLD_WORLD_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "world.h"

struct agmm_world_gpu;   /* world_gpu.c: NCCL communicators, device list */
struct agmm_gpu_rank;    /* rank_gpu.h: a GPU rank's streams, cuBLASLt handle, error record */

/* How the ranks of a world meet on the host: one implementation per way ranks are launched
 * (threads of one process: host_threads.c). Both calls are collective and bounded by the
 * world's timeout; `tag` identifies the call (world_common.c). */
typedef struct {
    agmm_status (*exchange)(agmm_ctx *ctx, uint32_t tag, const void *mine, size_t bytes, void *all);
    agmm_status (*barrier)(agmm_ctx *ctx, uint32_t tag);
    void (*fini)(agmm_world *world);
} agmm_host_ops;

struct agmm_world {
    agmm_world_kind kind;      /* resolved: never AGMM_WORLD_AUTO */
    int nranks;                /* W */
    int nlocal;                /* ranks this process drives */
    int first_rank;            /* global rank of local rank 0 */
    int device_of[AGMM_MAX_RANKS]; /* CUDA device of each local rank; -1 in the CPU world */
    unsigned caps;             /* AGMM_CAP_* */
    char lacks_nccl[160];      /* why AGMM_CAP_NCCL is missing, "" if present */
    char lacks_peer[160];      /* why AGMM_CAP_PEER_MEMORY is missing */
    double timeout_s;          /* bound on every wait for a peer */
    int log_level;
    int no_gpu_visible;        /* set by a GPU world that found no device (AUTO takes the CPU) */
    char describe[512];

    const agmm_host_ops *host;
    void *host_state;          /* the host implementation's own */

    struct agmm_world_gpu *gpu; /* NULL in the CPU world */
};

struct agmm_ctx {
    agmm_world *world;
    agmm_rank_info info;
    agmm_error err;
    agmm_error out_of_step;    /* set when a run failed after the ranks' epochs moved: sticky */
    uint32_t host_seq;         /* host collectives this rank has entered */
    struct agmm_gpu_rank *gpu; /* NULL in the CPU world */
    void *symm;                /* the symmetric-memory layer's per-rank state */
    void *api;                 /* the API layer's per-rank state */
};

/* The host collectives of ranks that are threads of one process (host_threads.c). */
agmm_status agmm_host_threads_init(agmm_world *world, agmm_error *err);

/* GPU worlds (world_gpu.c; stubs returning AGMM_ERR_UNSUPPORTED in a build without CUDA). */
agmm_status agmm_world_gpu_create(agmm_world *world, const agmm_world_config *config, agmm_error *err);
void agmm_world_gpu_destroy(agmm_world *world);
agmm_status agmm_gpu_rank_create(agmm_ctx *ctx);
void agmm_gpu_rank_destroy(agmm_ctx *ctx);
agmm_status agmm_gpu_rank_sync(agmm_ctx *ctx);

#endif
