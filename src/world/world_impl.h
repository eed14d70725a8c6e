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
 * (threads of one process: host_threads.c; processes on one host: host_procs.c; processes on
 * several hosts: host_nccl.c). The calls are collective and bounded by the world's timeout;
 * `tag` identifies the call (world_common.c), `bytes` <= AGMM_HOST_SLOT_BYTES (checked there). exchange_fds is
 * NULL where ranks cannot pass descriptors. fini is local. */
typedef struct {
    agmm_status (*exchange)(agmm_ctx *ctx, uint32_t tag, const void *mine, size_t bytes, void *all);
    agmm_status (*barrier)(agmm_ctx *ctx, uint32_t tag);
    agmm_status (*exchange_fds)(agmm_ctx *ctx, uint32_t tag, int mine, int *all);
    /* After a failed collective: tells the peers (where they can be told) that this rank gives
     * up on the world, with the reason, so that they fail at once instead of waiting for it. */
    void (*abandon)(agmm_world *world, const agmm_error *why);
    /* Shows the peers that this rank is busy with work of its own (busy = 1, with what it does)
     * or no longer (busy = 0): their waits for it in these collectives drop the bound while it is
     * busy and start a whole one when it ends (world.h, agmm_ctx_busy_begin). Local. NULL where
     * peers cannot see it (across hosts). */
    void (*busy)(agmm_ctx *ctx, int busy, const char *what);
    /* Whether peer `rank` is known to have died (its process exited without leaving the world),
     * with the fact in `why` ("rank 2 (pid 1234) has exited without leaving the world: killed or
     * crashed"); 0 while it may be alive, or if it left. NULL where nothing tells (threads die
     * with the process; across hosts). */
    int (*peer_gone)(const agmm_world *world, int rank, char *why, size_t len);
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
    char lacks_peer[256];      /* why AGMM_CAP_PEER_MEMORY is missing */
    double timeout_s;          /* bound on every wait for a peer */
    int log_level;
    int check_runs;            /* AGMM_CHECK_RUNS=1 when the world was made */
    int no_gpu_visible;        /* set by a GPU world that found no device (AUTO takes the CPU) */
    int processes;             /* 1: a process world (agmm_world_join): nlocal == 1 */
    int ranks_on_device;       /* process worlds: ranks of the world on this rank's device */
    int ranks_on_host;         /* process worlds: ranks of the world on this rank's host */
    char describe[768];

    const agmm_host_ops *host;
    void *host_state;          /* the host implementation's own */
    /* The first failed host collective: the world is unusable from then on (world.h). */
    pthread_mutex_t broken_mu;
    agmm_error broken;

    struct agmm_world_gpu *gpu; /* NULL in the CPU world */
};

struct agmm_ctx {
    agmm_world *world;
    agmm_rank_info info;
    agmm_error err;
    agmm_error out_of_step;    /* set when a run failed after the ranks' epochs moved: sticky */
    uint32_t host_seq;         /* host collectives this rank has entered */
    int busy_depth;            /* agmm_ctx_busy_begin calls not yet ended */
    struct agmm_gpu_rank *gpu; /* NULL in the CPU world */
    void *symm;                /* the symmetric-memory layer's per-rank state */
    void *api;                 /* the API layer's per-rank state */
};

/* A config's timeout_s: 0 (AGMM_TIMEOUT_S's value), or AGMM_TIMEOUT_S's own range (a millisecond to a
 * day): a longer bound would overflow the waits' nanosecond deadlines, and NaN or infinity is no
 * bound at all. */
agmm_status agmm_world_check_timeout(double timeout_s, agmm_error *err);
/* A zeroed world with its timeout (0: 5 s), log level and unusable-record lock (world_common.c). */
agmm_status agmm_world_alloc(double timeout_s, agmm_world **out, agmm_error *err);

/* The host collectives of ranks that are threads of one process (host_threads.c). */
agmm_status agmm_host_threads_init(agmm_world *world, agmm_error *err);

/* Process worlds (world_join.c drives these). What a joining process knows before it meets its
 * peers. */
typedef struct {
    int rank, nranks;
    char job[256];             /* the job's identity: equal on its ranks, unique among jobs on a host */
    char source[160];          /* where rank and job came from, for messages ("torchrun: RANK=1 ...") */
} agmm_proc_identity;

/* The host collectives of processes on one host (host_procs.c): meets the peers of `id` through
 * abstract Unix sockets and a shared control segment, within the world's timeout. Collective. */
agmm_status agmm_host_procs_init(agmm_world *world, const agmm_proc_identity *id, agmm_error *err);
/* The host collectives of processes on several hosts (host_nccl.c; GPU worlds only), over the
 * world's NCCL communicator. Local (the communicator exists already). */
agmm_status agmm_host_nccl_init(agmm_world *world, agmm_error *err);

/* GPU worlds (world_gpu.c; stubs returning AGMM_ERR_UNSUPPORTED in a build without CUDA). */
agmm_status agmm_world_gpu_create(agmm_world *world, const agmm_world_config *config, agmm_error *err);
void agmm_world_gpu_destroy(agmm_world *world);
/* What a GPU process tells its peers when it joins (host identity aside). */
typedef struct {
    char bus_id[32];           /* PCI bus id of the rank's device */
    int vmm_fd_ok;             /* emulated: CUDA VMM memory with POSIX fd handles can be made */
    char vmm_why[200];         /* why not */
} agmm_gpu_join_info;
/* A process world's GPU part, in steps (world_join.c calls them in this order): the device
 * (and for emulated worlds the VMM handle probe), local, with a line for the banner in `text`;
 * then the NCCL communicator from `nccl_id` (ncclUniqueId bytes) or the borrowed `comm`,
 * collective, bounded, adding NCCL's version to `text`. */
agmm_status agmm_world_gpu_join_device(agmm_world *world, int device, agmm_gpu_join_info *info, char *text,
                                       size_t text_len, agmm_error *err);
agmm_status agmm_world_gpu_join_nccl(agmm_world *world, const void *nccl_id, void *comm, int allow_nvls, char *text,
                                     size_t text_len, agmm_error *err);
/* Visible CUDA devices; 0 without a driver or a GPU (or CUDA in the build). */
int agmm_world_gpu_count(void);
/* ncclGetUniqueId into `out` (NCCL_UNIQUE_ID_BYTES; it honours NCCL_COMM_ID). */
agmm_status agmm_world_gpu_nccl_id(void *out, size_t len, agmm_error *err);
/* Whether this rank's device can load and store each peer's (by PCI bus id): "" or why not. */
void agmm_world_gpu_peer_probe(const agmm_world *world, const agmm_gpu_join_info *all, char *why, size_t why_len);
/* The world's NCCL communicator (process worlds: this rank's), NULL without one. */
void *agmm_world_gpu_comm(const agmm_world *world);
/* Records a failed host collective as the reason the world is unusable (world_common.c). */
void agmm_world_break(agmm_world *world, const agmm_error *why);
agmm_status agmm_gpu_rank_create(agmm_ctx *ctx);
void agmm_gpu_rank_destroy(agmm_ctx *ctx);
agmm_status agmm_gpu_rank_sync(agmm_ctx *ctx);

#endif
