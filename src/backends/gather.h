/* The run skeleton that `ce` and `fused` share: "chunks arrive, the GEMM consumes" (internal).
 *
 * Both gather the peers' shards with a copy engine, chunk by chunk in the schedule's order
 * (rank+1, rank+2, ...; src/core/schedule.h cuts each shard into `splits` chunks), while a GEMM
 * consumes each chunk once it has landed, and the local shard's rows need no copy before they are
 * used. They differ only in how the GEMM learns that a chunk has landed, which the backend gives
 * as hooks. One run (W ranks, epoch e of the plan):
 *
 *   entry barrier        every rank's shard is written                           [W > 1]
 *   start hook           the work that needs no copy (ce: the local GEMM; fused: the whole
 *                        persistent GEMM, which waits per tile)
 *   for each peer chunk  the copy engine copies the chunk into its rows of the gathered A, then
 *                        the landed hook makes that known (ce: an event and the chunk's GEMM;
 *                        fused: the chunk's flag raised to e)
 *   the local shard      into its rows of the gathered A (nobody waits for it), unless the
 *                        start hook's work copies it (fused's GEMM on GPUs)
 *   closing barrier      nobody reads my shard any more: my caller may overwrite it   [W > 1]
 *
 * GPU: the caller's stream S computes, the context's high-priority copy stream C copies and
 * meets the peers; S is ordered after all of it at the end. At W = 1 with the local shard copied
 * by the start hook's work, C has nothing to do and is left out: the run is that work on S alone,
 * with no event between streams (each costs ~0.9 us where S is the legacy default stream: H100,
 * 2026-12-06, docs/results). CPU: the rank's thread computes, the
 * plan's copy thread (src/cpu) copies and raises the chunk flags; the compute hook waits on them.
 */
#ifndef AGMM_BACKENDS_GATHER_H
#define AGMM_BACKENDS_GATHER_H

#include <stdint.h>

#include "backend.h"
#include "../cpu/cpu.h"

/* ---- CPU world ---- */

typedef struct {
    agmm_cpu_copy_engine *ce;
    int chunks;                  /* W * splits */
    uint32_t *flags;             /* chunk c's flag at flags[c * AGMM_CPU_FLAG_STRIDE]; never reset */
    int64_t *delay_us;           /* per chunk: test hook (a slow link), 0 normally */
    int64_t *copy_done_ns;       /* per chunk: when its copy finished, written before its flag */
} agmm_gather_cpu;

agmm_status agmm_gather_cpu_create(agmm_plan *plan, agmm_gather_cpu *g);
/* What agmm_gather_cpu_create allocates for the plan's descriptor, in bytes (at most). */
uint64_t agmm_gather_cpu_bytes(const agmm_plan *plan);
void agmm_gather_cpu_destroy(agmm_gather_cpu *g);

/* One run. `compute` is the GEMM role, on the rank's thread, after the copies are queued: it
 * reads local rows from the shard and waits (agmm_gather_cpu_wait) for each peer chunk before
 * reading it from io->a_gathered. `what` names the backend in messages ("ag_matmul/ce"). */
agmm_status agmm_gather_cpu_run(agmm_plan *plan, agmm_gather_cpu *g, const agmm_ag_matmul_io *io, const char *what,
                                 agmm_status (*compute)(agmm_plan *plan, const agmm_ag_matmul_io *io, void *arg),
                                 void *arg);

/* Waits (acquire, bounded by the world's timeout) until chunk `chunk` has landed in this run.
 * On timeout records AGMM_ERR_TIMEOUT naming the rank, the chunk, its source rank and rows. */
agmm_status agmm_gather_cpu_wait(agmm_plan *plan, const agmm_gather_cpu *g, int chunk, const char *what);

/* ---- GPUs ---- */
#ifdef AGMM_HAVE_CUDA
#include "../world/gpu_headers.h"

typedef struct {
    cudaEvent_t ev_in, ev_done;
    int delay_chunk;             /* test hook: chunk whose copy starts delay_ns late, -1: none */
    uint64_t delay_ns;
} agmm_gather_gpu;

typedef struct {
    /* After the entry barrier is enqueued on C, before any copy: enqueue on S what needs no copy. */
    agmm_status (*start)(agmm_plan *plan, const agmm_ag_matmul_io *io, cudaStream_t s, void *arg);
    /* After chunk `chunk` (rows [row0, row0 + rows) of the gathered A) was enqueued for copying on
     * C: make its arrival known to the GEMM on S. */
    agmm_status (*landed)(agmm_plan *plan, const agmm_ag_matmul_io *io, int chunk, int64_t row0, int64_t rows,
                          cudaStream_t s, cudaStream_t c, void *arg);
    /* 1: start's work also copies the local shard into its rows of the gathered A. */
    int copies_local;
} agmm_gather_gpu_hooks;

agmm_status agmm_gather_gpu_create(agmm_plan *plan, agmm_gather_gpu *g);
void agmm_gather_gpu_destroy(agmm_gather_gpu *g);
agmm_status agmm_gather_gpu_run(agmm_plan *plan, agmm_gather_gpu *g, const agmm_ag_matmul_io *io, cudaStream_t s,
                                 const agmm_gather_gpu_hooks *hooks, void *arg);
#endif

#endif
