/* The ag_matmul operation as a type (api.h): descriptor, io, their checks, and what `auto` needs. */
#include <string.h>

#include "api.h"
#include "../core/text.h"
#include "../core/validate.h"

static agmm_status check(const void *desc, int nranks, agmm_error *err)
{
    return agmm_check_ag_matmul(desc, nranks, err);
}

static const char *backend_of(const void *desc)
{
    return ((const agmm_ag_matmul_desc *)desc)->backend;
}

static size_t install(agmm_plan *plan, const void *desc)
{
    agmm_ag_matmul_desc *d = &plan->desc.mm;
    *d = *(const agmm_ag_matmul_desc *)desc;
    d->backend = NULL;
    if (d->splits == 0)
        d->splits = 1;
    return (size_t)(d->m * d->k) * 2;
}

static const void *input_of(const void *io)
{
    return ((const agmm_ag_matmul_io *)io)->input;
}

static agmm_status check_io(const agmm_plan *plan, const void *vio, agmm_error *err)
{
    const agmm_ag_matmul_io *io = vio;
    if (io->b == NULL || io->a_gathered == NULL || io->c == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "ag_matmul needs io->b, io->a_gathered and io->c (b=%p a_gathered=%p c=%p)", io->b,
                         io->a_gathered, io->c);
    agmm_status st = agmm_check_reserved(io->reserved, sizeof io->reserved, "ag_matmul io", err);
    if (st != AGMM_SUCCESS)
        return st;
    /* Every GPU GEMM (cuBLASLt's plans, the engine's TMA maps) is set up for 16-byte aligned
     * operands; the CPU world reads bf16 elements. */
    const size_t align = (agmm_ctx_info(plan->ctx)->caps & AGMM_CAP_GPU) ? 16 : 2;
    if (((uintptr_t)io->b | (uintptr_t)io->a_gathered | (uintptr_t)io->c) % align != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "io->b=%p, io->a_gathered=%p and io->c=%p must be %zu-byte aligned",
                         io->b, io->a_gathered, io->c, align);
    /* The outputs are written while this rank reads B and peers read the input. */
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    const size_t rows = (size_t)(agmm_ctx_info(plan->ctx)->nranks * d->m);
    const struct {
        const void *p;
        size_t bytes;
        const char *name;
    } buf[] = {{io->a_gathered, rows * (size_t)d->k * 2, "io->a_gathered"},
               {io->c, rows * (size_t)d->n * 2, "io->c"},
               {io->b, (size_t)(d->k * d->n) * 2, "io->b"},
               {agmm_plan_in(plan), (size_t)(d->m * d->k) * 2, "the run's input"}};
    for (int o = 0; o < 2; o++)
        for (int i = o + 1; i < 4; i++)
            if (agmm_overlap(buf[o].p, buf[o].bytes, buf[i].p, buf[i].bytes))
                return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                                 "%s=%p (%zu bytes) overlaps %s=%p (%zu bytes): the outputs must not overlap each "
                                 "other, B or the input",
                                 buf[o].name, buf[o].p, buf[o].bytes, buf[i].name, buf[i].p, buf[i].bytes);
    return AGMM_SUCCESS;
}

static size_t describe(const agmm_plan *plan, char *buf, size_t len)
{
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    return agmm_format(buf, len, "M=%lld N=%lld K=%lld b_layout=%s splits=%d", (long long)d->m, (long long)d->n,
                       (long long)d->k, d->b_layout == AGMM_LAYOUT_ROW_MAJOR ? "row" : "col", d->splits);
}

/* B (k x n), the gathered A ((W*m) x k) and C ((W*m) x n), bf16. */
static int scratch(const agmm_plan *plan, size_t bytes[])
{
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    const size_t nranks = (size_t)agmm_ctx_info(plan->ctx)->nranks;
    bytes[0] = (size_t)(d->k * d->n) * 2;
    bytes[1] = nranks * (size_t)(d->m * d->k) * 2;
    bytes[2] = nranks * (size_t)(d->m * d->n) * 2;
    return 3;
}

static agmm_status plan_with(agmm_plan **out, agmm_ctx *ctx, const void *desc, const char *backend)
{
    agmm_ag_matmul_desc d = *(const agmm_ag_matmul_desc *)desc;
    d.backend = backend;
    return agmm_plan_ag_matmul(out, ctx, &d);
}

static agmm_status run_scratch(agmm_plan *plan, void *const *buf, void *stream)
{
    agmm_ag_matmul_io io = {.b = buf[0], .a_gathered = buf[1], .c = buf[2]};
    return agmm_ag_matmul(plan, &io, stream);
}

static int64_t limit(agmm_limit what)
{
    switch (what) {
    case AGMM_LIMIT_K_MULTIPLE:
    case AGMM_LIMIT_N_MULTIPLE_ROW_B: return AGMM_AG_MATMUL_ROW_MULTIPLE;
    case AGMM_LIMIT_MAX_SPLITS: return AGMM_AG_MATMUL_MAX_SPLITS;
    default: return 0;
    }
}

const agmm_op_type agmm_op_ag_matmul = {
    .op = AGMM_OP_AG_MATMUL,
    .check = check,
    .backend_of = backend_of,
    .install = install,
    .input_of = input_of,
    .check_io = check_io,
    .describe = describe,
    .scratch = scratch,
    .plan_with = plan_with,
    .run_scratch = run_scratch,
    .limit = limit,
};
