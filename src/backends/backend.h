/* What a backend is, and the plan it fills (internal).
 *
 * A backend is one algorithm for one operation. Its file (src/backends/<op>_<name>.c) defines one
 * agmm_backend: its name (the only place the name is spelled in the library), what it does in one
 * line, its place in `auto`'s static order, and an implementation per class of device: `cpu` for
 * the CPU world (threads as ranks, src/cpu as the device), `gpu` for worlds on GPUs. table.c lists
 * every backend in one line each; the API layer (src/api) validates descriptors, resolves `auto`,
 * checks availability and calls the implementation's create/run/destroy.
 *
 * Adding a backend: its file (descriptor + implementations), its kernel if any (src/kernels), one
 * line in table.c, its tests. docs/architecture.md has the recipe. */
#ifndef AGMM_BACKENDS_BACKEND_H
#define AGMM_BACKENDS_BACKEND_H

#include <stdint.h>

#include "agmm.h"
#include "../core/error.h"
#include "../core/fault.h"
#include "../symm/symm.h"
#include "../world/world.h"

typedef struct agmm_plan agmm_plan;

/* What a plan allocates on its rank's device (host memory in the CPU world), in bytes, by kind:
 * plan creation adds its symmetric input and checks the sum against the memory available before
 * allocating anything (src/api/plan_agree.c). */
typedef struct {
    uint64_t symmetric_bytes;  /* symmetric buffers beyond the plan's input (scratch, signal pads) */
    uint64_t workspace_bytes;  /* GEMM workspaces, packing buffers, flags */
    uint64_t staging_bytes;    /* copies of the message (in-place staging, plain buffers) */
} agmm_mem_need;

/* One implementation of a backend, for one class of device. */
typedef struct {
    /* AGMM_CAP_* the world must have beyond the device class (AGMM_CAP_NCCL, ...). */
    unsigned needs;
    /* Fills plan->state; plan->input is allocated and zeroed already. Collective. Records errors
     * in the rank's error record. On failure plan.c calls destroy (which must cope with a
     * partly filled state). */
    agmm_status (*create)(agmm_plan *plan);
    /* Enqueues one run (blocking in the CPU world); plan->epoch has been bumped already and io
     * checked by the operation. `io` is the operation's io struct (agmm_ag_matmul_io, ...).
     * Collective. */
    agmm_status (*run)(agmm_plan *plan, const void *io, void *stream);
    /* Frees plan->state. Collective. Called once, also after a failed create. */
    void (*destroy)(agmm_plan *plan);
    /* Optional (NULL: nothing worth counting): adds to *need what create will allocate, as an
     * upper bound, from plan->desc alone (nothing is allocated yet; state is NULL). Local. */
    void (*mem_need)(const agmm_plan *plan, agmm_mem_need *need);
} agmm_backend_impl;

/* Classes of device a backend has implementations for (whether or not this build has them). */
enum { AGMM_DEVICE_CPU = 1u << 0, AGMM_DEVICE_GPU = 1u << 1 };

typedef struct agmm_backend {
    const char *name;              /* what descriptors name it by: "fused" */
    agmm_op op;
    const char *summary;           /* one line for --help, docs and agmm_backend_summary */
    unsigned devices;              /* AGMM_DEVICE_*: the worlds it runs on */
    /* auto's static order: where measuring is off, auto takes the available backend with the
     * smallest value; < 0: never chosen by auto. */
    int auto_order;
    const agmm_backend_impl *cpu;  /* set exactly when devices has AGMM_DEVICE_CPU */
    const agmm_backend_impl *gpu;  /* set when devices has AGMM_DEVICE_GPU and the build has CUDA */
    /* The backend's own limits, beyond its operation's (agmm_backend_limit, agmm.h); 0: none. */
    int captured_inputs;           /* AGMM_LIMIT_CAPTURED_INPUTS */
} agmm_backend;

struct agmm_plan {
    agmm_ctx *ctx;
    agmm_op op;
    const agmm_backend *backend;
    const agmm_backend_impl *impl; /* backend->cpu or backend->gpu, for this world */
    union {                        /* the operation's descriptor, validated; `backend` is NULL */
        agmm_ag_matmul_desc mm;    /* op == AGMM_OP_AG_MATMUL; splits resolved (>= 1) */
        agmm_all_reduce_desc ar;   /* op == AGMM_OP_ALL_REDUCE */
        agmm_matmul_reduce_scatter_desc rs; /* op == AGMM_OP_MATMUL_REDUCE_SCATTER */
        agmm_matmul_all_reduce_desc mar;    /* op == AGMM_OP_MATMUL_ALL_REDUCE */
        agmm_all_reduce_rmsnorm_desc arn;   /* op == AGMM_OP_ALL_REDUCE_RMSNORM */
    } desc;
    agmm_symm_buf *input;          /* symmetric: A_r (m x k bf16), the all_reduce vector or x_r (T x
                                      H bf16); NULL for the row-parallel matmuls (A_r comes in their
                                      io) */
    /* Where the current run reads its input (plan.c sets it before every run, and to the plan's
     * own from creation on): the plan's own buffer at offset 0, or the caller's symmetric buffer
     * holding io.input, at the offset io.input has on every rank (agmm_plan_in*). */
    const agmm_symm_buf *in;
    size_t in_offset;
    uint32_t epoch;                /* runs so far, this one included; equal on every rank */
    uint32_t number;               /* the host collectives its rank had entered when it was made:
                                      the same plan's on every rank, another plan's elsewhere */
    int check_runs;                /* AGMM_CHECK_RUNS=1 as rank 0's world had it (run_check.c) */
    agmm_fault fault;              /* AGMM_FAULT as it was at plan creation (its run point) */
    void *state;                   /* the implementation's own */
};

/* This run's input on this rank, and on rank r as this rank addresses it. */
static inline void *agmm_plan_in(const agmm_plan *p)
{
    return (char *)p->in->local + p->in_offset;
}
static inline void *agmm_plan_in_peer(const agmm_plan *p, int r)
{
    return (char *)p->in->peer[r] + p->in_offset;
}

/* The table (table.c). */
/* Backend `index` of `op` in table order, or NULL past the end. */
const agmm_backend *agmm_backend_at(agmm_op op, int index);
/* The backend of `op` called `name`, or NULL. */
const agmm_backend *agmm_backend_find(agmm_op op, const char *name);
/* Every entry of the table, whatever its op (for the table's own tests): NULL past the end. */
const agmm_backend *agmm_backend_entry(int index);

/* The implementation of b for a world with capabilities `caps`, or NULL where b has none for its
 * device class. */
static inline const agmm_backend_impl *agmm_backend_impl_for(const agmm_backend *b, unsigned caps)
{
    return (caps & AGMM_CAP_GPU) ? b->gpu : b->cpu;
}

#endif
