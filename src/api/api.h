/* The API layer's internals: operations as types, and the choice of a backend (internal to
 * src/api).
 *
 * An operation (agmm_op) is a descriptor type, an io type, their checks, and what `auto` needs to
 * measure a plan of it: op_ag_matmul.c, op_all_reduce.c, op_all_reduce_rmsnorm.c. plan.c,
 * plan_agree.c and auto (tune.c, tune_cache.c) drive every operation through this one interface
 * and never name one, so a new operation is a new op_<name>.c and the lines docs/architecture.md
 * ("How to add an operation") lists. */
#ifndef AGMM_API_API_H
#define AGMM_API_API_H

#include <stddef.h>

#include "../backends/backend.h"

typedef struct {
    agmm_op op;
    /* Validates everything of the descriptor but its backend, for a world of nranks ranks;
     * AGMM_ERR_INVALID_ARG naming the field. */
    agmm_status (*check)(const void *desc, int nranks, agmm_error *err);
    /* The descriptor's backend string (NULL: auto). */
    const char *(*backend_of)(const void *desc);
    /* Copies the checked descriptor into plan->desc (defaults resolved, backend NULL) and returns
     * the bytes of the plan's symmetric input (0: none; plan->input stays NULL). */
    size_t (*install)(agmm_plan *plan, const void *desc);
    /* The io's input pointer (NULL: the plan's own buffer). */
    const void *(*input_of)(const void *io);
    /* Checks one run's io against the plan (pointers given, alignment, overlaps, reserved); the
     * run's input (plan->in) is resolved already. */
    agmm_status (*check_io)(const agmm_plan *plan, const void *io, agmm_error *err);
    /* The installed descriptor as text, every field the ranks must agree on ("M=64 N=32 K=16
     * b_layout=col splits=2"): what plan creation compares across ranks, and the operation's part
     * of auto's cache key (tune_cache.c). */
    size_t (*describe)(const agmm_plan *plan, char *buf, size_t len);

    /* ---- what `auto` needs to measure candidates without knowing the operation (tune.c) ---- */

    /* The bytes of each buffer one run of the installed descriptor needs besides its input (the
     * io's outputs and other operands, in the order run_scratch takes them), on this rank of
     * plan->ctx's world; returns how many (at most AGMM_SCRATCH_MAX). Local. */
    int (*scratch)(const agmm_plan *plan, size_t bytes[]);
    /* Plans the caller's descriptor `desc` with the backend called `backend`: the operation's
     * public plan function. Collective. */
    agmm_status (*plan_with)(agmm_plan **out, agmm_ctx *ctx, const void *desc, const char *backend);
    /* Enqueues one run of `plan` reading its own input, with buf[i] (scratch's bytes[i] each, the
     * rank's device memory, 256-byte aligned) as the io's other buffers: the operation's public
     * run function. Collective. */
    agmm_status (*run_scratch)(agmm_plan *plan, void *const *buf, void *stream);

    /* Optional (NULL: none): the operation's own value of limit `what` (agmm.h), which every
     * backend of it has; 0 where it has no such limit. */
    int64_t (*limit)(agmm_limit what);
} agmm_op_type;

/* The most buffers an operation's scratch names. */
#define AGMM_SCRATCH_MAX 8

/* The type of `op`, or NULL for an unknown value. */
const agmm_op_type *agmm_op_type_of(agmm_op op);
extern const agmm_op_type agmm_op_ag_matmul;
extern const agmm_op_type agmm_op_all_reduce;
extern const agmm_op_type agmm_op_matmul_reduce_scatter;
extern const agmm_op_type agmm_op_matmul_all_reduce;
extern const agmm_op_type agmm_op_all_reduce_rmsnorm;

/* Installs the checked descriptor `desc` of op into *shape, a plan on the caller's stack with
 * nothing allocated (ctx, op and desc set; no backend): what describe and scratch read before a
 * plan exists. Returns the bytes of the plan's symmetric input. Local. */
size_t agmm_op_shape(const agmm_op_type *type, agmm_ctx *ctx, const void *desc, agmm_plan *shape);

/* The implementation of b that would run in `world`, or NULL with why (why_len bytes) saying
 * why not ("skipped: needs NCCL, but ranks share a GPU ..."). */
const agmm_backend_impl *agmm_backend_usable(const agmm_backend *b, const agmm_world *world, char *why,
                                             size_t why_len);

/* "nccl, ce or fused": the names of op's backends, for messages. */
void agmm_backend_list(agmm_op op, char *buf, size_t len);

/* Whether a descriptor's backend name asks the library to choose (NULL or "auto": tune.c). */
int agmm_backend_is_auto(const char *name);

/* What op's backend names may be, for messages: "ag_matmul takes auto, nccl, ce or fused". */
void agmm_backend_takes(agmm_op op, char *buf, size_t len);

/* ---- memory known before allocating (memory.c) ---- */

/* A pool a rank allocates from: its GPU's memory, or host memory. */
typedef struct {
    uint64_t avail_bytes;  /* what it has left (UINT64_MAX: unknown) */
    int sharers;           /* ranks drawing on it, each asking alike: of this host (host memory, in
                              every world) or of this GPU */
    int gpu;               /* 1: GPU memory (cudaMemGetInfo); 0: host memory */
    char source[72];       /* what bounds avail_bytes, for messages */
} agmm_mem_pool;

/* The pool of the rank's device (device = 1: its GPU, or host memory in the CPU world) or of host
 * memory (device = 0). Local. */
void agmm_mem_pool_of(agmm_ctx *ctx, int device, agmm_mem_pool *pool);
/* 1 if every sharer of the pool can take per_rank bytes. */
int agmm_mem_fits(uint64_t per_rank, const agmm_mem_pool *pool);
/* "needs 61.0 GiB of host memory (15.3 GiB per rank x 4 ranks sharing it; PARTS), but 21.9 GiB
 * is available (MemAvailable)". */
size_t agmm_mem_shortfall_text(char *buf, size_t len, uint64_t per_rank, const char *parts, const agmm_mem_pool *pool);

/* ---- what every rank settles before a plan allocates anything (plan_agree.c) ---- */

/* Collective. Exchanges every rank's descriptor (as the operation describes it, with the backend
 * it resolved to) and memory verdict: the need of the plan (input_bytes of symmetric input and the
 * implementation's mem_need) against its pool. Ranks that disagree get AGMM_ERR_INVALID_ARG on
 * every rank, a rank short of memory AGMM_ERR_NO_MEMORY on every rank, each naming the ranks and
 * numbers; nothing is allocated then, and the ranks stay in step. */
agmm_status agmm_plan_agree(agmm_plan *plan, uint64_t input_bytes);

/* Collective, before a backend is chosen: every rank's request (the descriptor as the operation
 * describes it, with the backend it named, "auto" for NULL) and its own verdict on it so far
 * (`mine`: the descriptor check and the named backend's resolution; the detail in the rank's
 * error record). A rank that failed keeps its own error, and every other rank fails with the first
 * failing rank's status and message ("rank R: ..."); ranks
 * that asked for different things get AGMM_ERR_INVALID_ARG on every rank. So `auto`'s collective
 * choice (tune.c) starts only where every rank asked for it, and a bad descriptor on one rank is
 * an error on all, not a timeout. */
agmm_status agmm_plan_agree_request(agmm_ctx *ctx, agmm_op op, const void *desc, const char *backend,
                                    agmm_status mine);

/* Over a host exchange's slots (rank 0's at `all`, the others every `stride` bytes): the ranks
 * whose slot `same` says differs from rank 0's, as a bit set, with *first the lowest of them, and
 * in `who` their list with its verb ("rank 2 differs", "ranks 1 and 2 differ"; who_len bytes).
 * Every rank reaches the same answer from the same slots. */
uint64_t agmm_ranks_differing(const void *all, size_t stride, int nranks, int (*same)(const void *, const void *),
                              int *first, char *who, size_t who_len);

/* ---- the run check (run_check.c) ---- */

/* Collective, for plans of a world made with AGMM_CHECK_RUNS=1 (agmm_plan.check_runs), before a run
 * enqueues anything: exchanges every rank's verdict on its call (`mine`, the detail in its error
 * record) and what it is about to run (the plan's number and run, the input's symmetric allocation
 * and offset). A rank that refused keeps its own status and error, and the others fail with the
 * first refusing rank's ("run check: rank R refused its call: ..."); ranks that run different
 * plans, runs or inputs get AGMM_ERR_INVALID_ARG on every rank, naming rank 0's run, the first
 * other one and every rank that differs from rank 0. The ranks stay in step either way. */
agmm_status agmm_run_agree(agmm_plan *plan, agmm_status mine);

/* ---- fault points (ctx.c) ---- */

/* The fault point `at` of ctx's rank (core/fault.h): AGMM_SUCCESS to carry on, else the injected
 * failure, recorded in the rank's error record. */
agmm_status agmm_api_fault_point(agmm_ctx *ctx, const agmm_fault *f, agmm_fault_at at, uint64_t occurrence);

#endif
