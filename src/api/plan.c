/* The public plan API for every operation: descriptor checks (the operation's type), the choice
 * of a backend (by name, or `auto`: tune.c), the symmetric input buffer, epochs, and the calls
 * into the backend's implementation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "tune.h"
#ifdef AGMM_HAVE_CUDA
#include "../world/rank_gpu.h"
#endif

const agmm_op_type *agmm_op_type_of(agmm_op op)
{
    switch (op) {
    case AGMM_OP_AG_MATMUL: return &agmm_op_ag_matmul;
    case AGMM_OP_ALL_REDUCE: return &agmm_op_all_reduce;
    case AGMM_OP_MATMUL_REDUCE_SCATTER: return &agmm_op_matmul_reduce_scatter;
    case AGMM_OP_MATMUL_ALL_REDUCE: return &agmm_op_matmul_all_reduce;
    case AGMM_OP_ALL_REDUCE_RMSNORM: return &agmm_op_all_reduce_rmsnorm;
    case AGMM_OP_NONE: break;
    }
    return NULL;
}

size_t agmm_op_shape(const agmm_op_type *type, agmm_ctx *ctx, const void *desc, agmm_plan *shape)
{
    memset(shape, 0, sizeof *shape);
    shape->ctx = ctx;
    shape->op = type->op;
    return type->install(shape, desc);
}

/* The backend named in the descriptor; NULL or "auto": tune.c chooses, every rank alike
 * (collective: it may measure the candidates). */
static agmm_status resolve(agmm_ctx *ctx, agmm_op op, const void *desc, const char *name, const agmm_backend **out)
{
    agmm_error *err = agmm_ctx_err(ctx);
    if (agmm_backend_is_auto(name))
        return agmm_tune_choose(ctx, op, desc, out);
    const agmm_backend *b = agmm_backend_find(op, name);
    if (b == NULL) {
        char takes[320];
        agmm_backend_takes(op, takes, sizeof takes);
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "backend=%s: %s", name, takes);
    }
    char why[AGMM_ERROR_LEN];
    if (agmm_backend_usable(b, agmm_ctx_world(ctx), why, sizeof why) == NULL)
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "%s", why);
    *out = b;
    return AGMM_SUCCESS;
}

static agmm_status plan_create(agmm_plan **out, agmm_ctx *ctx, agmm_op op, const void *desc)
{
    if (ctx == NULL)
        return AGMM_ERR_INVALID_ARG;
    agmm_error *err = agmm_ctx_err(ctx);
    agmm_error_clear(err);
    if (out == NULL) /* agmm.h: an INVALID_ARG names its argument in agmm_last_error */
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "plan is NULL");
    *out = NULL;
    if (desc == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "desc is NULL");
    const agmm_op_type *type = agmm_op_type_of(op);
    agmm_status st = type->check(desc, agmm_ctx_info(ctx)->nranks, err);
    const char *name = st == AGMM_SUCCESS ? type->backend_of(desc) : NULL;
    const int is_auto = agmm_backend_is_auto(name);
    const agmm_backend *b = NULL;
    if (st == AGMM_SUCCESS && !is_auto)
        st = resolve(ctx, op, desc, name, &b);
    /* Every rank asked for the same, and nobody failed, before anything collective starts. */
    st = agmm_plan_agree_request(ctx, op, desc, is_auto ? "auto" : name, st);
    if (st == AGMM_SUCCESS && is_auto)
        st = resolve(ctx, op, desc, name, &b);
    if (st != AGMM_SUCCESS)
        return st;
    agmm_plan *p = calloc(1, sizeof *p);
    if (p == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "plan allocation failed");
    p->ctx = ctx;
    p->op = op;
    p->backend = b;
    p->impl = agmm_backend_impl_for(b, agmm_ctx_info(ctx)->caps);
    size_t input_bytes = type->install(p, desc);
    /* AGMM_FAULT's plan point, then what every rank must settle before anyone allocates. */
    st = agmm_fault_from_env(agmm_ctx_info(ctx)->nranks, &p->fault, err);
    if (st == AGMM_SUCCESS)
        st = agmm_api_fault_point(ctx, &p->fault, AGMM_FAULT_AT_PLAN, 0);
    if (st == AGMM_SUCCESS)
        st = agmm_plan_agree(p, input_bytes);
    if (st == AGMM_SUCCESS && input_bytes > 0)
        st = agmm_symm_alloc(ctx, input_bytes, &p->input);
    /* Until a run says otherwise, the run's input is the plan's own (create may set up for it). */
    p->in = p->input;
    p->in_offset = 0;
    if (st == AGMM_SUCCESS) /* a backend that failed on one rank fails the plan on every rank */
        st = agmm_host_agree(ctx, p->impl->create(p));
    if (st != AGMM_SUCCESS) {
        agmm_plan_destroy(p);
        return st;
    }
    *out = p;
    return AGMM_SUCCESS;
}

agmm_status agmm_plan_ag_matmul(agmm_plan **out, agmm_ctx *ctx, const agmm_ag_matmul_desc *desc)
{
    return plan_create(out, ctx, AGMM_OP_AG_MATMUL, desc);
}

agmm_status agmm_plan_all_reduce(agmm_plan **out, agmm_ctx *ctx, const agmm_all_reduce_desc *desc)
{
    return plan_create(out, ctx, AGMM_OP_ALL_REDUCE, desc);
}

agmm_status agmm_plan_matmul_reduce_scatter(agmm_plan **out, agmm_ctx *ctx,
                                            const agmm_matmul_reduce_scatter_desc *desc)
{
    return plan_create(out, ctx, AGMM_OP_MATMUL_REDUCE_SCATTER, desc);
}

agmm_status agmm_plan_matmul_all_reduce(agmm_plan **out, agmm_ctx *ctx, const agmm_matmul_all_reduce_desc *desc)
{
    return plan_create(out, ctx, AGMM_OP_MATMUL_ALL_REDUCE, desc);
}

agmm_status agmm_plan_all_reduce_rmsnorm(agmm_plan **out, agmm_ctx *ctx, const agmm_all_reduce_rmsnorm_desc *desc)
{
    return plan_create(out, ctx, AGMM_OP_ALL_REDUCE_RMSNORM, desc);
}

void agmm_plan_destroy(agmm_plan *p)
{
    if (p == NULL)
        return;
    p->impl->destroy(p);
    agmm_symm_free(p->ctx, p->input);
    free(p);
}

agmm_op agmm_plan_op(const agmm_plan *p) { return p ? p->op : AGMM_OP_NONE; }
const char *agmm_plan_backend(const agmm_plan *p) { return p ? p->backend->name : ""; }
void *agmm_plan_input(agmm_plan *p) { return p && p->input ? p->input->local : NULL; }

/* Every check that can refuse a run, local to this rank: the io, the input, the rank's state and
 * (GPUs) its stream, then the wait that orders it after the rank's previous run (no refusal past
 * this point touches the device). */
static agmm_status run_refusal(agmm_plan *p, agmm_op op, const void *io, void *stream)
{
    agmm_ctx *ctx = p->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    if (p->op != op)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "plan is for %s: run it with agmm_%s, not agmm_%s",
                         agmm_op_name(p->op), agmm_op_name(p->op), agmm_op_name(op));
    if (io == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "io is NULL");
    const agmm_op_type *type = agmm_op_type_of(op);
    const void *input = type->input_of(io);
    if (input != NULL) {
        const agmm_symm_buf *buf = agmm_symm_user_find(ctx, input, p->input->bytes);
        if (buf == NULL)
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                             "io->input=%p: not %zu bytes inside one buffer from agmm_symmetric_alloc of rank %d",
                             input, p->input->bytes, agmm_ctx_info(ctx)->rank);
        if ((uintptr_t)input % 16 != 0)
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "io->input=%p must be 16-byte aligned", input);
        p->in = buf;
        p->in_offset = (size_t)((uintptr_t)input - (uintptr_t)buf->local);
    }
    agmm_status st = type->check_io(p, io, err);
    if (st != AGMM_SUCCESS)
        return st;
    const agmm_error *oos = agmm_ctx_out_of_step(ctx);
    if (oos->status != AGMM_SUCCESS)
        return AGMM_FAIL(err, oos->status,
                         "rank %d is out of step with its peers since an earlier run failed (%s): destroy its plans "
                         "and context",
                         agmm_ctx_info(ctx)->rank, oos->msg);
#ifdef AGMM_HAVE_CUDA
    if (agmm_ctx_gpu(ctx) != NULL) {
        /* A wait that expired in an earlier run leaves the ranks out of step: report it, run nothing. */
        st = agmm_gpu_check_dev_error(ctx);
        if (st == AGMM_SUCCESS)
            st = agmm_gpu_check_stream(ctx, (cudaStream_t)stream);
        /* Runs of a rank follow each other on the device, whatever streams they are on (agmm.h). */
        if (st == AGMM_SUCCESS)
            st = agmm_gpu_order_run(ctx, (cudaStream_t)stream);
    }
#else
    (void)stream;
#endif
    return st;
}

static agmm_status plan_run(agmm_plan *p, agmm_op op, const void *io, void *stream)
{
    if (p == NULL)
        return AGMM_ERR_INVALID_ARG;
    agmm_ctx *ctx = p->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    agmm_error_clear(err); /* agmm_last_error describes this call, not an older one */
    /* Until the io says otherwise, the run's input is the plan's own. */
    p->in = p->input;
    p->in_offset = 0;
    agmm_status st = run_refusal(p, op, io, stream);
    /* AGMM_CHECK_RUNS=1: every rank's verdict and what it runs, compared before anything is
     * enqueued (run_check.c); a refusal anywhere is then a refusal everywhere, in step. */
    if (p->check_runs)
        st = agmm_run_agree(p, st);
    if (st != AGMM_SUCCESS)
        return st;
    /* Every check that can refuse a call is above: from here on the ranks' epochs and barrier
     * counts move together, and a failure leaves this rank out of step for good (a later barrier
     * could otherwise pass on a peer's older arrival). */
    p->epoch++;
    st = agmm_api_fault_point(ctx, &p->fault, AGMM_FAULT_AT_RUN, p->epoch);
    if (st == AGMM_SUCCESS)
        st = p->impl->run(p, io, stream);
    if (st != AGMM_SUCCESS) {
        /* A run that timed out in a world of processes may have waited for one that died: say so. */
        agmm_world_note_gone(ctx);
        *agmm_ctx_out_of_step(ctx) = *err;
    }
    return st;
}

agmm_status agmm_ag_matmul(agmm_plan *plan, const agmm_ag_matmul_io *io, void *stream)
{
    return plan_run(plan, AGMM_OP_AG_MATMUL, io, stream);
}

agmm_status agmm_all_reduce(agmm_plan *plan, const agmm_all_reduce_io *io, void *stream)
{
    return plan_run(plan, AGMM_OP_ALL_REDUCE, io, stream);
}

agmm_status agmm_matmul_reduce_scatter(agmm_plan *plan, const agmm_matmul_reduce_scatter_io *io, void *stream)
{
    return plan_run(plan, AGMM_OP_MATMUL_REDUCE_SCATTER, io, stream);
}

agmm_status agmm_matmul_all_reduce(agmm_plan *plan, const agmm_matmul_all_reduce_io *io, void *stream)
{
    return plan_run(plan, AGMM_OP_MATMUL_ALL_REDUCE, io, stream);
}

agmm_status agmm_all_reduce_rmsnorm(agmm_plan *plan, const agmm_all_reduce_rmsnorm_io *io, void *stream)
{
    return plan_run(plan, AGMM_OP_ALL_REDUCE_RMSNORM, io, stream);
}
