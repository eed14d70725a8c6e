/* What a backend provides, and the plan it fills (internal). One file per backend implements
 * one agmm_backend_ops; registry.c lists them and picks one per world kind. */
#ifndef AGMM_OPS_BACKEND_H
#define AGMM_OPS_BACKEND_H

#include <stdint.h>
#include "agmm.h"
#include "../world/world.h"
#include "../symm/symm.h"

typedef enum { AGMM_OP_AG_MATMUL = 0, AGMM_OP_ALL_REDUCE } agmm_op;

struct agmm_plan;

typedef struct agmm_backend_ops {
    agmm_backend id;
    agmm_op op;
    int cpu;     /* 1: runs in the CPU world; 0: runs on GPUs */
    int nccl;    /* needs an NCCL communicator (not available when ranks share a GPU) */
    /* Fills plan->impl; plan->input is allocated already. Collective. Records errors in ctx->err. */
    agmm_status (*create)(struct agmm_plan *plan);
    /* Enqueues one run; plan->epoch has been bumped already. Collective. */
    agmm_status (*run)(struct agmm_plan *plan, const agmm_io *io, void *stream);
    /* Frees plan->impl. Collective. NULL-safe on impl. */
    void (*destroy)(struct agmm_plan *plan);
} agmm_backend_ops;

struct agmm_plan {
    agmm_ctx *ctx;
    const agmm_backend_ops *ops;
    agmm_op op;
    agmm_ag_matmul_desc mm;    /* op == AGMM_OP_AG_MATMUL; splits resolved (>= 1) */
    agmm_all_reduce_desc ar;   /* op == AGMM_OP_ALL_REDUCE */
    agmm_symm_buf *input;      /* symmetric: A_r (m x k bf16) or the all_reduce vector */
    uint32_t epoch;            /* runs so far, this one included; equal on every rank */
    void *impl;
};

/* The backend that runs `id` for `op` in this world, or NULL. AUTO is resolved by the caller. */
const agmm_backend_ops *agmm_backend_find(agmm_op op, agmm_backend id, int cpu_world);

#endif
