/* The GEMM engine: a persistent, warp-specialised bf16 GEMM for sm_90a (TMA + mbarrier ring +
 * WGMMA), C = A * B with A row-major, B column-major (B^T is N x K contiguous) or row-major
 * (K x N contiguous), C row-major, fp32 accumulation, bf16 out.
 *
 * It is also the GEMM half of the fused all-gather matmul: tiles are visited in core/schedule.h's
 * order, and each tile can (1) wait on its chunk's flag (acquire, bounded) before its A is loaded
 * and (2) read A either from the gathered buffer or from the rank's own shard. In pull mode (the
 * `pull` backend) it is the whole all-gather matmul: peers' tiles are read from their shards
 * directly, after their ready flags, and the gathered A is written as a by-product. A plain GEMM
 * is the schedule with nranks = 1, splits = 1 and no flags. Where A comes from is the kernel's A
 * source (src/kernels/gemm/a_source.cuh); docs/gemm_engine.md has the layout of the folder.
 *
 * Errors: every call that can fail records why in *err (core/error.h, the first cause kept) and
 * returns its status; a message names the argument and what is allowed.
 *
 * Plain C11 (usable from host C code); CUDA builds only. */
#ifndef AGMM_KERNELS_GEMM_GEMM_ENGINE_H
#define AGMM_KERNELS_GEMM_GEMM_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "agmm.h"
#include "core/error.h"
#include "kernels/dev_error.h"
#include "kernels/gemm/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct agmm_gemm_plan agmm_gemm_plan;

/* Pull mode's signal words (agmm_gemm_desc.signals): the ready flag, then one done slot per rank. */
enum { AGMM_PULL_READY = 0, AGMM_PULL_DONE = 1 };
/* Pull mode: how many distinct sets of shard pointers a plan keeps the maps of (set_peers). */
#define AGMM_GEMM_MAP_SLOTS 16

/* Scatter mode (agmm_gemm_desc.scatter): where the partial's rows go and the signals that say so. */
typedef struct {
    int on;                     /* 1: scatter mode */
    int all;                    /* 1: every rank owns every row (the fused matmul_all_reduce) */
    void *const *slots;         /* device table [nranks]: rank q's nranks slots, slot_bytes apart (slot p:
                                 * rank p's partial of q's rows, rows(q) x n bf16, row-major; all: m rows) */
    uint32_t *const *signals;   /* device table [nranks]: rank q's signal words: tiles * nranks tile flags
                                 * (word tile * nranks + src), then nranks done words; zero at plan time */
    uint64_t slot_bytes;        /* a multiple of 16 */
} agmm_gemm_scatter;

typedef struct {
    /* Operands: device pointers, 16-byte aligned, caller-owned. May be NULL at plan time and
     * given later with agmm_gemm_plan_set_ptrs (before the first run). */
    const void *a;        /* gathered A: (nranks*m) x k bf16, row-major */
    const void *a_local;  /* the rank's shard: m x k bf16, or NULL: local tiles read `a` */
    const void *b;        /* k x n bf16 in b_layout */
    void *c;              /* (nranks*m) x n bf16, row-major */
    agmm_layout b_layout; /* COL_MAJOR: B^T is N x K contiguous; ROW_MAJOR: K x N (n % 8 == 0) */
    int64_t m;            /* rows per rank (a plain GEMM: all rows, with nranks = 1) */
    int64_t n, k;         /* n >= 1; k >= 8, k % 8 == 0 (16-byte rows for TMA) */
    /* The schedule (core/schedule.h): plain GEMM nranks = 1, rank = 0, splits = 1. */
    int nranks, rank, splits;
    /* Waits. chunk_flags: nranks*splits uint32 device-visible flags (flag id = src_rank*splits +
     * split) and one more word, the engine's count, all zero at plan time. A tile that reads `a`
     * waits until its flag >= the run's `ready` (wrap-safe compare), a tile that reads `a_local`
     * never waits. Reset: when the last CTA of a run has passed its waits it puts every flag and
     * the count back to 0, so the writers may raise the same constant every run (a CUDA graph
     * replays it) and must raise a flag only after the run before has completed (with nranks = 1
     * and a_local no tile waits, and the flags are left as they are). NULL: no waits.
     * dev_error: where an expired wait is recorded (host-mapped, required with waits; the caller
     * clears it between runs: a non-zero record makes every wait give up at once); timeout_ns:
     * the bound of every wait, the world's timeout (required, > 0, with waits: chunk flags, or
     * pull mode with several ranks; the engine has no default). */
    uint32_t *chunk_flags;
    agmm_dev_error *dev_error;
    uint64_t timeout_ns;
    /* Pull mode (the `pull` backend): pull = 1 loads the A tiles of rank src's rows straight from
     * src's shard, through one tensor map per rank over the shard pointers that
     * agmm_gemm_plan_set_peers gives (peer memory: NVLink, or the same GPU where ranks share
     * one), once src's ready word says the shard is written; tiles of this rank's rows read
     * a_local and never wait. `a` is written instead of read: each A tile loaded for the first
     * column of C is stored to its rows of `a`, so the gathered A comes out as a by-product.
     * Epochs: the plan counts its runs on the device (an epoch word, advanced by each run's
     * kernel at its end), so a run needs no value from the host and a CUDA graph replays it as
     * a new run; every rank's plan must run the same runs. signals: a device table of nranks
     * pointers, rank r's signal words, zero at plan time: word AGMM_PULL_READY is r's ready
     * flag (only r's kernel writes it: the run's epoch, at its start, after the work before it
     * on its stream wrote the shard), word AGMM_PULL_DONE + p is the done slot of rank p (only p
     * writes it: the epoch, once p has read r's shard for the last time in that run). The
     * kernel ends with that closing barrier: it returns only when every peer has finished
     * reading this rank's shard. NULL (and no waits, no barrier) with nranks = 1. Needs
     * dev_error and timeout_ns with nranks > 1. */
    int pull;
    uint32_t *const *signals;
    /* copy_local = 1 (chunk-flag mode, with a_local): the kernel also copies the shard
     * into this rank's rows of `a` (rows rank*m ..), so the gathered A needs no copy of them
     * beside it: the idle warps of every CTA's producer warpgroup copy an even share of the
     * shard's bytes while the GEMM runs (the fused backend's local rows; at W = 1 its whole run is
     * this kernel). No tile reads those rows of `a`: local tiles read a_local. */
    int copy_local;
    /* Scatter mode (the fused matmul_reduce_scatter; epi_scatter.cuh has the protocol): C is not
     * stored; each tile's rows go into slot `rank` of their owner's slots (the row split, R =
     * ceil(m / nranks): row g belongs to rank g / R), a flag per (tile, rank) goes up at each other
     * owner, and each owner sums its rows of a tile in rank order into c as they land. m is all M
     * rows of A (this rank's A_r), nranks and rank are the world's, splits is 1, a_local NULL;
     * tiles are visited in core/schedule.h's reduce-scatter order; c is this rank's rows of S
     * (rows(rank) x n; any aligned pointer where it has none). With scatter.all every rank owns
     * every row: each tile goes to every rank, every rank sums every tile into c (all of S), and
     * the tiles are visited in a plain GEMM's order, the same on every rank (CTA b of each rank
     * waits for CTA b of the others: every rank must run the same grid, max_ctas included). The
     * tile grid names the flags, so every rank must run the same config (tiles =
     * agmm_gemm_grid_tiles). Epochs on the device, as pull's: a CUDA graph replays a run as a new
     * one; every rank's plan must run the same runs. Needs dev_error and timeout_ns with nranks >
     * 1; refuses split-tail configs. */
    agmm_gemm_scatter scatter;
    int max_ctas;         /* SM budget for the persistent grid; 0: every SM of the device */
    int config;           /* tile config index (agmm_gemm_config_name), -1: the policy picks (the
                           * measured table of gemm_configs.h near a measured shape with the whole
                           * GPU, else the cost model: policy.h) */
} agmm_gemm_desc;

/* The current device's kind, whose policy tables a plan takes (policy.h, agmm_gemm_device_kind:
 * from its memory); the H100's where its memory cannot be read. */
agmm_gemm_device agmm_gemm_current_device(void);

/* Validates desc, picks a tile config, encodes the TMA descriptors of the given pointers and
 * sets the kernel's shared-memory limit (split-tail configs: also allocates their workspace; pull
 * mode: its map slots and counters). Not collective; no stream work; host-blocking only for
 * attribute calls and allocations. On failure *out = NULL and *err says why. Statuses:
 * AGMM_ERR_INVALID_ARG (shape, alignment, a wait without dev_error or timeout_ns, config out of
 * range), AGMM_ERR_UNSUPPORTED (row-major B with n % 8 != 0, dimensions past 2^31, not an sm_90
 * device), AGMM_ERR_NO_MEMORY, AGMM_ERR_CUDA. */
agmm_status agmm_gemm_plan_create(agmm_gemm_plan **out, const agmm_gemm_desc *desc, agmm_error *err);

/* Replaces operand pointers; a NULL argument keeps the current one (a plan made without
 * a_local gains one: from then on local tiles read it). Re-encodes only the descriptors whose
 * pointer changed: a host-only call of about a microsecond each, no device work; runs pass
 * descriptors by value, so runs already enqueued are unaffected. AGMM_ERR_INVALID_ARG for a
 * misaligned pointer (named), AGMM_ERR_CUDA if the driver refuses a descriptor. */
agmm_status agmm_gemm_plan_set_ptrs(agmm_gemm_plan *plan, const void *a, const void *a_local, const void *b,
                                    void *c, agmm_error *err);

/* Pull mode: the shard of every rank as this rank addresses it, for the runs enqueued from now
 * on (peers[rank] is its own, which local tiles do not read through: they read a_local). The
 * plan keeps the maps of up to AGMM_GEMM_MAP_SLOTS distinct shard sets in device memory: a set
 * seen before costs nothing; a new one is encoded (about a microsecond per rank) and stored by a
 * one-block kernel enqueued on `stream`, which carries the maps as its parameter, into the least
 * recently used slot. Stream order must put that kernel after the plan's earlier runs, which may
 * still read the slot (the pull backend's runs of a rank are ordered). A slot chosen while
 * `stream` is being captured belongs to the graph from then on and is never refilled with other
 * maps, so every replay finds its own; a slot filled only inside a capture is filled again (the
 * same bytes) when work outside that graph first uses it. No host wait. AGMM_ERR_INVALID_ARG for
 * a plan not in pull mode or a misaligned pointer; AGMM_ERR_UNSUPPORTED for a new set when
 * captures hold every slot; AGMM_ERR_CUDA. */
agmm_status agmm_gemm_plan_set_peers(agmm_gemm_plan *plan, const void *const *peers, cudaStream_t stream,
                                     agmm_error *err);

/* Enqueues one GEMM on `stream`. ready: the value the chunk flags must reach (fused raises them
 * to 1; ignored without flags, and in pull mode, whose epochs live on the device). A plan's runs
 * must not overlap in time (enqueue them on one stream, or order them): split-tail configs keep a
 * workspace in the plan, the flags are reset and pull's epoch word advanced at the end of each
 * run. AGMM_ERR_INVALID_ARG when an operand (named), or in pull mode the peers, is still
 * missing; AGMM_ERR_CUDA when the launch fails (the runtime's error). An expired wait does not
 * fail the call: the kernel records it in dev_error, stops waiting, finishes (with whatever the
 * late chunk held) and the caller reports it. */
agmm_status agmm_gemm_run(agmm_gemm_plan *plan, uint32_t ready, cudaStream_t stream, agmm_error *err);

/* Test hook: from the next run on, each CTA's producer starts its loads delay_ns after the CTA
 * starts (0: at once). In pull mode the rank's ready word still goes up at the kernel's start,
 * so the rank becomes a slow reader of its peers' shards. Host only; between runs. */
void agmm_gemm_plan_set_delay(agmm_gemm_plan *plan, uint64_t delay_ns);

/* NULL-safe; frees the plan's device memory (no stream work may still use the plan). */
void agmm_gemm_plan_destroy(agmm_gemm_plan *plan);

/* "128x256x64/s4 ctas=132 tiles=1024": what the plan runs (for logs and the lab). */
const char *agmm_gemm_plan_describe(const agmm_gemm_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* AGMM_KERNELS_GEMM_GEMM_ENGINE_H */
