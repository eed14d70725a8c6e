/* The all_reduce_rmsnorm operation as a type (api.h): descriptor, io, and their checks. */
#include <string.h>

#include "api.h"
#include "../core/text.h"
#include "../core/validate.h"

static agmm_status check(const void *desc, int nranks, agmm_error *err)
{
    return agmm_check_all_reduce_rmsnorm(desc, err);
}

static const char *backend_of(const void *desc)
{
    return ((const agmm_all_reduce_rmsnorm_desc *)desc)->backend;
}

static size_t install(agmm_plan *plan, const void *desc)
{
    agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    *d = *(const agmm_all_reduce_rmsnorm_desc *)desc;
    d->backend = NULL;
    return (size_t)(d->tokens * d->hidden) * 2;
}

static const void *input_of(const void *io)
{
    return ((const agmm_all_reduce_rmsnorm_io *)io)->input;
}

static agmm_status check_io(const agmm_plan *plan, const void *vio, agmm_error *err)
{
    const agmm_all_reduce_rmsnorm_io *io = vio;
    if (io->y == NULL || io->residual_out == NULL || io->gamma == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "all_reduce_rmsnorm needs io->y, io->residual_out and io->gamma (y=%p residual_out=%p "
                         "gamma=%p); bias and residual may be NULL",
                         io->y, io->residual_out, io->gamma);
    agmm_status st = agmm_check_reserved(io->reserved, sizeof io->reserved, "all_reduce_rmsnorm io", err);
    if (st != AGMM_SUCCESS)
        return st;
    /* The kernels move whole 16-byte vectors of a row; the CPU world needs bf16 elements aligned. */
    const size_t align = (agmm_ctx_info(plan->ctx)->caps & AGMM_CAP_GPU) ? 16 : 2;
    if (((uintptr_t)io->y | (uintptr_t)io->residual_out | (uintptr_t)io->gamma | (uintptr_t)io->bias |
         (uintptr_t)io->residual) % align != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "io->y=%p, io->residual_out=%p, io->gamma=%p, io->bias=%p and io->residual=%p must be "
                         "%zu-byte aligned",
                         io->y, io->residual_out, io->gamma, io->bias, io->residual, align);
    const size_t rows = (size_t)(plan->desc.arn.tokens * plan->desc.arn.hidden) * 2,
                 row = (size_t)plan->desc.arn.hidden * 2;
    /* The outputs are written while peers read the input and this rank reads gamma, bias and
     * residual. residual_out == residual is safe: an element of residual is read before it is
     * written, by the thread that writes it, or not read by this rank at all (two_shot). */
    const struct {
        const void *p;
        size_t bytes;
        const char *name;
    } other[] = {{agmm_plan_in(plan), rows, "the run's input"}, {io->gamma, row, "io->gamma"},
                 {io->bias, row, "io->bias"}, {io->residual, rows, "io->residual"},
                 {io->residual_out, rows, "io->residual_out"}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        if (agmm_overlap(io->y, rows, other[i].p, other[i].bytes))
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                             "io->y=%p overlaps %s (%p): the outputs must not overlap the input, gamma, bias, "
                             "residual or each other",
                             io->y, other[i].name, other[i].p);
        if (i < 4 && agmm_overlap(io->residual_out, rows, other[i].p, other[i].bytes) &&
            !(i == 3 && io->residual_out == io->residual))
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "io->residual_out=%p overlaps %s (%p)%s", io->residual_out,
                             other[i].name, other[i].p,
                             i == 3 ? " without equalling it (in place needs residual_out == residual)"
                                    : ": the outputs must not overlap the input, gamma or bias");
    }
    return AGMM_SUCCESS;
}

/* eps as the backends use it: the fp32 value, in as many digits as tell fp32 values apart. */
static size_t describe(const agmm_plan *plan, char *buf, size_t len)
{
    const agmm_all_reduce_rmsnorm_desc *d = &plan->desc.arn;
    return agmm_format(buf, len, "tokens=%lld hidden=%lld eps=%.9g", (long long)d->tokens, (long long)d->hidden,
                       (double)(float)d->eps);
}

/* y, residual_out, gamma, bias, residual: auto measures the whole fused step, bias and residual
 * included. */
static int scratch(const agmm_plan *plan, size_t bytes[])
{
    const size_t rows = (size_t)(plan->desc.arn.tokens * plan->desc.arn.hidden) * 2,
                 row = (size_t)plan->desc.arn.hidden * 2;
    bytes[0] = bytes[1] = bytes[4] = rows;
    bytes[2] = bytes[3] = row;
    return 5;
}

static agmm_status plan_with(agmm_plan **out, agmm_ctx *ctx, const void *desc, const char *backend)
{
    agmm_all_reduce_rmsnorm_desc d = *(const agmm_all_reduce_rmsnorm_desc *)desc;
    d.backend = backend;
    return agmm_plan_all_reduce_rmsnorm(out, ctx, &d);
}

static agmm_status run_scratch(agmm_plan *plan, void *const *buf, void *stream)
{
    agmm_all_reduce_rmsnorm_io io = {.y = buf[0], .residual_out = buf[1], .gamma = buf[2], .bias = buf[3],
                                     .residual = buf[4]};
    return agmm_all_reduce_rmsnorm(plan, &io, stream);
}

const agmm_op_type agmm_op_all_reduce_rmsnorm = {
    .op = AGMM_OP_ALL_REDUCE_RMSNORM,
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
