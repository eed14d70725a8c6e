/* The API layer's internals: operations as types, and the choice of a backend (internal to
 * src/api).
 *
 * An operation (agmm_op) is a descriptor type, an io type and their checks: op_ag_matmul.c,
 * op_all_reduce.c. plan.c drives every operation through this one interface, so a third
 * operation is a new op_<name>.c, its descriptor in the plan's union (src/backends/backend.h),
 * its public create/run functions, and its backends. */
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
     * the bytes of the plan's symmetric input. */
    size_t (*install)(agmm_plan *plan, const void *desc);
    /* The io's input pointer (NULL: the plan's own buffer). */
    const void *(*input_of)(const void *io);
    /* Checks one run's io against the plan (pointers given, alignment, overlaps, reserved); the
     * run's input (plan->in) is resolved already. */
    agmm_status (*check_io)(const agmm_plan *plan, const void *io, agmm_error *err);
} agmm_op_type;

/* The type of `op`, or NULL for an unknown value. */
const agmm_op_type *agmm_op_type_of(agmm_op op);
extern const agmm_op_type agmm_op_ag_matmul;
extern const agmm_op_type agmm_op_all_reduce;

/* The implementation of b that would run in `world`, or NULL with why (why_len bytes) saying
 * why not ("skipped: needs NCCL, but ranks share a GPU ..."). */
const agmm_backend_impl *agmm_backend_usable(const agmm_backend *b, const agmm_world *world, char *why,
                                             size_t why_len);

/* "nccl, ce or fused": the names of op's backends, for messages. */
void agmm_backend_list(agmm_op op, char *buf, size_t len);

#endif
