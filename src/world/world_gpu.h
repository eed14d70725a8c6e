/* The GPU part of a world, shared by world_gpu.c (devices, ranks) and nccl_comm.c (communicators)
 * only. Built with CUDA only. */
#ifndef AGMM_WORLD_WORLD_GPU_H
#define AGMM_WORLD_WORLD_GPU_H

#include "gpu_check.h"
#include "rank_gpu.h"
#include "world_impl.h"

struct agmm_world_gpu {
    int ndev;                             /* visible devices */
    int nccl_version;                     /* ncclGetVersion, 0 where NCCL is not used */
    ncclComm_t comms[AGMM_MAX_RANKS];     /* one per local rank; none in emulated worlds */
    int borrowed;                         /* process worlds: comms[0] is the caller's, never ended here */
};

/* nccl_comm.c */
/* The checks before NCCL starts: library == headers (AGMM_ERR_VERSION otherwise), and NVLink
 * multicast off unless allowed. Fills g->nccl_version. */
agmm_status agmm_nccl_guards(struct agmm_world_gpu *g, int allow_nvls, agmm_error *err);
/* The communicators of a one-process world, one per local rank (made from this thread). */
agmm_status agmm_nccl_init_local(agmm_world *w, agmm_error *err);
/* Ends every communicator the world owns (local; bounded). */
void agmm_nccl_end_all(agmm_world *w);
/* "NCCL 2.28.9, NVLS off" for banners. */
void agmm_nccl_text(const agmm_world *w, int allow_nvls, char *buf, size_t len);
/* Process worlds across hosts: waits for `stream` (work on the world's communicator comms[0]),
 * polling the communicator, within the world's timeout; on timeout aborts it (unless borrowed)
 * and records an error naming `what`. */
agmm_status agmm_nccl_wait_stream(agmm_world *w, cudaStream_t stream, const char *what, agmm_error *err);
/* Polls the rank's work (its last run and copy stream) while its communicator may hold it,
 * within the world's timeout; on timeout as agmm_gpu_nccl_settle. AGMM_SUCCESS once done. */
agmm_status agmm_nccl_wait_work(agmm_ctx *ctx);

#endif
