/* The matmul_all_reduce operation as a type (api.h): descriptor, io, their checks and what
 * `auto` needs. What it shares with matmul_reduce_scatter is in op_matmul_reduce.h. */
#include "op_matmul_reduce.h"

static agmm_status check(const void *vdesc, int nranks, agmm_error *err)
{
    const agmm_matmul_all_reduce_desc *d = vdesc;
    return agmm_op_mr_check(AGMM_OP_MATMUL_ALL_REDUCE, d->m, d->n, d->k, d->b_layout, d->reserved,
                            sizeof d->reserved, err);
}

static const char *backend_of(const void *desc)
{
    return ((const agmm_matmul_all_reduce_desc *)desc)->backend;
}

static size_t install(agmm_plan *plan, const void *desc)
{
    plan->desc.mar = *(const agmm_matmul_all_reduce_desc *)desc;
    plan->desc.mar.backend = NULL;
    return 0; /* no symmetric input: A_r is the caller's, read by this rank alone */
}

static agmm_status check_io(const agmm_plan *plan, const void *vio, agmm_error *err)
{
    const agmm_matmul_all_reduce_io *io = vio;
    const agmm_matmul_all_reduce_desc *d = &plan->desc.mar;
    if (io->a == NULL || io->b == NULL || io->c == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "matmul_all_reduce needs io->a, io->b and io->c (a=%p b=%p c=%p)",
                         io->a, io->b, io->c);
    agmm_status st = agmm_check_reserved(io->reserved, sizeof io->reserved, "matmul_all_reduce io", err);
    if (st != AGMM_SUCCESS)
        return st;
    return agmm_op_mr_check_buffers(plan, d->m, d->n, d->k, io->a, io->b, io->c, "c", (size_t)(d->m * d->n) * 2,
                                    err);
}

static size_t describe(const agmm_plan *plan, char *buf, size_t len)
{
    const agmm_matmul_all_reduce_desc *d = &plan->desc.mar;
    return agmm_op_mr_describe(buf, len, d->m, d->n, d->k, d->b_layout);
}

/* A_r, B_r and S. */
static int scratch(const agmm_plan *plan, size_t bytes[])
{
    const agmm_matmul_all_reduce_desc *d = &plan->desc.mar;
    return agmm_op_mr_scratch(d->m, d->n, d->k, d->m, bytes);
}

static agmm_status plan_with(agmm_plan **out, agmm_ctx *ctx, const void *desc, const char *backend)
{
    agmm_matmul_all_reduce_desc d = *(const agmm_matmul_all_reduce_desc *)desc;
    d.backend = backend;
    return agmm_plan_matmul_all_reduce(out, ctx, &d);
}

static agmm_status run_scratch(agmm_plan *plan, void *const *buf, void *stream)
{
    agmm_matmul_all_reduce_io io = {.a = buf[0], .b = buf[1], .c = buf[2]};
    return agmm_matmul_all_reduce(plan, &io, stream);
}

const agmm_op_type agmm_op_matmul_all_reduce = {
    .op = AGMM_OP_MATMUL_ALL_REDUCE,
    .check = check,
    .backend_of = backend_of,
    .install = install,
    .input_of = agmm_op_mr_input_of,
    .check_io = check_io,
    .describe = describe,
    .scratch = scratch,
    .plan_with = plan_with,
    .run_scratch = run_scratch,
    .limit = agmm_op_mr_limit,
};
