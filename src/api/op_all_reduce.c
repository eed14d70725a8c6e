/* The all_reduce operation as a type (api.h): descriptor, io, their checks, and what `auto` needs. */
#include <string.h>

#include "api.h"
#include "../core/text.h"
#include "../core/validate.h"

static agmm_status check(const void *desc, int nranks, agmm_error *err)
{
    return agmm_check_all_reduce(desc, err);
}

static const char *backend_of(const void *desc)
{
    return ((const agmm_all_reduce_desc *)desc)->backend;
}

static size_t install(agmm_plan *plan, const void *desc)
{
    agmm_all_reduce_desc *d = &plan->desc.ar;
    *d = *(const agmm_all_reduce_desc *)desc;
    d->backend = NULL;
    return (size_t)d->n * agmm_dtype_bytes(d->dtype);
}

static const void *input_of(const void *io)
{
    return ((const agmm_all_reduce_io *)io)->input;
}

static agmm_status check_io(const agmm_plan *plan, const void *vio, agmm_error *err)
{
    const agmm_all_reduce_io *io = vio;
    if (io->out == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "all_reduce needs io->out (it may equal agmm_plan_input)");
    agmm_status st = agmm_check_reserved(io->reserved, sizeof io->reserved, "all_reduce io", err);
    if (st != AGMM_SUCCESS)
        return st;
    size_t esize = agmm_dtype_bytes(plan->desc.ar.dtype);
    uintptr_t out = (uintptr_t)io->out, in = (uintptr_t)agmm_plan_in(plan), bytes = (uintptr_t)plan->desc.ar.n * esize;
    if (out % esize != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "io->out=%p is not aligned to its %zu-byte elements", io->out,
                         esize);
    if (out != in && agmm_overlap(io->out, bytes, agmm_plan_in(plan), bytes))
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "io->out=%p overlaps the run's input %p without equalling it (in place needs out == input)",
                         io->out, agmm_plan_in(plan));
    return AGMM_SUCCESS;
}

static size_t describe(const agmm_plan *plan, char *buf, size_t len)
{
    const agmm_all_reduce_desc *d = &plan->desc.ar;
    return agmm_format(buf, len, "n=%lld dtype=%s", (long long)d->n, agmm_dtype_name(d->dtype));
}

/* The output vector (measured out of place). */
static int scratch(const agmm_plan *plan, size_t bytes[])
{
    bytes[0] = (size_t)plan->desc.ar.n * agmm_dtype_bytes(plan->desc.ar.dtype);
    return 1;
}

static agmm_status plan_with(agmm_plan **out, agmm_ctx *ctx, const void *desc, const char *backend)
{
    agmm_all_reduce_desc d = *(const agmm_all_reduce_desc *)desc;
    d.backend = backend;
    return agmm_plan_all_reduce(out, ctx, &d);
}

static agmm_status run_scratch(agmm_plan *plan, void *const *buf, void *stream)
{
    agmm_all_reduce_io io = {.out = buf[0]};
    return agmm_all_reduce(plan, &io, stream);
}

const agmm_op_type agmm_op_all_reduce = {
    .op = AGMM_OP_ALL_REDUCE,
    .check = check,
    .backend_of = backend_of,
    .install = install,
    .input_of = input_of,
    .check_io = check_io,
    .describe = describe,
    .scratch = scratch,
    .plan_with = plan_with,
    .run_scratch = run_scratch,
};
