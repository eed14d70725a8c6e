/* The matmul_reduce_scatter operation as a type (api.h): descriptor, io, their checks, what
 * `auto` needs, and the public row split (agmm.h). What it shares with matmul_all_reduce is in
 * op_matmul_reduce.h. */
#include "op_matmul_reduce.h"

int64_t agmm_matmul_reduce_scatter_rows(int64_t m, int nranks, int rank, int64_t *first_row)
{
    if (m < 1 || m > AGMM_MAX_ELEMS || nranks < 1 || nranks > AGMM_MAX_RANKS || rank < 0 || rank >= nranks)
        return -1;
    return agmm_split_rows(m, nranks, rank, first_row);
}

static agmm_status check(const void *vdesc, int nranks, agmm_error *err)
{
    const agmm_matmul_reduce_scatter_desc *d = vdesc;
    return agmm_op_mr_check(AGMM_OP_MATMUL_REDUCE_SCATTER, d->m, d->n, d->k, d->b_layout, d->reserved,
                            sizeof d->reserved, err);
}

static const char *backend_of(const void *desc)
{
    return ((const agmm_matmul_reduce_scatter_desc *)desc)->backend;
}

static size_t install(agmm_plan *plan, const void *desc)
{
    plan->desc.rs = *(const agmm_matmul_reduce_scatter_desc *)desc;
    plan->desc.rs.backend = NULL;
    return 0; /* no symmetric input: A_r is the caller's, read by this rank alone */
}

static agmm_status check_io(const agmm_plan *plan, const void *vio, agmm_error *err)
{
    const agmm_matmul_reduce_scatter_io *io = vio;
    const agmm_matmul_reduce_scatter_desc *d = &plan->desc.rs;
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    const int64_t rows = agmm_split_rows(d->m, ri->nranks, ri->rank, NULL);
    if (io->a == NULL || io->b == NULL || (io->out == NULL && rows > 0))
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "matmul_reduce_scatter needs io->a, io->b and io->out (a=%p b=%p out=%p; out may be NULL only "
                         "on a rank that gets no rows, and rank %d gets %lld)",
                         io->a, io->b, io->out, ri->rank, (long long)rows);
    agmm_status st = agmm_check_reserved(io->reserved, sizeof io->reserved, "matmul_reduce_scatter io", err);
    if (st != AGMM_SUCCESS)
        return st;
    return agmm_op_mr_check_buffers(plan, d->m, d->n, d->k, io->a, io->b, io->out, "out",
                                    (size_t)(rows * d->n) * 2, err);
}

static size_t describe(const agmm_plan *plan, char *buf, size_t len)
{
    const agmm_matmul_reduce_scatter_desc *d = &plan->desc.rs;
    return agmm_op_mr_describe(buf, len, d->m, d->n, d->k, d->b_layout);
}

/* A_r, B_r and this rank's rows of S (none: NULL). */
static int scratch(const agmm_plan *plan, size_t bytes[])
{
    const agmm_matmul_reduce_scatter_desc *d = &plan->desc.rs;
    return agmm_op_mr_scratch(d->m, d->n, d->k, agmm_split_rows(d->m, agmm_ctx_info(plan->ctx)->nranks, agmm_ctx_info(plan->ctx)->rank, NULL), bytes);
}

static agmm_status plan_with(agmm_plan **out, agmm_ctx *ctx, const void *desc, const char *backend)
{
    agmm_matmul_reduce_scatter_desc d = *(const agmm_matmul_reduce_scatter_desc *)desc;
    d.backend = backend;
    return agmm_plan_matmul_reduce_scatter(out, ctx, &d);
}

static agmm_status run_scratch(agmm_plan *plan, void *const *buf, void *stream)
{
    agmm_matmul_reduce_scatter_io io = {.a = buf[0], .b = buf[1], .out = buf[2]};
    return agmm_matmul_reduce_scatter(plan, &io, stream);
}

const agmm_op_type agmm_op_matmul_reduce_scatter = {
    .op = AGMM_OP_MATMUL_REDUCE_SCATTER,
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
