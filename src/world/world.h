/* Worlds and rank contexts as the layers above see them (internal). A world is the set of ranks
 * one process drives (threads of one process, or this process's one rank of a process world); a
 * context is one rank: who it is, what its world can do, its error record, and the host-side
 * collectives among ranks. The structs themselves are private to src/world
 * (world_impl.h); layers above use this interface, and rank_gpu.h for a GPU rank's resources.
 *
 * This layer knows nothing of symmetric memory, backends or plans: the symmetric-memory layer
 * keeps its per-rank state in the slot agmm_ctx_symm_state gives it, and src/api puts a public
 * context together (agmm_ctx_create = agmm_rank_create + the symmetric heap). */
#ifndef AGMM_WORLD_WORLD_H
#define AGMM_WORLD_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"
#include "../core/error.h"

/* What a world offers its ranks. Backend implementations state which of these they need beyond
 * their device class; a world lacking one says why (agmm_world_lacks). */
enum {
    AGMM_CAP_GPU = 1u << 0,          /* ranks run on GPUs (else host memory and threads) */
    AGMM_CAP_NCCL = 1u << 1,         /* every rank has an NCCL communicator */
    AGMM_CAP_PEER_MEMORY = 1u << 2,  /* every rank can load and store every peer's symmetric memory */
};

/* A rank as every layer above sees it; constant for the context's life. */
typedef struct {
    agmm_world_kind kind;      /* resolved: never AGMM_WORLD_AUTO */
    int rank, nranks;          /* global rank, W */
    int local_rank;            /* index among this process's ranks */
    int device;                /* CUDA device ordinal; -1 in the CPU world */
    int ranks_on_device;       /* ranks of the world sharing this rank's device (emulated: > 1) */
    int ranks_on_host;         /* ranks of the world on this rank's host, sharing its memory */
    int processes;             /* 1: the ranks are processes (agmm_world_join), one rank each */
    double timeout_s;          /* bound on every wait for a peer */
    unsigned caps;             /* AGMM_CAP_* of the world */
    int log_level;             /* AGMM_LOG_* threshold */
    int check_runs;            /* AGMM_CHECK_RUNS=1 when the world was made (plans take rank 0's) */
} agmm_rank_info;

const agmm_rank_info *agmm_ctx_info(const agmm_ctx *ctx);
const agmm_world *agmm_ctx_world(const agmm_ctx *ctx);
/* The rank's error record: what agmm_last_error shows. Written only by the rank's own thread. */
agmm_error *agmm_ctx_err(agmm_ctx *ctx);
/* The record of the run that left this rank out of step with its peers (status AGMM_SUCCESS while
 * it is in step): once set, every later run is refused with it. */
agmm_error *agmm_ctx_out_of_step(agmm_ctx *ctx);

unsigned agmm_world_caps(const agmm_world *world);
/* The launcher's rank of this process, -1 without a launcher's variables (agmm_ext.h). */
int agmm_world_launch_rank(void);
/* Why the world lacks `cap` ("ranks share a GPU, and NCCL needs one GPU per rank"); "" if it has it. */
const char *agmm_world_lacks(const agmm_world *world, unsigned cap);

/* The most bytes one rank contributes to a host exchange (an agmm_error fits). */
#define AGMM_HOST_SLOT_BYTES 1024

/* Host-side collectives among the ranks of the world, each tagged with its sequence number and
 * kind so that ranks that fell out of step are refused, not paired with stale data. `all`
 * receives nranks slots of `bytes` each (<= AGMM_HOST_SLOT_BYTES), slot r from rank r. Bounded
 * by the world's timeout: a rank that never arrives gives AGMM_ERR_TIMEOUT naming the ranks
 * missing (in a process world, also a rank whose process has exited).
 *
 * A failed host collective leaves the ranks out of step for good: the world is then unusable,
 * and every later host collective of every rank of this process fails at once with the first
 * failure's message (in a process world, peers learn it too and fail at once as well). */
agmm_status agmm_host_exchange(agmm_ctx *ctx, const void *mine, size_t bytes, void *all);
agmm_status agmm_host_barrier(agmm_ctx *ctx);
/* The host collectives this rank has entered: equal on every rank while they are in step, so the
 * value right after a collective call names that call alike on every rank (a plan's number). */
uint32_t agmm_ctx_host_seq(const agmm_ctx *ctx);

/* Agreement on a collective step: every rank passes the status of its own part (with the detail
 * in its error record) and every rank gets the same answer: AGMM_SUCCESS if every rank
 * succeeded, else the status of the lowest failing rank, whose message the others record as
 * "rank R failed: ...". Collective; what every set-up step ends with, so that a failure on one
 * rank is a failure on all and none goes on to wait for it. */
agmm_status agmm_host_agree(agmm_ctx *ctx, agmm_status mine);

/* After a timeout recorded in ctx's error record (a run's barrier or flag that a peer never
 * reached): appends every peer the world knows to have died ("; rank 1 (pid 123) has exited
 * without leaving the world: killed or crashed"), so that the message says the process died, as
 * a host collective's does. Nothing where nothing tells (threads, ranks on other hosts), or for
 * another status. Local. */
void agmm_world_note_gone(agmm_ctx *ctx);
/* 1 and why ("rank 1 (pid 123) has exited without leaving the world: killed or crashed") where the
 * world knows peer `rank` died (process worlds on one host); else 0. Local, cheap enough to ask
 * while waiting (one lock query). */
int agmm_world_peer_gone(const agmm_ctx *ctx, int rank, char *why, size_t len);

/* Process worlds only: every rank passes a file descriptor (or -1 where its own part failed) and
 * gets every peer's, received over Unix-domain sockets (SCM_RIGHTS): all[r] is a new descriptor
 * of rank r's (the caller closes it), all[rank] = -1, and -1 where rank r passed -1. Collective,
 * bounded by the world's timeout. AGMM_ERR_UNSUPPORTED in worlds whose ranks are threads or
 * span hosts. */
agmm_status agmm_host_exchange_fds(agmm_ctx *ctx, int mine, int *all);

/* The world's part of a context: the rank, its device, streams and communicator, no symmetric
 * memory. Collective and agreed (a rank that cannot make its context fails every rank's call).
 * agmm_rank_destroy is local. */
agmm_status agmm_rank_create(agmm_ctx **ctx, agmm_world *world, int rank);
void agmm_rank_destroy(agmm_ctx *ctx);

/* One pointer of per-rank state for the symmetric-memory layer, which owns what it points to. */
void *agmm_ctx_symm_state(const agmm_ctx *ctx);
void agmm_ctx_set_symm_state(agmm_ctx *ctx, void *state);
/* The same for the API layer (`auto`'s cache of choices): NULL until it sets one, and freed by it
 * before agmm_rank_destroy. */
void *agmm_ctx_api_state(const agmm_ctx *ctx);
void agmm_ctx_set_api_state(agmm_ctx *ctx, void *state);

#endif
